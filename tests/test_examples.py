"""The example outputs of README.md and docs/*.md are what their commands print
(scripts/examples.py): every marked example is re-run and compared, an edited example fails
the check, and the parts the script is made of (markers, masks) behave as documented."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from image_project.cli.command import build_parser

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import examples  # noqa: E402

SCRIPT = REPO / "scripts" / "examples.py"


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


# --------------------------------------------------------------------------- the real docs


def test_every_example_matches_what_its_command_prints() -> None:
    checked = _script("--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert re.search(r"(\d+) example\(s\), 0 differ", checked.stderr), checked.stderr


def test_the_docs_mark_their_examples() -> None:
    found = {
        (path.name, e.name)
        for path in examples.files_of(examples.DEFAULT_FILES)
        for e in examples.parse(path)
    }
    for wanted in [
        ("README.md", "seed-42"),
        ("README.md", "scoring-panel"),
        ("upscale.md", "upscale-fallback"),
        ("context.md", "context"),
        ("configuration.md", "config-error"),
        ("cli.md", "seed-42-progress"),
        ("scoring.md", "config-errors"),
        ("models.md", "capability-errors"),
        ("store.md", "runs-list"),
        ("store.md", "runs-show"),
        ("review.md", "runs-stats"),
        ("review.md", "review"),
    ]:
        assert wanted in found


def _one_example(tmp_path: Path, name: str) -> Path:
    """A copy of docs/configuration.md's example ``name`` (marker to marker) as a document of
    its own."""
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    start = text.index(f"<!-- example: {name} ")
    end = text.index(examples._CLOSE, start) + len(examples._CLOSE)
    doc = tmp_path / "doc.md"
    doc.write_text(f"# A copy\n\n{text[start:end]}\n", encoding="utf-8")
    return doc


def test_an_edited_example_fails_the_check_and_write_repairs_it(tmp_path: Path) -> None:
    doc = _one_example(tmp_path, "config-error")
    assert _script("--check", str(doc)).returncode == 0

    good = doc.read_text(encoding="utf-8")
    doc.write_text(good.replace("must be an int in 2..52", "must be an int in 2..99"))
    checked = _script("--check", str(doc))
    assert checked.returncode == 1
    assert f"--- {doc}: example 'config-error' (in the file)" in checked.stdout
    assert f"+++ {doc}: example 'config-error' (printed now)" in checked.stdout
    assert "-configuration error: prompt.scoring.num_ideas: got 1, must be an int in 2..99" in (
        checked.stdout
    )
    assert "+configuration error: prompt.scoring.num_ideas: got 1, must be an int in 2..52" in (
        checked.stdout
    )
    assert "1 example(s), 1 differ" in checked.stderr

    written = _script("--write", str(doc))
    assert written.returncode == 0, written.stderr
    assert doc.read_text(encoding="utf-8") == good
    assert _script("--check", str(doc)).returncode == 0


def test_an_example_whose_command_fails_is_an_error(tmp_path: Path) -> None:
    doc = _one_example(tmp_path, "config-error")
    doc.write_text(doc.read_text(encoding="utf-8").replace(" exit=2", ""), encoding="utf-8")
    checked = _script("--check", str(doc))
    assert checked.returncode == 2
    assert "example 'config-error': exit 2, expected 0" in checked.stderr


def test_the_synopsis_lists_every_option() -> None:
    cli = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    synopsis = cli[cli.index("```\nimage-project [generate]") :].split("```\n", 2)[1]
    for action in build_parser()._actions:
        for option in action.option_strings:
            if option not in ("-h", "--help", "--quiet", "--verbose"):
                assert option in synopsis, option


def test_the_store_synopsis_lists_every_runs_command_and_its_options() -> None:
    store = (REPO / "docs" / "store.md").read_text(encoding="utf-8")
    synopsis = store[store.index("```\nimage-project runs list") :].split("```\n", 2)[1]
    lines = {line.split()[2]: line for line in synopsis.splitlines()}
    (runs,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    (commands,) = (
        a for a in runs.choices["runs"]._actions if isinstance(a, argparse._SubParsersAction)
    )
    common = {"-h", "--help", "--config", "--set", "--store"}  # the sentence after it
    for name, parser in commands.choices.items():
        assert name in lines, name
        for action in parser._actions:
            for option in set(action.option_strings) - common:
                assert option in lines[name], (name, option)


# --------------------------------------------------------------------------- the parts


def _doc(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "doc.md"
    path.write_text(body, encoding="utf-8")
    return path


def test_parse_reads_the_command_the_output_and_the_options(tmp_path: Path) -> None:
    path = _doc(
        tmp_path,
        "text\n<!-- example: one stream=stderr exit=2 -->\n```bash\necho hi\n```\n\n"
        "```\nhi\nthere\n```\n<!-- /example -->\n"
        '<!-- example: two of=one from="th" -->\n```\nthere\n```\n<!-- /example -->\n',
    )
    one, two = examples.parse(path)
    assert (one.name, one.command, one.output) == ("one", "echo hi", "hi\nthere")
    assert one.options == {"stream": "stderr", "exit": "2"}
    assert (two.command, two.options) == (None, {"of": "one", "from": "th"})
    assert [g[0].name for g in examples.groups([one, two])] == ["one"]


def test_a_file_example_is_written_into_the_project_of_the_examples_naming_it(
    tmp_path: Path,
) -> None:
    path = _doc(
        tmp_path,
        "<!-- example: rubric file=config/mine.md -->\n```\nStart at 60.\n```\n<!-- /example -->\n"
        "<!-- example: show files=rubric -->\n```bash\ncat config/mine.md; pwd\n```\n\n"
        "```\nstale\n```\n<!-- /example -->\n",
    )
    parsed = examples.parse(path)
    outputs = examples.produce(parsed, jobs=1)
    assert outputs == {(path, "show"): "Start at 60.\n."}  # the project directory, masked
    (show,) = (e for e in parsed if e.name == "show")
    assert examples.differences([show], outputs)  # "stale" differs; the file example is input


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<!-- example: a -->\n```\nx\n```\n", "no <!-- /example --> after it"),
        ("<!-- example: a -->\n```\nx\n```\n<!-- /example -->\n", "1 fenced block(s), expected 2"),
        ("<!-- example: a colour=red -->\n<!-- /example -->\n", "bad option 'colour=red'"),
        ("<!-- /example -->\n", "a marker out of place"),
        ("<!-- example: a -->\n```\nx\n<!-- /example -->\n", "does not close"),
    ],
)
def test_a_bad_marker_is_an_error_naming_the_place(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(examples.ExampleError, match=re.escape(message)):
        examples.parse(_doc(tmp_path, body))


def test_mask_makes_paths_relative_numbers_ids_and_hides_durations(tmp_path: Path) -> None:
    session = examples.Session(tmp_path)
    first, second = "20261127_232602_e1a66f14", "20261127_232603_0a1b2c3d"
    printed = (
        f"Generation {second}\n  Image {tmp_path}/output/images/{second}_image.jpg\n"
        f"  Store sqlite:///{tmp_path}/output/logs/runs.sqlite\n"
        f"[  12.5s] ✓ records (upscale 0.4 s), seed 42, roll 0.534, {first}\n"
        "created 2026-11-27T23:42:24Z, 2026-11-27 23:42; Halloween 2026-10-31"
    )
    assert examples.mask(printed, session) == (
        "Generation 20260101_120001_00000001\n"
        "  Image output/images/20260101_120001_00000001_image.jpg\n"
        "  Store sqlite:///output/logs/runs.sqlite\n"
        "[  NN.Ns] ✓ records (upscale N.N s), seed 42, roll 0.534, 20260101_120002_00000002\n"
        "created YYYY-MM-DDThh:mm:ssZ, YYYY-MM-DD hh:mm; Halloween 2026-10-31"
    )
    # A placeholder in a command (whole, or the unique start `runs show` takes) is made real.
    assert examples.unmask("runs show 20260101_120002", session) == f"runs show {first[:15]}"
    assert examples.unmask("x 20260101_120001_00000001", session) == f"x {second}"


def test_a_placeholder_prefix_shared_by_two_real_ids_becomes_the_whole_id(tmp_path: Path) -> None:
    # Two runs started in the same second: their first 15 characters name both.
    session = examples.Session(
        tmp_path, ids=["20261128_024204_a6e4cafd", "20261128_024204_ae0913d3"]
    )
    assert examples.unmask("runs show 20260101_120001", session) == (
        "runs show 20261128_024204_a6e4cafd"
    )
    assert examples.unmask("runs show 20260101_120002", session) == (
        "runs show 20261128_024204_ae0913d3"
    )
