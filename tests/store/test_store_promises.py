"""docs/store.md's promises that the other store tests do not keep, on SQLite and a real
PostgreSQL server: every query of the page runs on both engines and answers from the rows
of real runs, ``record_json`` is the transcript's record, a run the database refuses leaves
no row and does not stop an import, a run's rows go with it, times are naive UTC and images
paths, a store at the newest revision opens without Alembic and a newer one is refused
saying so, ``--since``, the options every ``runs`` command takes, a unique start of an id,
the CSV export's columns, and the summary's ``Store`` line."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from sqlalchemy import LargeBinary, text

from image_project.backends.base import TextReply, TextRequest
from image_project.cli import command as cli
from image_project.record.context import ContextRecord
from image_project.record.run import RunRecord
from image_project.record.scoring import ScoringRecord
from image_project.run.driver import run_generation
from image_project.store import open_store
from image_project.store.db import parse_since
from image_project.store.schema import ALL_TABLES, metadata
from image_project.testing import FunctionTextBackend
from tests.review.offline_runs import make_offline_runs, make_round_runs
from tests.store.test_store import runs_cli
from tests.support.records import judge, run
from tests.test_app import REPO, answer, backends, make_cfg
from tests.test_context_run import HALLOWEEN

DOCS = REPO / "docs" / "store.md"


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[RunRecord]:
    """Real offline runs of every kind the queries read: a 3-judge ensemble (full runs with
    images, a run failed at its image call), a multi-round run whose LLM selector fell back,
    an interrupted one, a run failed early, a prompt-only run, and a run with the holiday
    injector applied."""
    work = tmp_path_factory.mktemp("store-promises")
    made = [*make_offline_runs(work / "offline"), *make_round_runs(work / "rounds").values()]

    async def holiday() -> RunRecord:
        cfg = make_cfg(work / "context", *HALLOWEEN)
        return (await run_generation(cfg, backends(FunctionTextBackend(answer)))).record

    return [*made, anyio.run(holiday)]


def stored(url: str, records: list[RunRecord]) -> None:
    with open_store(url) as store:
        for record in records:
            assert store.import_record(record)


def page_queries() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)


def test_every_query_of_the_page_runs_on_both_engines(
    records: list[RunRecord], store_url: str, engine: str
) -> None:
    stored(store_url, records)
    queries = page_queries()
    assert len(queries) >= 11
    with open_store(store_url) as store, store.engine.connect() as conn:
        answers = {query: conn.execute(text(query)).all() for query in queries}
        if engine == "postgresql":
            inline = re.search(r"`(SELECT record_json::jsonb[^`]*)`", DOCS.read_text("utf-8"))
            assert inline is not None
            usage = conn.execute(text(inline.group(1))).scalars().all()
            assert len(usage) == len(records) and all("total_tokens" in u for u in usage)
    empty = [query.splitlines()[0] for query, rows in answers.items() if not rows]
    assert empty == [], "every query answers from these runs"

    def answer_of(marker: str) -> list[tuple[object, ...]]:
        (rows,) = [rows for query, rows in answers.items() if marker in query]
        return [tuple(row) for row in rows]

    fell_back = [
        (r.generation_id, round_.index)
        for r in records
        if isinstance(r.blackbox_scoring, ScoringRecord) and r.blackbox_scoring.evolution
        for round_ in r.blackbox_scoring.evolution.rounds
        if round_.selector is not None and round_.selector.status == "fallback"
    ]
    assert fell_back and [row[:2] for row in answer_of("selector_status = 'fallback'")] == fell_back
    not_ok = {r.generation_id for r in records if r.error is not None}
    assert {row[1] for row in answer_of("WHERE status <> 'ok'")} == not_ok
    (context,) = [r.context for r in records if isinstance(r.context, ContextRecord)]
    holiday = next(i for i in context.injectors if i.name == "holiday")
    ((day, _, applied, reason, probability, roll),) = answer_of("i.name = 'holiday'")
    assert (day, bool(applied), reason) == (context.date_used, True, holiday.reason)
    assert (probability, roll) == (holiday.probability, holiday.roll)


def test_record_json_is_the_transcripts_record(tmp_path: Path, store_url: str) -> None:
    cfg = make_cfg(tmp_path, f"store.url={store_url}")
    anyio.run(run_generation, cfg, backends(FunctionTextBackend(answer)))
    (transcript,) = (tmp_path / "logs").glob("*_transcript.json")
    with open_store(store_url) as store:
        (row,) = store.table_rows("runs")
    assert json.loads(row["record_json"]) == json.loads(transcript.read_text(encoding="utf-8"))


@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
def test_a_run_the_database_refuses_leaves_no_row_and_the_others_are_imported(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """PostgreSQL refuses a judge's profile longer than its column (SQLite takes it) after
    the run's ``runs`` row went in: the whole run is rolled back, named, and skipped."""
    long_profile = judge("strict", {"A": 80, "B": 20, "C": 50}).model_copy(
        update={"profile": "p" * 40}
    )
    export = tmp_path / "runs.jsonl"
    lines = [run(1, scoring=False), run(2, [long_profile]), run(3, scoring=False)]
    export.write_text("".join(r.model_dump_json() + "\n" for r in lines), encoding="utf-8")
    code, out = runs_cli(capsys, store_url, "import", str(export))
    assert code == 1
    (refused,) = [line for line in out.splitlines() if line.startswith("error: ")]
    assert refused.startswith(f"error: {export}: run 'run002': ") and "refused a value" in refused
    with open_store(store_url) as store:
        assert sorted(store.stored_ids()) == ["run001", "run003"]
        left = {t.name: store.table_rows(t.name) for t in ALL_TABLES}
    assert [
        t for t, rows in left.items() if any(r["generation_id"] == "run002" for r in rows)
    ] == []


def test_deleting_a_run_deletes_every_row_of_it(records: list[RunRecord], store_url: str) -> None:
    stored(store_url, records)
    gone = next(
        r
        for r in records
        if isinstance(r.blackbox_scoring, ScoringRecord) and r.blackbox_scoring.evolution
    )
    with open_store(store_url) as store:
        before = {t.name: len(store.table_rows(t.name)) for t in ALL_TABLES}
        with store.engine.begin() as conn:
            conn.execute(
                text("DELETE FROM runs WHERE generation_id = :g"), {"g": gone.generation_id}
            )
        after = {t.name: store.table_rows(t.name) for t in ALL_TABLES}
    assert before["survivors"] and before["rounds"] and before["scores"]
    for name, rows in after.items():
        assert [r for r in rows if r["generation_id"] == gone.generation_id] == [], name
    assert len(after["runs"]) == before["runs"] - 1


def test_times_are_utc_without_a_zone_and_images_are_paths(
    records: list[RunRecord], store_url: str
) -> None:
    stored(store_url, records)
    binary = [
        f"{t.name}.{c.name}"
        for t in metadata.sorted_tables
        for c in t.columns
        if isinstance(c.type, LargeBinary)
    ]
    assert binary == []
    by_id = {r.generation_id: r for r in records}
    with open_store(store_url) as store:
        runs = store.table_rows("runs")
        images = store.table_rows("images")
    for row in runs:
        created = row["created_at"]
        assert isinstance(created, datetime) and created.tzinfo is None
        recorded = datetime.fromisoformat(by_id[row["generation_id"]].created_at)
        assert created == recorded.astimezone(UTC).replace(tzinfo=None)
    assert images and all(i["path"] == by_id[i["generation_id"]].image_path for i in images)


def test_a_store_at_the_newest_revision_opens_without_alembic(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_store(store_url).close()  # created and migrated
    for name in [m for m in sys.modules if m == "alembic" or m.startswith("alembic.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "alembic", None)  # any import of it fails
    with open_store(store_url) as store:
        assert store.records() == []


def test_a_store_of_a_newer_image_project_is_refused_saying_so(store_url: str) -> None:
    with open_store(store_url) as store, store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(Exception, match="'9999', which this version of image_project does not"):
        open_store(store_url)


def test_since_takes_a_date_a_time_or_an_age() -> None:
    assert parse_since("2026-11-20") == datetime(2026, 11, 20)
    assert parse_since("2026-11-20T08:00Z") == datetime(2026, 11, 20, 8, 0)
    for age, delta in {
        "30m": timedelta(minutes=30),
        "12h": timedelta(hours=12),
        "7d": timedelta(days=7),
        "2w": timedelta(weeks=2),
    }.items():
        before = datetime.now(UTC).replace(tzinfo=None) - delta
        found = parse_since(age)
        after = datetime.now(UTC).replace(tzinfo=None) - delta
        assert before <= found <= after, age


def test_a_bad_since_is_a_usage_error_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    stored(url, [run(1, scoring=False)])
    for command in ("list", "export", "stats"):
        code, out = runs_cli(capsys, url, command, "--since", "last tuesday")
        assert code == 2 and out.count("\n") == 1, out
        assert "--since" in out or "since: got 'last tuesday'" in out


@pytest.mark.parametrize(
    "command", [["list"], ["show", "x"], ["export"], ["import", "x"], ["stats"]]
)
def test_every_runs_command_takes_config_set_and_store(command: list[str]) -> None:
    extra = ["--config", "c.yaml", "--set", "store.url=sqlite:///x", "--store", "sqlite:///y"]
    args = cli.build_parser().parse_args(["runs", *command, *extra])
    assert (args.config, args.overrides, args.store) == (
        Path("c.yaml"),
        ["store.url=sqlite:///x"],
        "sqlite:///y",
    )


def test_show_takes_a_unique_start_of_an_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    stored(url, [run(1, scoring=False), run(12, scoring=False)])
    code, out = runs_cli(capsys, url, "show", "run01")
    assert code == 0 and "Generation run012 " in out


def test_the_csv_export_has_the_documented_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    stored(url, [run(1, scoring=False)])
    code, out = runs_cli(capsys, url, "export", "--format", "csv")
    assert code == 0
    header = next(csv.reader(io.StringIO(out)))
    documented = re.search(r"`csv` one summary row a run \(`([^`]+)`", DOCS.read_text("utf-8"))
    assert documented is not None
    assert header == [c.strip() for c in " ".join(documented.group(1).split()).split(",")]


def test_the_run_summary_ends_with_the_store_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    argv = ["--offline", "--prompt-only", "--set", f"store.url={url}"]
    argv += ["--set", f"image.log_path={tmp_path / 'logs'}"]
    argv += ["--set", f"prompt.generations_path={tmp_path / 'generations.csv'}"]
    assert cli.main(argv, env={}, root=REPO) == 0
    summary = capsys.readouterr().out.rstrip().splitlines()
    assert summary[-1] == f"  Store       {url}"


def test_a_bad_store_url_exits_2_before_any_call_with_the_password_as_stars(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "store.url=postgresql+psycopg2://me:pw123@db/runs"  # a driver the project lacks
    assert cli.main(["--offline", "--prompt-only", "--set", url], env={}, root=REPO) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(
        "configuration error: store.url: got 'postgresql+psycopg2://me:***@db/runs'"
    )
    assert "use postgresql://" in err and "pw123" not in err


@pytest.mark.anyio
@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
async def test_a_run_whose_store_write_fails_midway_leaves_no_row_of_it(
    tmp_path: Path, store_url: str
) -> None:
    """PostgreSQL refuses a model name longer than the calls' column after the run's
    ``runs`` row went in: one transaction, so the store holds nothing of the run."""

    def long_model(request: TextRequest) -> TextReply:
        return TextReply(text=answer(request), model="m" * 300)

    cfg = make_cfg(tmp_path, f"store.url={store_url}")
    result = await run_generation(cfg, backends(FunctionTextBackend(long_model)))
    assert result.record.error is None and result.store is not None
    assert not result.store.written
    with open_store(store_url) as store:
        assert {t.name: store.table_rows(t.name) for t in ALL_TABLES} == {
            t.name: [] for t in ALL_TABLES
        }
