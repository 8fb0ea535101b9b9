"""``runs show ID --calls`` lists every model call of a run, one aligned line each (path,
role, model, protocol, tokens, latency, attempts, status), and ``runs show ID --call PATH``
prints one call whole: its request's messages, every rejected answer with the reason its
re-ask gave, its answer, and for a judge's call its rationales or pairwise choice. A path
that names no call exits 2 with the closest paths; text from a record reaches the terminal
with its control characters escaped. Real offline runs, the CLI in-process against the
store they wrote (and a transcript imported into it)."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from image_project.cli import command as cli
from image_project.record.events import ChatEvent, ImageEvent
from image_project.record.run import RunRecord
from image_project.record.scoring import JudgeResult, ScoringRecord
from tests.review.offline_runs import make_protocol_run, make_round_runs


@dataclass(frozen=True)
class Made:
    protocols: RunRecord
    protocols_store: str
    rounds: dict[str, RunRecord]
    rounds_store: str


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    work = tmp_path_factory.mktemp("runs-calls")
    protocols = make_protocol_run(work / "protocols")
    rounds = make_round_runs(work / "rounds")
    return Made(
        protocols,
        f"sqlite:///{work / 'protocols' / 'logs' / 'runs.sqlite'}",
        rounds,
        f"sqlite:///{work / 'rounds' / 'logs' / 'runs.sqlite'}",
    )


def show(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["runs", "show", *args, "--store", url], env={})
    out, err = capsys.readouterr()
    return code, out, err


def judge_by(record: RunRecord, protocol: str) -> JudgeResult:
    """The run's judge of ``protocol``."""
    scoring = record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord)
    return next(j for j in scoring.judges if j.protocol == protocol)


def calls_of(record: RunRecord) -> list[ChatEvent | ImageEvent]:
    return [s for s in record.steps if isinstance(s, ChatEvent | ImageEvent)]


def columns(header: str) -> dict[str, int]:
    """Where each column of the calls list starts (its name's first character; the three
    number columns are right-aligned: where their name ends)."""
    starts = {m.group(): m.start() for m in re.finditer(r"\S+", header)}
    for name in ("tokens", "latency", "attempts"):
        starts[name] += len(name)
    return starts


def test_calls_lists_every_model_call_one_aligned_line_each(
    made: Made, capsys: pytest.CaptureFixture[str]
) -> None:
    record = made.protocols
    code, out, err = show(capsys, made.protocols_store, record.generation_id, "--calls")
    assert code == 0 and err == ""
    lines = out.splitlines()
    steps = calls_of(record)
    assert lines[0] == f"Model calls of {record.generation_id}: {len(steps)}"
    header, rows = lines[1], lines[2:]
    at = columns(header)
    assert " ".join(at) == "path role model protocol tokens latency attempts status"
    assert len(rows) == len(steps) and len(steps) > 50  # 30 pairwise calls among them
    for row, step in zip(rows, steps, strict=True):
        assert row[at["path"] :].split()[0] == step.path
        assert row[at["status"] :] == "ok"
        assert row[at["status"] - 2 : at["status"]] == "  "  # every row aligned on the header
        if isinstance(step, ChatEvent):
            assert row[: at["tokens"]].endswith(f"{step.usage.total_tokens:,}")
            assert row[: at["attempts"]].endswith(str(step.attempts))
            role = step.meta.get("role", "text")
            assert row[at["role"] :].split()[0] == role
            protocol = step.meta.get("protocol", "-") if role == "judge" else "-"
            assert row[at["protocol"] :].split()[0] == protocol
        else:
            assert row[at["role"] :].split()[:2] == ["image", step.model]
    pairwise = [r for r in rows if " pairwise " in r]
    duel = judge_by(record, "pairwise")
    assert len(pairwise) == len(duel.comparisons or ()) == 30


def test_call_prints_the_request_the_answer_and_the_judges_rationales(
    made: Made, capsys: pytest.CaptureFixture[str]
) -> None:
    record = made.protocols
    why = judge_by(record, "reasoned")
    step = next(s for s in record.chat_steps if s.path == why.path)
    code, out, err = show(capsys, made.protocols_store, record.generation_id, "--call", why.path)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith(f"Call {why.path}  ")
    assert "  role          judge, protocol reasoned" in lines
    assert f"  tokens        {step.usage.total_tokens:,} " in out
    request = lines.index("Request")
    answer = lines.index("Answer")
    assert request < lines.index("  system:") < lines.index("  user:") < answer
    assert step.system_prompt is not None and step.response is not None
    for text in (step.system_prompt, step.prompt, step.response):
        assert all(f"    {line}".rstrip() in lines for line in text.splitlines())
    assert lines[lines.index("  user:") + 1] == f"    {step.prompt.splitlines()[0]}"
    assert f"Judge {why.id} (reasoned): status ok" in lines
    assert why.rationales and len(why.rationales) == 6
    for card, rationale in why.rationales.items():
        assert f"  rationale {card}: {rationale}" in lines


def test_a_pairwise_call_prints_its_choice(made: Made, capsys: pytest.CaptureFixture[str]) -> None:
    record = made.protocols
    duel = judge_by(record, "pairwise")
    duels = [s for s in record.chat_steps if s.meta.get("judge_id") == duel.id]
    assert len(duels) == 30
    for step, (first, second, winner) in zip(duels[:3], duel.comparisons or (), strict=False):
        code, out, _ = show(capsys, made.protocols_store, record.generation_id, "--call", step.path)
        assert code == 0
        assert step.meta["order"] == [first, second]
        assert f"  pairwise choice: shown {first} then {second}; {winner} won" in out.splitlines()
        assert step.response is not None and f'"better": "{winner}"' in step.response


def test_call_prints_every_rejected_answer_with_its_reason(
    made: Made, capsys: pytest.CaptureFixture[str]
) -> None:
    record = made.rounds["rounds"]
    step = next(s for s in record.chat_steps if s.reasks)
    assert step.path.endswith("round_1/selector") and step.error is not None
    code, out, _ = show(capsys, made.rounds_store, record.generation_id, "--calls")
    assert code == 0
    row = next(ln for ln in out.splitlines() if ln.split()[0] == step.path)
    assert row.endswith(f"error: {step.error.reason}")
    code, out, _ = show(capsys, made.rounds_store, record.generation_id, "--call", step.path)
    assert code == 0
    lines = out.splitlines()
    total = len(step.reasks)
    heads = [ln for ln in lines if ln.startswith("Rejected answer ")]
    assert heads == [
        f"Rejected answer {n} of {total}: {r.error}" for n, r in enumerate(step.reasks, start=1)
    ]
    for reask, head in zip(step.reasks, heads, strict=True):
        at = lines.index(head)
        assert (
            lines[at + 1]
            == f"  ({len(reask.response):,} characters, sha256 {reask.response_sha256[:12]})"
        )
        assert lines[at + 2] == f"    {reask.response.splitlines()[0]}"
    assert f"  error         {step.error.type}: {step.error.message}" in lines
    assert "Answer, rejected (" in out


def test_the_call_that_failed_the_run_and_the_calls_cut_off_are_listed(
    made: Made, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = made.rounds["failed_early"]
    assert failed.error is not None and failed.error.path is not None
    code, out, _ = show(capsys, made.rounds_store, failed.generation_id, "--calls")
    assert code == 0
    rows = out.splitlines()[2:]
    assert [r.split()[0] for r in rows] == [failed.error.path]
    assert rows[0].endswith(f"failed the run: {failed.error.type}")
    code, out, _ = show(
        capsys, made.rounds_store, failed.generation_id, "--call", failed.error.path
    )
    assert code == 0
    assert f"  error         {failed.error.type}: {failed.error.message}" in out.splitlines()
    interrupted = made.rounds["interrupted"]
    assert interrupted.error is not None and len(interrupted.error.cancelled_paths) == 3
    code, out, _ = show(capsys, made.rounds_store, interrupted.generation_id, "--calls")
    assert code == 0
    rows = out.splitlines()[2:]
    assert len(rows) == len(calls_of(interrupted)) + 3
    cut = [r for r in rows if r.endswith("  cut off")]
    assert [r.split()[0] for r in cut] == list(interrupted.error.cancelled_paths)


def test_a_path_that_names_no_call_exits_2_naming_the_closest(
    made: Made, capsys: pytest.CaptureFixture[str]
) -> None:
    record = made.protocols
    why = judge_by(record, "reasoned")
    short = why.path.split("/", 1)[1]  # without "pipeline/"
    code, out, err = show(capsys, made.protocols_store, record.generation_id, "--call", short)
    assert code == 2 and out == ""
    assert err.startswith(f"error: --call: no call {short!r} in run {record.generation_id}")
    assert f"did you mean: {why.path}" in err
    code, out, err = show(capsys, made.protocols_store, record.generation_id, "--call", "titel")
    assert code == 2 and out == ""
    assert "did you mean: title" in err


def test_a_record_text_reaches_the_terminal_escaped(
    made: Made, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A transcript imported from anywhere: its answer, prompt and path carry ANSI escapes,
    a carriage return, a bell and a bidirectional override; none reaches the terminal raw,
    on stdout or in the "did you mean" of stderr, and the path's newline keeps its call on
    one line."""
    record = made.rounds["prompt_only"]
    hostile = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\rback\u202eevil\x9b"
    steps = list(record.steps)
    n, step = next((n, s) for n, s in enumerate(steps) if isinstance(s, ChatEvent))
    steps[n] = step.model_copy(
        update={"path": f"evil\n{hostile}", "prompt": hostile, "response": f"ok {hostile}"}
    )
    forged = record.model_copy(
        update={"generation_id": "20260101_000000_0000abcd", "steps": tuple(steps)}
    )
    transcript = tmp_path / "forged_transcript.json"
    transcript.write_text(forged.model_dump_json(), encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'store.sqlite'}"
    assert cli.main(["runs", "import", str(transcript), "--store", store], env={}) == 0
    escaped = r"\x1b]0;owned\x07\x1b[2J\x1b[31mred\x0dback\u202eevil\x9b"
    code, listing, _ = show(capsys, store, forged.generation_id, "--calls")
    assert code == 0
    row = next(ln for ln in listing.splitlines() if ln.startswith("  evil"))
    assert row.startswith(r"  evil\x0a" + escaped)  # the path's newline too: one line
    code, detail, _ = show(capsys, store, forged.generation_id, "--call", f"evil\n{hostile}")
    assert code == 0
    assert f"    {escaped}" in detail.splitlines() and f"    ok {escaped}" in detail.splitlines()
    code, _, near = show(capsys, store, forged.generation_id, "--call", "evil")
    assert code == 2 and r"did you mean: evil\x0a" + escaped in near
    for out in (listing, detail, near):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", out), out


def test_a_stored_record_that_does_not_read_is_named_not_a_traceback(
    made: Made, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    record = made.rounds["prompt_only"]
    transcript = tmp_path / "one_transcript.json"
    transcript.write_text(record.model_dump_json(), encoding="utf-8")
    database = tmp_path / "store.sqlite"
    store = f"sqlite:///{database}"
    assert cli.main(["runs", "import", str(transcript), "--store", store], env={}) == 0
    with sqlite3.connect(database) as conn:  # a store written by something else
        conn.execute("UPDATE runs SET record_json = ?", ('{"schema_version": 2, "steps": 7}',))
    code, out, err = show(capsys, store, record.generation_id, "--calls")
    assert code == 1 and out == ""
    assert err.startswith(f"error: the stored record of run {record.generation_id} is not a run")
    assert "Traceback" not in err
