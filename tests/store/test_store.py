"""The run store on SQLite and on a real PostgreSQL server (the same tests, both engines):
runs written at their end (success, failure, interrupt), ``runs list|show|export|import``,
rebuilding a deleted store from transcripts, the schema against the migrations, and a store
that cannot be written leaving every other artifact intact."""

from __future__ import annotations

import csv
import io
import shlex
from pathlib import Path
from typing import Any

import anyio
import pytest

from image_project.backends.base import TextRequest
from image_project.cli import command as cli
from image_project.config.store_url import sqlite_path
from image_project.record.run import RunRecord
from image_project.record.scoring import ScoringRecord
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed, RunResult
from image_project.store import open_store
from image_project.store.schema import ALL_TABLES, SCHEMA_REVISION, metadata
from image_project.testing import FunctionTextBackend
from tests.store.conftest import PostgresServer, free_port
from tests.test_app import answer, backends, make_cfg
from tests.test_scoring_run import ENSEMBLE, read_rows, scoring_answer

pytestmark = pytest.mark.anyio

VOLATILE = {"stored_at", "source"}
"""Columns that say when and how a row was stored, not what the run was."""


def failing(request: TextRequest) -> str:
    if "title_and_story" in request.messages[-1].content or len(request.messages) > 2:
        raise RuntimeError("the model service fell over")
    return answer(request)


async def five_runs(tmp: Path, url: str) -> list[RunRecord]:
    """Two standard runs, two scoring runs with a 3-judge ensemble, one failed run."""
    store = f"store.url={url}"
    records = []
    for seed in (1, 2):
        result = await run_generation(
            make_cfg(tmp, store, f"prompt.random_seed={seed}"),
            backends(FunctionTextBackend(answer)),
        )
        records.append(result.record)
    for seed in (3, 4):
        result = await run_generation(
            make_cfg(tmp, store, f"prompt.random_seed={seed}", *ENSEMBLE),
            backends(FunctionTextBackend(scoring_answer)),
        )
        records.append(result.record)
    with pytest.raises(RunFailed) as failed:
        await run_generation(
            make_cfg(tmp, store, "prompt.random_seed=5"), backends(FunctionTextBackend(failing))
        )
    records.append(failed.value.record)
    return records


def as_json(records: list[RunRecord]) -> list[str]:
    """Records as their JSON, by generation id (a record read back has no step ``order``,
    which is never serialised, so compare what is)."""
    return [r.model_dump_json() for r in sorted(records, key=lambda r: r.generation_id)]


def runs_cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["runs", *args, "--store", url], env={})
    out, err = capsys.readouterr()
    return code, out + err


def snapshot(url: str) -> dict[str, list[dict[str, Any]]]:
    with open_store(url) as store:
        return {
            table.name: [
                {k: v for k, v in row.items() if k not in VOLATILE}
                for row in store.table_rows(table.name)
            ]
            for table in ALL_TABLES
        }


def delete_store(url: str, postgres: PostgresServer | None) -> None:
    path = sqlite_path(url)
    if path is not None:
        path.unlink()
        return
    assert postgres is not None
    name = url.rsplit("/", 1)[1]
    postgres.drop_database(name)
    postgres.create_database(name)


def pg(request: pytest.FixtureRequest, engine: str) -> PostgresServer | None:
    if engine != "postgresql":
        return None
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server


async def test_five_runs_listed_shown_exported_and_rebuilt_from_transcripts(
    tmp_path: Path,
    store_url: str,
    engine: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    records = await five_runs(tmp_path, store_url)
    ids = [r.generation_id for r in records]

    code, out = runs_cli(capsys, store_url, "list")
    assert code == 0, out
    rows = out.strip().splitlines()[1:]
    assert len(rows) == 5
    listed = {line.split()[0]: line.split()[3] for line in rows}
    assert listed == {gid: ("failed" if gid == ids[4] else "ok") for gid in ids}
    # Newest first: the runs were made one after another, some in the same second.
    assert [line.split()[0] for line in rows] == ids[::-1]

    code, out = runs_cli(capsys, store_url, "list", "--failed")
    assert [line.split()[0] for line in out.strip().splitlines()[1:]] == [ids[4]]
    assert "RuntimeError in pipeline" in out
    code, out = runs_cli(capsys, store_url, "list", "--judge", "warm")
    assert sorted(line.split()[0] for line in out.strip().splitlines()[1:]) == sorted(ids[2:4])
    code, out = runs_cli(capsys, store_url, "show", ids[4])
    assert code == 0 and "Status      failed" in out
    assert "Error       RuntimeError in phase pipeline" in out and "fell over" in out
    code, out = runs_cli(capsys, store_url, "show", "no_such_run")
    assert code == 2 and "no stored run" in out
    code, out = runs_cli(capsys, store_url, "list", "--limit", "2")
    assert len(out.strip().splitlines()) == 3

    scored = records[3]
    assert isinstance(scored.blackbox_scoring, ScoringRecord)
    code, out = runs_cli(capsys, store_url, "show", scored.generation_id)
    assert code == 0, out
    header = next(line for line in out.splitlines() if "Scores" in line)
    assert header.split()[1:5] == ["card", "strict", "warm", "novel"]
    table = [
        line.split() for line in out.splitlines() if line.strip()[:2] in {f"{c} " for c in "ABCDEF"}
    ]
    assert [row[0] for row in table] == list("ABCDEF")
    for row in scored.blackbox_scoring.score_table:
        line = next(cells for cells in table if cells[0] == row.id)
        assert line[1:4] == [str(row.judge_scores[j]) for j in ("strict", "warm", "novel")]
    for judge in ("strict", "warm", "novel"):
        assert judge in out

    code, out = runs_cli(capsys, store_url, "export", "--format", "jsonl")
    assert code == 0
    exported = [RunRecord.model_validate_json(line) for line in out.strip().splitlines()]
    assert as_json(exported) == as_json(records)
    on_disk = [
        RunRecord.model_validate_json(p.read_text(encoding="utf-8"))
        for p in (tmp_path / "logs").glob("*_transcript.json")
    ]
    assert as_json(exported) == as_json(on_disk)
    code, out = runs_cli(capsys, store_url, "export", "--format", "csv")
    exported_csv = list(csv.DictReader(io.StringIO(out)))
    assert {r["generation_id"]: r["status"] for r in exported_csv} == listed

    code, out = runs_cli(capsys, store_url, "stats")
    assert code == 0, out
    assert "Judge panel over 5 runs (2 with scoring, 1 failed)" in out
    judge_table = out.split("\n\n")[1].splitlines()  # the per-judge table: header, a row each
    judge_rows = {line.split()[0]: line.split() for line in judge_table[1:]}
    assert sorted(judge_rows) == ["novel", "strict", "warm"]
    for judge in ("strict", "warm", "novel"):  # columns: judge model ok parse_error refused error
        assert judge_rows[judge][2:6] == ["2", "0", "0", "0"], out
    assert "Krippendorff's alpha (interval) = " in out and "over 12 cards" in out
    code, out = runs_cli(capsys, store_url, "stats", "--failed")
    assert "Judge panel over 1 runs (0 with scoring, 1 failed)" in out

    before = snapshot(store_url)
    assert len(before["runs"]) == 5 and len(before["judge_results"]) == 6
    assert len(before["scores"]) == 2 * 3 * 6 and len(before["images"]) == 4
    delete_store(store_url, pg(request, engine))
    code, out = runs_cli(capsys, store_url, "import", *map(str, (tmp_path / "logs").glob("*.json")))
    assert code == 0, out
    assert "imported 5 run(s)" in out
    assert snapshot(store_url) == before
    code, out = runs_cli(capsys, store_url, "import", str(tmp_path / "logs"))
    assert "imported 0 run(s)" in out and "5 already stored" in out
    assert snapshot(store_url) == before

    # The jsonl export imports too, into an empty store, giving the same rows.
    export = tmp_path / "export.jsonl"
    runs_cli(capsys, store_url, "export", "--format", "jsonl", "--out", str(export))
    delete_store(store_url, pg(request, engine))
    code, out = runs_cli(capsys, store_url, "import", str(export))
    assert code == 0 and "imported 5 run(s)" in out
    assert snapshot(store_url) == before


async def test_reader_api_filters_and_rebuilds_records(tmp_path: Path, store_url: str) -> None:
    records = await five_runs(tmp_path, store_url)
    newest_first = [r.model_dump_json() for r in records[::-1]]  # made one after another

    def dumped(found: list[RunRecord]) -> list[str]:
        return [r.model_dump_json() for r in found]

    with open_store(store_url) as store:
        assert dumped(store.records()) == newest_first
        assert dumped(store.records(last=2)) == newest_first[:2]
        assert dumped(store.records(failed=True)) == dumped([records[4]])
        assert {r.generation_id for r in store.records(judge="novel")} == {
            r.generation_id for r in records[2:4]
        }
        assert dumped(store.records(since="2000-01-01")) == newest_first
        assert store.records(since="2999-01-01T00:00Z") == []
        assert len(store.records(since="1h")) == 5


async def test_scoring_rows_hold_candidates_judges_scores_and_selection(
    tmp_path: Path, store_url: str
) -> None:
    result = await run_generation(
        make_cfg(tmp_path, f"store.url={store_url}", *ENSEMBLE),
        backends(FunctionTextBackend(scoring_answer)),
    )
    scoring = result.record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord) and result.store is not None
    assert result.store.written
    tables = snapshot(store_url)
    judges = {row["judge_id"]: row for row in tables["judge_results"]}
    assert set(judges) == {"strict", "warm", "novel"}
    for judge in scoring.judges:
        assert judges[judge.id]["status"] == judge.status
        assert judges[judge.id]["presented_order"] == list(judge.order)
        assert judges[judge.id]["temperature"] == judge.temperature
    scores = {(r["card_id"], r["judge_id"]): r["score"] for r in tables["scores"]}
    assert scores == {
        (row.id, j): s for row in scoring.score_table for j, s in row.judge_scores.items()
    }
    (selection,) = tables["selections"]
    assert selection["selected_id"] == scoring.selected_id
    assert selection["mode"] == scoring.selection_mode
    assert selection["roll"] == scoring.exploration_roll
    assert [c["card_id"] for c in tables["candidates"] if c["selected"]] == [scoring.selected_id]
    (image,) = tables["images"]
    assert result.record.title_generation is not None
    assert image["seq"] == result.record.title_generation.seq == 1
    assert image["path"] == result.record.image_path
    calls = tables["calls"]
    assert len(calls) == len(result.record.chat_steps) + 1
    assert [c["path"] for c in calls] == [
        s.path for s in result.record.steps if s.type in ("chat", "image")
    ]
    assert all(c["status"] == "ok" and c["attempts"] >= 1 for c in calls)


async def interrupted_run(tmp_path: Path, store_url: str, lines: list[str] | None = None) -> None:
    """One run cancelled (as by Ctrl-C) while its title call is in flight."""
    with anyio.CancelScope() as scope:

        async def cancel_on_title(request: TextRequest) -> str:
            if "title" in str(request.messages[0].content).lower():
                scope.cancel()
                await anyio.sleep_forever()
            return answer(request)

        await run_generation(
            make_cfg(tmp_path, f"store.url={store_url}"),
            backends(FunctionTextBackend(cancel_on_title)),
            emit=None if lines is None else lines.append,
        )


async def test_an_interrupted_run_is_stored_as_interrupted(tmp_path: Path, store_url: str) -> None:
    open_store(store_url).close()  # the store exists (see the next test for a first run)
    await interrupted_run(tmp_path, store_url)
    with open_store(store_url) as store:
        (record,) = store.records()
        (summary,) = store.summaries()
    assert record.error is not None and record.error.type == "interrupted"
    # The title call goes alongside the image call: the interrupt is attributed to the
    # image phase if the image was still being checked, else to the title's.
    assert record.error.phase in ("image", "title")
    assert summary.status == "interrupted" and summary.error_phase == record.error.phase


async def test_an_interrupted_first_run_does_not_create_the_sqlite_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Creating a SQLite store (SQLAlchemy, Alembic, the migration) would delay a Ctrl-C exit
    (bench/results/store.json: ``create_new_store_in_a_new_process_s``); the interrupted first run
    leaves it for the next run, saying so with the command that imports it, and the next run
    names it again."""
    url = f"sqlite:///{tmp_path / 'store' / 'runs.sqlite'}"
    lines: list[str] = []
    await interrupted_run(tmp_path, url, lines)
    database = sqlite_path(url)
    assert database is not None and not database.exists()
    (transcript,) = (tmp_path / "logs").glob("*_transcript.json")
    loud = [line for line in lines if "NOT written" in line]
    assert len(loud) == 1 and "not created on an interrupted exit" in loud[0]
    assert loud[0].endswith(f"runs import {transcript} --store {url}")
    later: list[str] = []  # the next run creates the store and names the interrupted one
    cfg = make_cfg(tmp_path, f"store.url={url}", "prompt.random_seed=9")
    await run_generation(cfg, backends(FunctionTextBackend(answer)), emit=later.append)
    assert any(line.startswith("! store: 1 run transcript(s)") for line in later), later


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"], indirect=True)
async def test_unwritable_store_leaves_every_artifact_and_import_repairs_it(
    tmp_path: Path, engine: str, request: pytest.FixtureRequest
) -> None:
    server = pg(request, engine)
    blocker = tmp_path / "blocked"
    if server is None:
        blocker.write_text("a file where the store's folder should be", encoding="utf-8")
        url = f"sqlite:///{blocker / 'runs.sqlite'}"
    else:  # a database that does not exist yet, with a password that must never be shown
        url = f"postgresql+psycopg://postgres:s3cret-pw@127.0.0.1:{server.port}/repair_me"
    lines: list[str] = []
    result: RunResult = await run_generation(
        make_cfg(tmp_path, f"store.url={url}"),
        backends(FunctionTextBackend(answer)),
        emit=lines.append,
    )
    record = result.record
    assert record.error is None and result.store is not None and not result.store.written
    assert await anyio.Path(str(record.image_path)).is_file()
    assert await anyio.Path(result.transcript_path).is_file()
    manifest = read_rows(tmp_path / "images" / "titles_manifest.csv")
    generations = read_rows(tmp_path / "generations.csv")
    assert [r["generation_id"] for r in manifest] == [record.generation_id]
    assert [r["generation_id"] for r in generations] == [record.generation_id]
    loud = [line for line in lines if "NOT written" in line]
    assert len(loud) == 1 and "runs import" in loud[0] and str(result.transcript_path) in loud[0]
    assert "s3cret-pw" not in "\n".join(lines)
    assert (url.split("@")[1] if server else str(blocker)) in loud[0]

    # The hint is the exact command, naming this store (never the default one), no password.
    hint = shlex.split(loud[0].rsplit("its transcript has everything: ", 1)[1])
    assert hint[:4] == ["image-project", "runs", "import", str(result.transcript_path)]
    assert hint[4:] == ["--store", url.replace(":s3cret-pw", "")]
    if server is None:
        blocker.unlink()
    else:
        server.create_database("repair_me")
    code = cli.main(hint[1:], env={})
    assert code == 0
    with open_store(url) as store:
        assert [r.model_dump_json() for r in store.records()] == [record.model_dump_json()]
    if server is not None:
        server.drop_database("repair_me")


def test_unreachable_postgres_is_reported_without_password(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://me:hunter2@127.0.0.1:{free_port()}/nowhere"
    with pytest.raises(Exception) as info:
        open_store(url)
    assert "hunter2" not in str(info.value) and "127.0.0.1" in str(info.value)


def test_migrated_schema_matches_the_tables(store_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with open_store(store_url) as store:
        assert store.revision() == SCHEMA_REVISION
        with store.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def test_opening_twice_migrates_once_and_a_newer_store_is_refused(store_url: str) -> None:
    with open_store(store_url) as store, store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(Exception, match="9999"):
        open_store(store_url)


def test_runs_commands_on_a_missing_sqlite_store_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'none' / 'runs.sqlite'}"
    code, out = runs_cli(capsys, url, "list")
    assert code == 0 and "no run store yet" in out
    code, out = runs_cli(capsys, url, "show", "x")
    assert code == 1
    assert not (tmp_path / "none").exists()


def test_sqlalchemy_is_imported_only_when_a_store_is_used() -> None:
    import subprocess
    import sys

    probe = (
        "import sys, image_project.cli.command, image_project.run.driver, image_project.config.loading; "
        "print(sorted(m for m in ('sqlalchemy', 'alembic', 'psycopg') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


async def test_calls_rows_keep_cached_tokens_when_reported(tmp_path: Path, store_url: str) -> None:
    from image_project.backends.base import TextReply, Usage

    def cached_answer(request: TextRequest) -> TextReply:
        text = answer(request)
        return TextReply(text=text, model="fake-text-model", usage=Usage(100, 10, 110, 64))

    result = await run_generation(
        make_cfg(tmp_path, f"store.url={store_url}"),
        backends(FunctionTextBackend(cached_answer)),
    )
    assert result.store is not None and result.store.written
    calls = snapshot(store_url)["calls"]
    chats = [c for c in calls if c["kind"] == "chat"]
    assert chats and all(c["cached_tokens"] == 64 for c in chats)
    assert [c["cached_tokens"] for c in calls if c["kind"] == "image"] == [None]


@pytest.mark.parametrize("quiet", [False, True], ids=["progress", "quiet"])
def test_the_cli_says_loudly_that_the_store_was_not_written_and_exits_0(
    tmp_path: Path, quiet: bool
) -> None:
    import subprocess
    import sys

    from tests.faults.common import REPO, child_env, write_config

    url = f"postgresql+psycopg://me:hunter2@127.0.0.1:{free_port()}/runs"
    config = write_config(tmp_path, store={"url": url}, image={"size": "64x64"})
    done = subprocess.run(
        [sys.executable, str(REPO / "main.py"), "--config", str(config), "--seed", "7"]
        + (["-q"] if quiet else []),
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "hunter2" not in done.stdout + done.stderr
    loud = [line for line in done.stderr.splitlines() if "NOT written" in line]
    assert loud and all("127.0.0.1" in line and "runs import" in line for line in loud)
    assert "  Store       NOT WRITTEN" in done.stdout
    assert len(list((tmp_path / "out" / "logs").glob("*_transcript.json"))) == 1
    assert len(list((tmp_path / "out" / "images").glob("*_image.jpg"))) == 1


async def test_review_writes_the_site_of_the_newest_stored_runs(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    records = await five_runs(tmp_path, store_url)
    site = tmp_path / "site"
    capsys.readouterr()
    code = cli.main(["review", "--store", store_url, "--out", str(site), "--last", "3"], env={})
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert str(site / "index.html") in out
    newest = [r.generation_id for r in records[::-1]][:3]  # made one after another
    assert sorted(p.stem for p in (site / "runs").glob("*.html")) == sorted(newest)
    index = (site / "index.html").read_text(encoding="utf-8")
    assert all(gid in index for gid in newest)
    assert not any(r.generation_id in index for r in records if r.generation_id not in newest)
    assert (site / "panel.html").is_file()


async def test_import_reads_on_past_a_bad_transcript_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = f"sqlite:///{tmp_path / 'first.sqlite'}"
    for seed in (1, 2):
        await run_generation(
            make_cfg(tmp_path, f"store.url={first}", f"prompt.random_seed={seed}"),
            backends(FunctionTextBackend(answer)),
        )
    logs = tmp_path / "logs"
    bad = logs / "00000000_000000_broken_transcript.json"  # sorts before the good ones
    bad.write_text('{"schema_version": 2, "generation_id": 5}', encoding="utf-8")
    export = tmp_path / "mixed.jsonl"
    good_line = next(iter(sorted(logs.glob("2*_transcript.json")))).read_text(encoding="utf-8")
    export.write_text("not json\n" + RunRecord.model_validate_json(good_line).model_dump_json())

    second = f"sqlite:///{tmp_path / 'second.sqlite'}"
    code, out = runs_cli(capsys, second, "import", str(logs))
    assert code == 1
    assert (
        "imported 2 run(s)" in out and "1 file(s), line(s) or run(s) could not be imported" in out
    )
    assert f"error: {bad}: not a run record" in out
    code, out = runs_cli(capsys, second, "import", str(export))
    assert code == 1 and f"error: {export}:1: " in out
    assert "imported 0 run(s)" in out and "1 already stored" in out
    assert snapshot(second)["runs"] and len(snapshot(second)["runs"]) == 2


def test_a_store_that_cannot_be_opened_is_tried_once_per_writer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from image_project.store.db import RunStore
    from image_project.store.writer import StoreWriter

    opened: list[str] = []
    real_open = RunStore.open

    def counting_open(url: str) -> RunStore:
        opened.append(url)
        return real_open(url)

    monkeypatch.setattr(RunStore, "open", counting_open)
    writer = StoreWriter(f"postgresql+psycopg://me:hunter2@127.0.0.1:{free_port()}/nowhere")
    for local_next in (7, 8):  # two runs of one process: each claims seq
        seq, problem = writer.claim_seq(local_next)
        assert seq == local_next and problem is not None and "hunter2" not in problem
    assert len(opened) == 1  # the second claim did not wait for the connect timeout again
    writer.close()
