"""docs/cli.md's promises that no other test asserts as written: ``init`` writes nothing when
one of its files exists; the closing line names the failed runs; the runs of a batch in
flight together carry a ``[run i/N]`` prefix and print their summaries in run order, whatever
order they finish in, each with its own log; the page's CSV columns and error keys are the
code's."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from image_project.cli.command import main
from image_project.config.defaults import STARTER_FILES
from image_project.run.batch import run_batch, runs_line
from image_project.run.batch_progress import BatchProgress
from image_project.seeding import run_seed
from image_project.testing import FunctionTextBackend
from tests.faults.common import make_cfg
from tests.test_app import backends
from tests.test_batch import Interleaving
from tests.test_cli import REPO


def test_init_writes_nothing_when_one_of_its_files_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "profile.csv").write_text("mine\n", encoding="utf-8")
    assert main(["init", str(tmp_path)], env={}) == 2
    assert "not overwriting" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "config").iterdir()) == ["profile.csv"]
    assert (tmp_path / "config" / "profile.csv").read_text(encoding="utf-8") == "mine\n"
    assert main(["init", str(tmp_path), "--force"], env={}) == 0
    assert sorted(p.name for p in (tmp_path / "config").iterdir()) == sorted(STARTER_FILES)


def test_the_closing_line_is_the_pages_for_no_failure_and_for_two() -> None:
    assert runs_line(5, []) == "5 of 5 succeeded"
    assert runs_line(5, [2, 4]) == "3 of 5 succeeded (runs 2, 4 failed; their errors are above)"


@pytest.mark.anyio
async def test_runs_in_flight_together_are_prefixed_and_summarised_in_run_order(
    tmp_path: Path,
) -> None:
    out, err = io.StringIO(), io.StringIO()
    progress = BatchProgress(4, quiet=False, together=True, out=out, err=err, bar=False)
    fake = Interleaving()
    cfg = make_cfg(tmp_path, "run.runs=4", "run.parallel=4", "run.mode=prompt_only")
    code = await run_batch(
        cfg, backends(FunctionTextBackend(fake.answer)), progress=progress, started=fake.attach
    )
    assert code == 0 and fake.most_in_flight > 1
    seeds = [run_seed(77, i) for i in range(4)]
    lines = err.getvalue().splitlines()
    for number in range(1, 5):
        assert f"[run {number}/4] started (seed {seeds[number - 1]})" in lines
        assert f"[run {number}/4] → concept filter" in lines
    ended = [int(m) for m in re.findall(r"^\[run (\d)/4\] done: ", err.getvalue(), re.M)]
    assert sorted(ended) == [1, 2, 3, 4] and ended != [1, 2, 3, 4], "control: out of order"
    printed = [int(s) for s in re.findall(r"^Generation \S+  \(seed (\d+),", out.getvalue(), re.M)]
    assert printed == seeds
    # Each run's log holds its own records only.
    logs = sorted((tmp_path / "out" / "logs").glob("*.log"))
    assert len(logs) == 4
    for log in logs:
        text = log.read_text(encoding="utf-8")
        assert f"Generation {log.stem} started" in text
        assert text.count("Step: dislike_rewrite ") == 1
        assert not [other.stem for other in logs if other != log and other.stem in text]


PAGE = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")


def listed(bullet: str, stop: str) -> list[str]:
    """The comma-separated names in the code spans of the page's ``bullet``, up to ``stop``."""
    start = PAGE.index(bullet) + len(bullet)
    text = PAGE[start : PAGE.index(stop, start)]
    spans = re.findall(r"`([^`]*)`", text.replace("\n", " "))
    return [name.strip() for span in spans for name in span.split(",") if name.strip()]


def test_the_pages_columns_are_the_files_and_the_error_keys_the_records() -> None:
    from image_project.artifacts.generations import GENERATIONS_FIELDS
    from image_project.artifacts.manifest import MANIFEST_FIELDS
    from image_project.record.run import RunError

    manifest = listed("**Titles manifest** `output/images/titles_manifest.csv`:", " (the last")
    assert manifest == list(MANIFEST_FIELDS)
    generations = listed("**Generations CSV** `output/generations.csv`:", "\n- ")
    assert generations == list(GENERATIONS_FIELDS)
    keys = listed("`error`: `null` on\n  success, else", "(`type: interrupted`")
    assert [k.strip("{}") for k in keys] == list(RunError.model_fields)
