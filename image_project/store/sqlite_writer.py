"""A run's write into an existing SQLite store through the standard library's ``sqlite3``.

Why: a command-line run is one short process, and importing SQLAlchemy costs about 0.15 s of
it (``bench/startup.py``: 0.51 s against 0.33 s without the store); writing one run's rows
takes about 5 ms. So when a run writes to a SQLite store whose schema is already at
:data:`SCHEMA_REVISION` (every run after a store's first), :class:`SqliteRunWriter` inserts the
rows :func:`~image_project.store.rows.record_rows` makes with plain ``INSERT`` statements, and
SQLAlchemy is never imported. Anything else (a new store, an older schema, PostgreSQL,
``runs import``, every read) goes through :class:`~image_project.store.db.RunStore`.

The rows written are those SQLAlchemy writes, value for value and type for type: times as
SQLAlchemy's SQLite ``DATETIME`` text, JSON columns as ``json.dumps`` of the value (``None``
included, as the JSON ``null``), booleans as 0 / 1. ``tests/store/test_sqlite_writer.py``
writes the same records both ways and compares the databases' dumps, and checks
:data:`INSERT_ORDER`, :data:`JSON_COLUMNS` and :data:`DATETIME_COLUMNS` against the
SQLAlchemy tables, so the two cannot drift apart. The transaction is the same as the engine's
writes: ``BEGIN IMMEDIATE`` (wait for other writers, up to 60 s), foreign keys on.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from image_project.config.store_url import redact_url, sqlite_path
from image_project.errors import StoreError
from image_project.store.rows import Row, record_rows, utc_now

if TYPE_CHECKING:
    from image_project.record import RunRecord

__all__ = [
    "BUSY_TIMEOUT_S",
    "DATETIME_COLUMNS",
    "INSERT_ORDER",
    "JSON_COLUMNS",
    "SCHEMA_REVISION",
    "SqliteRunWriter",
]

SCHEMA_REVISION: Final = "0002"
"""The newest migration's revision id (``migrations/versions/v0002_context.py``)."""

INSERT_ORDER: Final = (
    "runs",
    "calls",
    "candidates",
    "judge_results",
    "scores",
    "rounds",
    "survivors",
    "selections",
    "images",
    "contexts",
    "context_injectors",
)
"""Every table, parents first (``schema.ALL_TABLES``' order)."""

JSON_COLUMNS: Final[Mapping[str, frozenset[str]]] = {
    "runs": frozenset({"concepts"}),
    "calls": frozenset({"params"}),
    "candidates": frozenset({"card"}),
    "judge_results": frozenset({"presented_order"}),
    "selections": frozenset({"ranking", "explore_pool", "evolution"}),
    "context_injectors": frozenset({"guidance", "metadata"}),
}
"""The columns of SQLAlchemy's ``JSON`` type, per table."""

DATETIME_COLUMNS: Final[Mapping[str, frozenset[str]]] = {
    "runs": frozenset({"created_at", "stored_at"}),
}
"""The columns of SQLAlchemy's ``DateTime`` type, per table."""

BUSY_TIMEOUT_S: Final = 60.0
"""How long a write waits for another writer's lock (the SQLAlchemy engine's too)."""

_DATETIME_FORMAT: Final = "%Y-%m-%d %H:%M:%S.%f"  # SQLAlchemy's SQLite DATETIME storage


class SqliteRunWriter:
    """Writes runs into one SQLite store at :data:`SCHEMA_REVISION`; :meth:`open` says None
    for any other store. :meth:`close` when done."""

    def __init__(self, connection: sqlite3.Connection, url: str) -> None:
        self._connection = connection
        self.url = url

    @classmethod
    def open(cls, url: str) -> SqliteRunWriter | None:
        """A writer for the SQLite store at ``url`` if its file exists and its schema is at
        :data:`SCHEMA_REVISION`; None otherwise (the file is never created here: the
        SQLAlchemy store creates and migrates it). A file that cannot be read as a store
        raises :class:`StoreError`."""
        path = sqlite_path(url)
        if path is None:
            raise ValueError(f"not a SQLite store URL: {redact_url(url)!r}")
        try:
            if not path.is_file():
                return None
            # Not bound to this thread: a writer may be used from any one thread at a time,
            # as a SQLAlchemy pool's connections are.
            connection = sqlite3.connect(
                _read_write_uri(path),
                uri=True,
                timeout=BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the run store {redact_url(url)}: {exc}") from exc
        writer = cls(connection, url)
        try:
            revision = writer._revision()
            if revision != SCHEMA_REVISION:
                writer.close()
                return None
            connection.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            writer.close()
            raise StoreError(f"cannot open the run store {redact_url(url)}: {exc}") from exc
        return writer

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)

    def _revision(self) -> str | None:
        try:
            found = self._connection.execute("SELECT version_num FROM alembic_version").fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise
        return str(found[0][0]) if found else None

    def write(self, record: RunRecord, *, pending: object = None) -> None:
        """Write ``record`` in one transaction. A run already stored raises StoreError, as
        :meth:`RunStore.write <image_project.store.db.RunStore.write>` does. ``pending`` is
        always None here (only a PostgreSQL store opens a transaction early)."""
        if pending is not None:
            raise ValueError("a SQLite store never holds a pending write")
        rows = record_rows(record, source="run", stored_at=utc_now())
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                for table in INSERT_ORDER:
                    _insert(connection, table, rows.tables.get(table, ()))
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to the run store {self.safe_url}: {exc}") from exc

    def stored_ids(self) -> set[str]:
        """The generation ids of every stored run (a read: never waits for a writer)."""
        try:
            found = self._connection.execute("SELECT generation_id FROM runs").fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the run store {self.safe_url}: {exc}") from exc
        return {str(row[0]) for row in found}

    def close(self) -> None:
        self._connection.close()


def _read_write_uri(path: Path) -> str:
    """A ``file:`` URI that opens ``path`` for reading and writing but never creates it
    (``quote`` escapes ``?``, ``#`` and ``%`` in the path)."""
    return f"file:{quote(str(path.resolve()))}?mode=rw"


def _insert(connection: sqlite3.Connection, table: str, rows: Sequence[Row]) -> None:
    if not rows:
        return
    columns = list(rows[0])
    if any(row.keys() != rows[0].keys() for row in rows):
        raise sqlite3.DataError(f"the rows for {table} do not all have the same columns")
    json_columns = JSON_COLUMNS.get(table, frozenset())
    datetime_columns = DATETIME_COLUMNS.get(table, frozenset())
    binders = [_binder(c, json_columns, datetime_columns) for c in columns]
    names = ", ".join(f'"{c}"' for c in columns)
    marks = ", ".join("?" for _ in columns)
    connection.executemany(
        f'INSERT INTO "{table}" ({names}) VALUES ({marks})',
        [tuple(bind(row[c]) for bind, c in zip(binders, columns, strict=True)) for row in rows],
    )


def _binder(
    column: str, json_columns: frozenset[str], datetime_columns: frozenset[str]
) -> Callable[[Any], Any]:
    """How SQLAlchemy's SQLite dialect binds a value of ``column``."""
    if column in json_columns:
        return json.dumps  # None included: the JSON null
    if column in datetime_columns:
        return _datetime_text
    return _same


def _datetime_text(value: datetime | None) -> str | None:
    return None if value is None else value.strftime(_DATETIME_FORMAT)


def _same(value: Any) -> Any:
    return value
