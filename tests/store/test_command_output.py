"""What ``runs list`` / ``show`` / ``stats`` print is data from records: control characters
are escaped, a filter that matches nothing is answered alike by every command, interrupted
runs are counted apart from failed ones, and a run without a scoring record says why in
words that are true."""

from __future__ import annotations

from pathlib import Path

import pytest

from image_project.cli import command as cli
from image_project.record.events import ActionEvent
from image_project.record.run import RunError, RunRecord
from image_project.record.scoring import ScoringOff
from image_project.run.batch import summary_text
from image_project.run.state import RunResult
from tests.support.records import judge, run

HOSTILE = "Evil\x1b]0;owned\x07 \x1b[2J\x1b[31mred\r\u202egnp.exe\x9b"


def _store(tmp_path: Path, records: list[RunRecord]) -> str:
    logs = tmp_path / "logs"
    logs.mkdir()
    for record in records:
        (logs / f"{record.generation_id}_transcript.json").write_text(
            record.model_dump_json(), encoding="utf-8"
        )
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert cli.main(["runs", "import", str(logs), "--store", store], env={}) == 0
    return store


def _interrupted(record: RunRecord, phase: str) -> RunRecord:
    error = RunError(type="interrupted", message="interrupted", phase=phase)
    return record.model_copy(update={"error": error})


def _terminal_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]


def test_list_and_show_escape_control_characters_from_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = run(1, [judge("j\x1b[1m", {"A": 1, "B": 2, "C": 3})], title=HOSTILE)
    store = _store(tmp_path, [record])
    capsys.readouterr()
    for command in (["runs", "list"], ["runs", "show", "run001"], ["runs", "stats"]):
        assert cli.main([*command, "--store", store], env={}) == 0
        out = capsys.readouterr().out
        assert _terminal_controls(out) == [], command
        assert "\u202e" not in out
    assert cli.main(["runs", "list", "--store", store], env={}) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert "Evil\\x1b]0;owned\\x07 \\x1b[2J\\x1b[31mred\\x0d\\u202egnp.exe\\x9b" in line


def test_a_filter_that_matches_nothing_is_answered_alike_by_list_and_stats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _store(tmp_path, [run(1, [judge("strict", {"A": 1, "B": 2, "C": 3})])])
    capsys.readouterr()
    answers = []
    for command in ("list", "stats"):
        code = cli.main(["runs", command, "--judge", "nosuch", "--store", store], env={})
        out, err = capsys.readouterr()
        answers.append((code, out, err.startswith("no stored runs match")))
    assert answers == [(0, "", True), (0, "", True)]


def test_the_stats_header_counts_interrupted_runs_apart_from_failed_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scores = {"A": 1, "B": 2, "C": 3}
    records = [
        run(1, [judge("a", scores), judge("b", scores)]),
        run(2, [judge("a", scores), judge("b", scores)], failed=True),
        _interrupted(run(3, [judge("a", scores), judge("b", scores)]), "pipeline"),
        _interrupted(run(4, [judge("a", scores), judge("b", scores)]), "image"),
    ]
    store = _store(tmp_path, records)
    capsys.readouterr()
    assert cli.main(["runs", "stats", "--store", store], env={}) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head == "Judge panel over 4 runs (4 with scoring, 1 failed, 2 interrupted)"


def test_show_says_why_an_interrupted_run_has_no_scoring_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    step = ActionEvent(
        name="draft", path="pipeline/initial_prompt/draft", created_at="x", latency_ms=1.0
    )
    early = _interrupted(run(1, scoring=False), "concept_filter")
    late = _interrupted(run(2, scoring=False), "image").model_copy(update={"steps": (step,)})
    assert isinstance(late.blackbox_scoring, ScoringOff)
    store = _store(tmp_path, [early, late])
    capsys.readouterr()
    said = {}
    for n in (1, 2):
        assert cli.main(["runs", "show", f"run00{n}", "--store", store], env={}) == 0
        out = capsys.readouterr().out
        said[n] = next(ln for ln in out.splitlines() if ln.startswith("  Scoring"))
        assert "had not started" not in out
    assert "interrupted in phase concept_filter, before the prompt pipeline" in said[1]
    assert "whether scoring was configured is not recorded" in said[1]
    assert "interrupted in phase image; scoring was not configured" in said[2]


def test_the_summary_after_a_run_escapes_what_the_model_wrote(tmp_path: Path) -> None:
    record = run(1, scoring=False, title=HOSTILE, concepts=["Tide\x1b[8m pools"])
    text = summary_text(RunResult(record, tmp_path / "t.json", tmp_path / "t.log"))
    assert _terminal_controls(text) == [] and "\u202e" not in text
    assert "Evil\\x1b]0;owned\\x07" in text and "Tide\\x1b[8m pools" in text
