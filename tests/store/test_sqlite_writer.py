"""The SQLite writer without SQLAlchemy (``image_project.store.sqlite_writer``): the rows it
writes are SQLAlchemy's, value for value and storage type for type (the two databases' SQL
dumps are compared); its table order and JSON columns are the SQLAlchemy tables'; a store not
at the current schema is left to SQLAlchemy; a failed write leaves nothing behind."""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import pytest
from sqlalchemy import JSON, DateTime

from image_project.errors import StoreError
from image_project.record import RunRecord, ScoringRecord
from image_project.store import open_store
from image_project.store.db import known_revisions
from image_project.store.schema import ALL_TABLES
from image_project.store.sqlite_writer import (
    DATETIME_COLUMNS,
    INSERT_ORDER,
    JSON_COLUMNS,
    SCHEMA_REVISION,
    SqliteRunWriter,
)
from image_project.store.writer import StoreWriter
from tests.store.test_store import five_runs
from tests.store.test_store_rounds import EVOLVE, LLM, offline_run

CONTEXT = ("--date", "2026-10-25", "--set", "context.enabled=true", "--seed", "1")

STORED_AT = datetime(2026, 11, 23, 16, 5, 7, 120034)


def test_table_order_json_columns_and_revision_are_the_sqlalchemy_schemas() -> None:
    assert tuple(t.name for t in ALL_TABLES) == INSERT_ORDER
    json_columns = {
        t.name: frozenset(c.name for c in t.columns if isinstance(c.type, JSON)) for t in ALL_TABLES
    }
    assert {k: v for k, v in json_columns.items() if v} == JSON_COLUMNS
    datetime_columns = {
        t.name: frozenset(c.name for c in t.columns if isinstance(c.type, DateTime))
        for t in ALL_TABLES
    }
    assert {k: v for k, v in datetime_columns.items() if v} == DATETIME_COLUMNS
    assert known_revisions()[-1] == SCHEMA_REVISION


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[RunRecord]:
    """Standard, scoring (3 judges), failed, and multi-round runs (code and LLM selector),
    and a run with context injectors: every table gets rows, JSON columns hold lists,
    objects and nulls. Made once for the module (eight runs, about a second): the tests only
    read them, writing them into stores of their own."""
    import anyio

    tmp = tmp_path_factory.mktemp("records")
    throwaway = f"sqlite:///{tmp / 'throwaway.sqlite'}"
    made = anyio.run(five_runs, tmp / "five", throwaway)
    made.append(offline_run(tmp / "evolve", throwaway, None, *EVOLVE)[0])
    made.append(offline_run(tmp / "llm", throwaway, None, *EVOLVE, *LLM)[0])
    made.append(offline_run(tmp / "context", throwaway, None, *CONTEXT)[0])
    return made


def new_store(path: Path) -> str:
    url = f"sqlite:///{path}"
    open_store(url).close()  # created and migrated by SQLAlchemy + Alembic
    return url


def dump(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


def test_rows_written_with_sqlite3_are_the_rows_sqlalchemy_writes(
    tmp_path: Path, records: list[RunRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("image_project.store.db.utc_now", lambda: STORED_AT)
    monkeypatch.setattr("image_project.store.sqlite_writer.utc_now", lambda: STORED_AT)
    by_sqlalchemy = new_store(tmp_path / "a.sqlite")
    by_sqlite3 = new_store(tmp_path / "b.sqlite")

    with open_store(by_sqlalchemy) as store:
        for record in records:
            store.write(record)
    writer = SqliteRunWriter.open(by_sqlite3)
    assert writer is not None
    try:
        for record in records:
            writer.write(record)
    finally:
        writer.close()

    expected = dump(tmp_path / "a.sqlite")
    assert dump(tmp_path / "b.sqlite") == expected
    # The comparison covers every table, nulls and JSON nulls included.
    inserted = {line.split('"')[1] for line in expected if line.startswith("INSERT")}
    assert inserted == set(INSERT_ORDER) | {"alembic_version"}
    assert any("'null'" in line for line in expected)
    assert any("NULL" in line for line in expected)
    with open_store(by_sqlite3) as store:  # and SQLAlchemy reads the records back
        read_back = sorted(r.model_dump_json() for r in store.records())
    assert read_back == sorted(r.model_dump_json() for r in records)


def test_a_store_not_at_the_current_schema_is_left_to_sqlalchemy(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    assert SqliteRunWriter.open(f"sqlite:///{missing}") is None
    assert not missing.exists()  # never created here

    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    assert SqliteRunWriter.open(f"sqlite:///{empty}") is None

    url = new_store(tmp_path / "older.sqlite")
    with sqlite3.connect(tmp_path / "older.sqlite") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0000'")
    assert SqliteRunWriter.open(url) is None

    not_a_database = tmp_path / "notes.sqlite"
    not_a_database.write_text("these are not the droids\n" * 200, encoding="utf-8")
    with pytest.raises(StoreError, match=r"cannot open the run store sqlite:///.*notes\.sqlite"):
        SqliteRunWriter.open(f"sqlite:///{not_a_database}")


def test_a_new_store_is_created_then_written_without_sqlalchemy(
    tmp_path: Path, records: list[RunRecord]
) -> None:
    """StoreWriter: the first writer creates the store through SQLAlchemy; a later one (a
    later process) writes through sqlite3; both runs are there."""
    url = f"sqlite:///{tmp_path / 'new' / 'runs.sqlite'}"
    first = StoreWriter(url)
    assert first.save(records[0]).written
    assert first.via == "sqlalchemy"
    first.close()
    second = StoreWriter(url)
    assert second.save(records[1]).written
    assert second.via == "sqlite3"
    second.close()
    with open_store(url) as store:
        assert {r.generation_id for r in store.records()} == {
            records[0].generation_id,
            records[1].generation_id,
        }


def test_a_run_already_stored_is_refused_and_a_failed_write_leaves_nothing(
    tmp_path: Path, records: list[RunRecord]
) -> None:
    path = tmp_path / "s.sqlite"
    url = new_store(path)
    writer = SqliteRunWriter.open(url)
    assert writer is not None
    scoring = [r for r in records if isinstance(r.blackbox_scoring, ScoringRecord)]
    writer.write(scoring[0])
    before = dump(path)
    with pytest.raises(StoreError, match=r"cannot write to the run store sqlite:///.*UNIQUE"):
        writer.write(scoring[0])
    assert dump(path) == before

    # A table late in the order refuses its row: the run's earlier rows are rolled back.
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON selections "
            "BEGIN SELECT RAISE(ABORT, 'selections refused'); END"
        )
    before = dump(path)
    with pytest.raises(StoreError, match="selections refused"):
        writer.write(scoring[1])
    assert dump(path) == before
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TRIGGER refuse")
    writer.write(scoring[1])  # the same connection writes after the rollbacks
    writer.close()
    with open_store(url) as store:
        assert store.count() == 2


def test_a_writer_opened_in_one_thread_writes_and_closes_in_another(
    tmp_path: Path, records: list[RunRecord]
) -> None:
    """As a SQLAlchemy pool's connections may: a StoreWriter is not tied to a thread."""
    url = new_store(tmp_path / "threads.sqlite")
    writer = StoreWriter(url)
    assert writer.save(records[0]).written and writer.via == "sqlite3"
    outcomes = []
    worker = threading.Thread(target=lambda: outcomes.append(writer.save(records[1])))
    worker.start()
    worker.join()
    assert [o.error for o in outcomes] == [None]
    closer = threading.Thread(target=writer.close)
    closer.start()
    closer.join()
    with open_store(url) as store:
        assert store.count() == 2


@pytest.mark.parametrize("folder", ["a b", "50%", "q?x", "h#1", "ü"])
def test_both_writers_use_the_same_file_whatever_its_path(
    tmp_path: Path, records: list[RunRecord], folder: str
) -> None:
    """``%41``-style escapes in a URL are decoded by SQLAlchemy; the sqlite3 writer reads the
    path the same way, so a run lands in the file ``runs list`` reads."""
    path = tmp_path / folder / "runs.sqlite"
    path.parent.mkdir()
    url = f"sqlite:///{quote(str(path))}"
    first = StoreWriter(url)
    assert first.save(records[0]).written and first.via == "sqlalchemy"
    first.close()
    second = StoreWriter(url)
    assert second.save(records[1]).written and second.via == "sqlite3"
    second.close()
    assert list(tmp_path.rglob("runs.sqlite")) == [path]  # no second file under another name
    with open_store(url) as store:
        assert store.count() == 2


def test_reading_a_sqlite_store_does_not_wait_for_a_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runs list`` / ``review`` read what is committed while a run is being written; two
    writers still wait for each other (here the busy timeout is cut to 0.5 s, so a second
    writer fails fast instead of waiting its 60 s)."""
    monkeypatch.setattr("image_project.store.db.BUSY_TIMEOUT_S", 0.5)
    path = tmp_path / "busy.sqlite"
    url = new_store(path)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # a run's write in progress, in another connection
        with open_store(url) as store:
            assert store.count() == 0
            assert store.summaries() == [] and store.records() == []
            with pytest.raises(StoreError, match="database is locked"):
                store.delete("20261123_000000_00000000")
        other.execute("ROLLBACK")
    finally:
        other.close()
