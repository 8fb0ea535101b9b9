"""The three ways to start the command line, run as real child processes (offline, no API key).

``image-project`` (the console script), ``python -m image_project`` and ``python main.py`` are
one CLI: from the repository root, each prints the same summary for ``--seed 42`` apart from
the generation id, the output paths and the timing. ``generate`` is the default subcommand, so
``X generate --seed 42`` equals ``X --seed 42``. ``main.py`` reads ``config/`` next to itself;
the other two read it from the current directory, or run on the built-in defaults without one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The console script pip installs next to the interpreter (a virtualenv's bin/ or Scripts/).
CONSOLE_SCRIPT = Path(sys.executable).parent / (
    "image-project.exe" if sys.platform == "win32" else "image-project"
)
ENTRY_POINTS = {
    "image-project": [str(CONSOLE_SCRIPT)],
    "python -m image_project": [sys.executable, "-m", "image_project"],
    "python main.py": [sys.executable, str(REPO / "main.py")],
}
GENERATION_ID = re.compile(r"\d{8}_\d{6}_[0-9a-f]{8}")
TIMING = re.compile(r", \d+(\.\d+)? s$", re.MULTILINE)


def command(name: str) -> list[str]:
    if name == "image-project" and not CONSOLE_SCRIPT.exists():
        pytest.skip(
            f"console script not installed at {CONSOLE_SCRIPT} "
            "(run `pip install -e .` in this interpreter's environment)"
        )
    return ENTRY_POINTS[name]


def run(
    argv: list[str], cwd: Path, *args: str, out: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv ARGS`` in ``cwd`` with no OpenAI variables; ``out`` takes every output file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "IMAGE_PROJECT"))}
    outputs: list[str] = []
    if out is not None:
        outputs = [
            *("--set", f"image.log_path={out / 'logs'}"),
            *("--set", f"image.generation_path={out / 'images'}"),
            *("--set", f"prompt.generations_path={out / 'generations.csv'}"),
        ]
    return subprocess.run(
        [*argv, *args, *outputs],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def summary(argv: list[str], out: Path, *args: str, cwd: Path = REPO) -> str:
    """The run's stdout with the generation id, ``out`` and the wall time masked."""
    assert not out.exists()  # a fresh output directory: the title is #001 every time
    result = run(argv, cwd, *args, out=out)
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(out), "<OUT>")
    text = GENERATION_ID.sub("<ID>", text)
    return TIMING.sub(", <T> s", text)


class Summaries:
    """Each entry point's masked summary for ``--seed 42`` (``generate --seed 42`` when
    ``explicit``), run once per module from the repository root into a fresh directory."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self._tmp = tmp
        self._cache: dict[tuple[str, bool], str] = {}

    def get(self, name: str, *, explicit: bool = False) -> str:
        key = (name, explicit)
        if key not in self._cache:
            out = self._tmp.mktemp("run") / "out"
            args = ["generate", "--seed", "42"] if explicit else ["--seed", "42"]
            self._cache[key] = summary(command(name), out, *args)
        return self._cache[key]


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory) -> Summaries:
    return Summaries(tmp_path_factory)


@pytest.fixture(scope="module")
def reference(summaries: Summaries) -> str:
    """``python main.py --seed 42`` from the repository root."""
    return summaries.get("python main.py")


def test_reference_summary_is_a_full_offline_run(reference: str) -> None:
    lines = reference.splitlines()
    assert lines[0].startswith("Using the built-in OFFLINE backend")
    assert lines[1] == "Generation <ID>  (seed 42, offline backend, concurrent)"
    assert lines[3].startswith("  Title       #001 - ")
    assert any(
        re.fullmatch(r"  Image       <OUT>/images/<ID>_image\.jpg \([\d,]+ bytes\)", line)
        for line in lines
    )
    assert "  Transcript  <OUT>/logs/<ID>_transcript.json" in lines
    assert re.fullmatch(r"  Model calls \d+ text \+ 1 image, [\d,]+ tokens, <T> s", lines[-2])
    assert lines[-1] == "  Store       sqlite:///<OUT>/logs/runs.sqlite"  # the default store


@pytest.mark.parametrize(
    ("name", "explicit"),
    [
        ("image-project", False),
        ("image-project", True),
        ("python -m image_project", False),
        ("python -m image_project", True),
        ("python main.py", True),
    ],
)
def test_every_entry_point_prints_the_same_summary_as_main_py(
    name: str, explicit: bool, summaries: Summaries, reference: str
) -> None:
    assert summaries.get(name, explicit=explicit) == reference


def test_console_script_generate_equals_no_subcommand(summaries: Summaries) -> None:
    implied = summaries.get("image-project")
    assert summaries.get("image-project", explicit=True) == implied


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_help_and_usage_errors_name_the_command_as_invoked(name: str) -> None:
    help_ = run(command(name), REPO, "--help")
    assert help_.returncode == 0, help_.stderr
    assert help_.stdout.startswith(f"usage: {name} [generate] [options]\n")
    assert "generate" in help_.stdout.split("commands:")[1]
    assert "--seed N" in help_.stdout  # the generate options are listed at the top level
    bad_value = run(command(name), REPO, "--seed", "x")
    assert bad_value.returncode == 2
    assert bad_value.stderr.startswith(f"usage: {name} generate [-h]")
    assert f"{name} generate: error: argument --seed: invalid int value: 'x'" in bad_value.stderr


def test_main_py_reads_config_next_to_itself_the_others_from_the_current_directory(
    reference: str, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    from_elsewhere = summary(
        ENTRY_POINTS["python main.py"], tmp_path / "out", "--seed", "42", cwd=elsewhere
    )
    assert from_elsewhere == reference
    # No config/ here: the module runs on the built-in defaults (the checkout's config and
    # input files, shipped in the package), so the run is the same.
    module = run(
        ENTRY_POINTS["python -m image_project"], elsewhere, "--seed", "42", out=tmp_path / "m"
    )
    assert module.returncode == 0, module.stderr
    assert f"No config/config.yaml in {elsewhere.resolve()}: using the built-in" in module.stderr
    masked = GENERATION_ID.sub("<ID>", module.stdout.replace(str(tmp_path / "m"), "<OUT>"))
    assert TIMING.sub(", <T> s", masked) == reference
    assert list(elsewhere.iterdir()) == []
