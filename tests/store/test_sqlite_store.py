"""A SQLite store written through :class:`~image_project.store.db.RunStore`: the schema
revision is the newest migration's; only a store file at it is opened as it is (an
interrupted run's write); a run already stored is refused and a failed write leaves nothing
behind; a writer is not tied to a thread; a run lands in the file ``runs list`` reads,
whatever its path; reading never waits for a writer."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from image_project.errors import StoreError
from image_project.record.run import RunRecord
from image_project.record.scoring import ScoringRecord
from image_project.store import open_store
from image_project.store.db import RunStore, known_revisions
from image_project.store.schema import SCHEMA_REVISION
from image_project.store.writer import StoreWriter
from tests.store.test_store import five_runs


def test_the_schema_revision_is_the_newest_migrations() -> None:
    assert known_revisions()[-1] == SCHEMA_REVISION


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[RunRecord]:
    """Standard, scoring (3 judges) and failed runs, made once for the module: the tests
    only read them, writing them into stores of their own."""
    import anyio

    tmp = tmp_path_factory.mktemp("records")
    return anyio.run(five_runs, tmp / "five", f"sqlite:///{tmp / 'throwaway.sqlite'}")


def new_store(path: Path) -> str:
    url = f"sqlite:///{path}"
    open_store(url).close()  # created and migrated by SQLAlchemy + Alembic
    return url


def dump(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


def test_only_a_store_at_the_current_schema_is_opened_as_it_is(tmp_path: Path) -> None:
    """``RunStore.open_current`` (an interrupted run's write): no file, an empty one or an
    older schema is left for a later run to create or migrate."""
    missing = tmp_path / "missing.sqlite"
    assert RunStore.open_current(f"sqlite:///{missing}") is None
    assert not missing.exists()  # never created here

    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    assert RunStore.open_current(f"sqlite:///{empty}") is None

    url = new_store(tmp_path / "older.sqlite")
    with sqlite3.connect(tmp_path / "older.sqlite") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0000'")
    assert RunStore.open_current(url) is None

    not_a_database = tmp_path / "notes.sqlite"
    not_a_database.write_text("these are not the droids\n" * 200, encoding="utf-8")
    with pytest.raises(StoreError, match=r"cannot open the run store sqlite:///.*notes\.sqlite"):
        RunStore.open_current(f"sqlite:///{not_a_database}")


def test_a_run_already_stored_is_refused_and_a_failed_write_leaves_nothing(
    tmp_path: Path, records: list[RunRecord]
) -> None:
    path = tmp_path / "s.sqlite"
    url = new_store(path)
    writer = open_store(url)
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
    assert writer.save(records[0]).written
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
def test_a_run_lands_in_the_file_runs_list_reads_whatever_its_path(
    tmp_path: Path, records: list[RunRecord], folder: str
) -> None:
    """``%41``-style escapes in a URL are decoded by SQLAlchemy, for the writer that creates
    the store, a later one and ``runs list`` alike."""
    path = tmp_path / folder / "runs.sqlite"
    path.parent.mkdir()
    url = f"sqlite:///{quote(str(path))}"
    first = StoreWriter(url)
    assert first.save(records[0]).written
    first.close()
    second = StoreWriter(url)
    assert second.save(records[1]).written
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
