"""Multi-round runs (``prompt.scoring.evolution``) in the store, on SQLite and a real
PostgreSQL server: every round's candidates (kind, parent, directive, seed, dropped
near-duplicates), judge results and scores, the survivors and each round's selector as rows
matching the record; one-round runs stored as round 0 exactly as before; ``runs show``
printing one line per round like the run's own summary; ``runs import`` and the jsonl export
rebuilding the same rows; and the queries over rounds in ``docs/store.md``."""

from __future__ import annotations

import contextlib
import io
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from image_project.backends.base import TextReply, TextRequest
from image_project.cli import command as cli
from image_project.record.run import RunRecord
from image_project.record.scoring import EvolutionRecord, ScoringRecord
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.store import open_store
from image_project.testing import FunctionTextBackend
from tests.store.test_store import delete_store, pg, runs_cli, snapshot
from tests.test_app import backends, make_cfg
from tests.test_cli import REPO, write_config
from tests.test_evolution_run import EVOLUTION, evolution_answer
from tests.test_scoring_run import role

SCORING = ("--set", "prompt.scoring.enabled=true")
EVOLVE = (
    *SCORING,
    "--set",
    "prompt.scoring.evolution.enabled=true",
    # Offline cards at seed 1 then drop one variant in round 1 and two in round 2 as
    # near-duplicates (seed 5 did, before the judge answers were keyed by card id and the
    # offline judges' request-seeded jitter moved with them).
    "--set",
    "prompt.scoring.evolution.near_duplicate_distance=0.6",
)
LLM = ("--set", "prompt.scoring.evolution.selector=llm")
DOCS = REPO / "docs" / "store.md"


def offline_run(
    tmp: Path, url: str, capsys: pytest.CaptureFixture[str] | None, *args: str
) -> tuple[RunRecord, str]:
    """One offline run through the CLI into the store at ``url``: its record and stdout.

    ``capsys`` None (a fixture wider than one test, which has no capsys): stdout and stderr
    are captured here, and the package logger, which the CLI gives a stderr handler, is put
    back as it was (tests/conftest.py does that per test, but only around the test)."""
    tmp.mkdir(parents=True, exist_ok=True)
    config = write_config(tmp)
    argv = ["--config", str(config), "--offline", "--seed", "1", "--set", f"store.url={url}"]
    if capsys is None:
        logger = logging.getLogger("image_project")
        handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
        stdout = io.StringIO()
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
                code = cli.main([*argv, *args], env={}, root=REPO)
        finally:
            logger.handlers, logger.level, logger.propagate = handlers, level, propagate
        out = stdout.getvalue()
    else:
        capsys.readouterr()
        code = cli.main([*argv, *args], env={}, root=REPO)
        out = capsys.readouterr().out
    assert code == 0, out
    (path,) = (tmp / "out" / "logs").glob("*_transcript.json")
    return RunRecord.model_validate_json(path.read_text(encoding="utf-8")), out


def scoring_of(record: RunRecord) -> ScoringRecord:
    scoring = record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord)
    return scoring


def evolution_of(record: RunRecord) -> EvolutionRecord:
    evolution = scoring_of(record).evolution
    assert evolution is not None
    return evolution


def of_run(rows: list[dict[str, Any]], record: RunRecord) -> list[dict[str, Any]]:
    return [r for r in rows if r["generation_id"] == record.generation_id]


def round_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("  Round ")]


def score_block(out: str) -> list[str]:
    """The score table: the ``Scores`` header and the rows under it."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  Scores "))
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not re.match(r" {14}[A-Z]+ ", line):
            break
        block.append(line)
    return block


def docs_query(marker: str) -> str:
    """The SQL block of docs/store.md that contains ``marker``."""
    blocks = re.findall(r"```sql\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    (query,) = [b for b in blocks if marker in b]
    return str(query)


def test_every_round_is_stored_as_rows_matching_the_record(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code_run, _ = offline_run(tmp_path / "code", store_url, capsys, *EVOLVE)
    llm_run, _ = offline_run(tmp_path / "llm", store_url, capsys, *EVOLVE, *LLM)
    tables = snapshot(store_url)
    for record in (code_run, llm_run):
        scoring, evolution = scoring_of(record), evolution_of(record)
        assert [r.index for r in evolution.rounds] == [0, 1, 2]
        candidates = {(r["round"], r["card_id"]): r for r in of_run(tables["candidates"], record)}
        expected_candidates = {(r.index, c.id): c for r in evolution.rounds for c in r.candidates}
        assert candidates.keys() == expected_candidates.keys()
        for (index, card_id), c in expected_candidates.items():
            row = candidates[index, card_id]
            assert (row["kind"], row["parent"], row["direction"], row["seed"]) == (
                c.kind,
                c.parent,
                c.directive,
                c.seed,
            )
            assert row["card"] == (c.card.model_dump(mode="json") if c.card else None)
            dropped = (c.dropped.of, c.dropped.distance, c.dropped.threshold) if c.dropped else None
            assert (
                (row["dropped_of"], row["dropped_distance"], row["dropped_threshold"])
                if row["dropped_of"] is not None
                else None
            ) == dropped
        medians = {(r.index, row.id): row.median for r in evolution.rounds for row in r.score_table}
        assert {k: v["median"] for k, v in candidates.items() if v["median"] is not None} == medians
        dropped_rows = [k for k, v in candidates.items() if v["dropped_of"] is not None]
        assert dropped_rows == [
            (r.index, c.id) for r in evolution.rounds for c in r.candidates if c.dropped
        ]
        assert dropped_rows and all(index > 0 for index, _ in dropped_rows)
        assert all(candidates[k]["median"] is None for k in dropped_rows)
        assert [k for k, v in candidates.items() if v["selected"]] == [(2, scoring.selected_id)]
        assert {k[0] for k, v in candidates.items() if v["rank"] is not None} == {2}

        scores = {
            (r["round"], r["card_id"], r["judge_id"]): r["score"]
            for r in of_run(tables["scores"], record)
        }
        assert scores == {
            (r.index, card, j.id): s
            for r in evolution.rounds
            for j in r.judges
            for card, s in (j.scores or {}).items()
        }
        assert not any((k[0], k[1]) in dropped_rows for k in scores)
        judges = [
            (r["round"], r["judge_id"], r["status"], r["presented_order"])
            for r in of_run(tables["judge_results"], record)
        ]
        assert judges == [
            (r.index, j.id, j.status, list(j.order)) for r in evolution.rounds for j in r.judges
        ]
        survivors = [
            (r["round"], r["position"], r["card_id"], r["category"], r["reason"], r["proposed_by"])
            for r in of_run(tables["survivors"], record)
        ]
        assert sorted(survivors) == [
            (r.index, p, s.id, s.category, s.reason, s.proposed_by)
            for r in evolution.rounds
            for p, s in enumerate(r.survivors)
        ]
        assert len(survivors) == 6
        rounds = [
            (r["round"], r["selector_kind"], r["selector_status"], r["selector_attempts"])
            for r in of_run(tables["rounds"], record)
        ]
        selectors = [r.selector for r in evolution.rounds]
        assert rounds == [
            (r.index, s.kind, s.status, s.attempts) if s else (r.index, None, None, None)
            for r, s in zip(evolution.rounds, selectors, strict=True)
        ]
        (selection,) = of_run(tables["selections"], record)
        assert selection["selected_id"] == scoring.selected_id
        assert selection["evolution"] == evolution.model_dump(mode="json", exclude={"rounds"})
    kinds = {r["selector_kind"] for r in of_run(tables["rounds"], llm_run)}
    assert kinds == {"llm", None}
    assert {r["proposed_by"] for r in of_run(tables["survivors"], llm_run)} == {"llm"}
    assert {r["proposed_by"] for r in of_run(tables["survivors"], code_run)} == {"code"}


def test_one_round_runs_are_round_0_with_no_round_or_survivor_rows(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    record, _ = offline_run(tmp_path, store_url, capsys, *SCORING)
    scoring = scoring_of(record)
    assert scoring.evolution is None
    tables = snapshot(store_url)
    assert tables["rounds"] == [] and tables["survivors"] == []
    assert [(r["round"], r["card_id"], r["kind"], r["parent"]) for r in tables["candidates"]] == [
        (0, c.id, "card", None) for c in scoring.candidates
    ]
    assert [r["direction"] for r in tables["candidates"]] == [
        c.direction for c in scoring.candidates
    ]
    assert all(r["dropped_of"] is None for r in tables["candidates"])
    assert [(r["round"], r["judge_id"]) for r in tables["judge_results"]] == [
        (0, j.id) for j in scoring.judges
    ]
    assert {r["round"] for r in tables["scores"]} == {0}
    assert len(tables["scores"]) == sum(len(j.scores or {}) for j in scoring.judges)
    (selection,) = tables["selections"]
    assert selection["evolution"] is None and selection["selected_id"] == scoring.selected_id


def test_runs_show_and_list_of_an_evolution_run(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    record, summary = offline_run(tmp_path, store_url, capsys, *EVOLVE)
    scoring, evolution = scoring_of(record), evolution_of(record)
    code, shown = runs_cli(capsys, store_url, "show", record.generation_id[:-3])
    assert code == 0, shown
    lines = round_lines(shown)
    assert lines == round_lines(summary) and len(lines) == len(evolution.rounds) == 3
    for line, r in zip(lines, evolution.rounds, strict=True):
        best = min(r.score_table, key=lambda row: (-row.effective_score, -row.aggregate, row.id))
        assert f"best {best.id} median(rz) {best.aggregate}" in line  # the default label
        for s in r.survivors:
            assert f"{s.id} {s.category}" in line
    assert "1 near-duplicate dropped" in lines[1]
    assert score_block(shown) == score_block(summary)
    assert [row.split()[0] for row in score_block(shown)[1:]] == [
        row.id for row in scoring.score_table
    ]
    assert any(line.rstrip().endswith("<") for line in score_block(shown))

    code, listed = runs_cli(capsys, store_url, "list")
    assert code == 0, listed
    n = len(scoring.judges)
    assert f"[judges {n}/{n} ok: {', '.join(j.id for j in scoring.judges)}]" in listed
    code, listed = runs_cli(capsys, store_url, "list", "--judge", scoring.judges[0].id)
    assert record.generation_id in listed


def test_import_and_jsonl_export_rebuild_every_round(
    tmp_path: Path,
    store_url: str,
    engine: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    runs = [
        offline_run(tmp_path / "code", store_url, capsys, *EVOLVE)[0],
        offline_run(tmp_path / "llm", store_url, capsys, *EVOLVE, *LLM)[0],
        offline_run(tmp_path / "plain", store_url, capsys, *SCORING)[0],
    ]
    before = snapshot(store_url)
    assert {r["generation_id"] for r in before["rounds"]} == {r.generation_id for r in runs[:2]}
    logs = [str(tmp_path / name / "out" / "logs") for name in ("code", "llm", "plain")]

    delete_store(store_url, pg(request, engine))
    code, out = runs_cli(capsys, store_url, "import", *logs)
    assert code == 0 and "imported 3 run(s)" in out, out
    assert snapshot(store_url) == before

    export = tmp_path / "export.jsonl"
    code, out = runs_cli(capsys, store_url, "export", "--format", "jsonl", "--out", str(export))
    assert code == 0, out
    exported = sorted(
        RunRecord.model_validate_json(line).model_dump_json()
        for line in export.read_text(encoding="utf-8").splitlines()
    )
    assert exported == sorted(r.model_dump_json() for r in runs)
    delete_store(store_url, pg(request, engine))
    code, out = runs_cli(capsys, store_url, "import", str(export))
    assert code == 0 and "imported 3 run(s)" in out, out
    assert snapshot(store_url) == before


def test_the_documented_round_queries(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [
        offline_run(tmp_path / "code", store_url, capsys, *EVOLVE)[0],
        offline_run(tmp_path / "llm", store_url, capsys, *EVOLVE, *LLM)[0],
    ]
    plain, _ = offline_run(tmp_path / "plain", store_url, capsys, *SCORING)
    expected: dict[str, int] = {}
    progress = []
    for record in runs:
        scoring, evolution = scoring_of(record), evolution_of(record)
        last = evolution.rounds[-1]
        pick = next(c for c in last.candidates if c.id == scoring.selected_id)
        ancestor = pick.parent if pick.kind == "variant" else pick.id
        previous = evolution.rounds[-2]
        category = next(s.category for s in previous.survivors if s.id == ancestor)
        expected[category] = expected.get(category, 0) + 1
        for r in evolution.rounds:
            best = max(row.median for row in r.score_table)
            dropped = sum(1 for c in r.candidates if c.dropped is not None)
            progress.append((record.generation_id, r.index, best, len(r.score_table), dropped))
    one_round = scoring_of(plain)
    progress.append(
        (
            plain.generation_id,
            0,
            max(row.median for row in one_round.score_table),
            len(one_round.score_table),
            0,
        )
    )

    with open_store(store_url) as store, store.engine.connect() as conn:
        leads = conn.execute(text(docs_query("JOIN survivors s"))).all()
        per_round = conn.execute(text(docs_query("MAX(c.median)"))).all()
    assert {category: int(picks) for category, picks in leads} == expected
    assert [int(n) for _, n in leads] == sorted((int(n) for _, n in leads), reverse=True)
    assert sorted(
        (gid, int(index), float(best), int(judged), int(dropped))
        for gid, index, best, judged, dropped in per_round
    ) == sorted((gid, i, float(b), j, d) for gid, i, b, j, d in progress)


@pytest.mark.anyio
async def test_a_run_failing_in_a_later_round_is_stored_with_every_round_so_far(
    tmp_path: Path, store_url: str
) -> None:
    def round_two_judges_break(request: TextRequest) -> str | TextReply:
        # Round 2's candidates include M..R: every judge of that round answers garbage.
        schema = request.json_schema
        if role(request) == "idea_scores" and schema is not None:  # noqa: SIM102
            if "M" in schema.schema["properties"]["scores"]["required"]:
                return "{not json"
        return evolution_answer(request)

    with pytest.raises(RunFailed) as caught:
        await run_generation(
            make_cfg(tmp_path, f"store.url={store_url}", *EVOLUTION),
            backends(FunctionTextBackend(round_two_judges_break)),
        )
    record = caught.value.record
    evolution = evolution_of(record)
    tables = snapshot(store_url)
    (run,) = tables["runs"]
    assert (
        run["status"] == "failed" and run["error_path"] == "pipeline/blackbox_scoring/round_2/table"
    )
    assert [r["round"] for r in tables["rounds"]] == [0, 1, 2]
    by_place = sorted(tables["survivors"], key=lambda r: (r["round"], r["position"]))
    assert [(r["round"], r["category"]) for r in by_place] == [
        (r.index, s.category) for r in evolution.rounds for s in r.survivors
    ]
    assert {r["status"] for r in tables["judge_results"] if r["round"] == 2} == {"parse_error"}
    assert {r["round"] for r in tables["scores"]} == {0, 1}
    last = [r for r in tables["candidates"] if r["round"] == 2]
    assert sorted((r["position"], r["card_id"]) for r in last) == list(
        enumerate(c.id for c in evolution.rounds[2].candidates)
    )
    assert all(r["median"] is None and r["rank"] is None for r in last)
    assert not any(r["selected"] for r in tables["candidates"])
    (selection,) = tables["selections"]
    assert selection["selected_id"] is None and selection["mode"] is None
