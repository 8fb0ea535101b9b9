"""The run store over SQLAlchemy 2 Core: :class:`RunStore` (open, migrate, write, read).

One code path for both engines, and the only one that writes a store's rows
(``tests/store/test_one_writer.py``); what differs is set up in :func:`_engine` (SQLite: a
busy timeout, foreign keys on, write transactions that take the database lock at ``BEGIN``
while reads never wait for one) and in two PostgreSQL advisory locks (the schema migration,
and the allocation of the titles ``seq`` across machines).

Errors: anything that goes wrong talking to the database is raised as :class:`StoreError`,
whose message names the store by its URL without the password
(``URL.render_as_string(hide_password=True)``) and chains the driver's exception.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    create_engine,
    event,
    func,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DataError, IntegrityError, SQLAlchemyError

from image_project.config.store_url import check_store_url, sqlite_path
from image_project.errors import StoreError
from image_project.record.run import RunRecord
from image_project.store.rows import parse_utc, record_rows, utc_now
from image_project.store.schema import (
    ALL_TABLES,
    SCHEMA_REVISION,
    images,
    judge_results,
    runs,
)

MIGRATIONS_DIR: Final = Path(__file__).with_name("migrations")
_MIGRATE_LOCK: Final = 0x1A6E_0001  # pg_advisory_xact_lock keys of this application
_SEQ_LOCK: Final = 0x1A6E_0002
_WRITE: Final = "image_project_write"
"""The execution option of the store's write transactions (SQLite: ``BEGIN IMMEDIATE``)."""
BUSY_TIMEOUT_S: Final = 60.0
"""How long a SQLite write waits for another writer's lock."""


def safe_url(url: str) -> str:
    """``url`` as SQLAlchemy renders it with the password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except SQLAlchemyError:
        return "<an unparseable store URL>"


def parse_since(value: datetime | str) -> datetime:
    """A lower bound on ``created_at`` as naive UTC: a datetime (naive = UTC), an ISO date or
    time (``2026-11-20``, ``2026-11-20T08:00Z``), or an age such as ``30m``, ``12h``, ``7d``."""
    if isinstance(value, datetime):
        return parse_utc(value.isoformat())
    match = re.fullmatch(r"\s*(\d+)\s*([mhdw])\s*", value)
    if match:
        unit = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[match.group(2)]
        moment = datetime.now(UTC) - timedelta(**{unit: int(match.group(1))})
        return moment.replace(tzinfo=None)
    try:
        return parse_utc(value.strip())
    except ValueError:
        raise ValueError(
            f"since: got {value!r}, must be an ISO date or time (2026-11-20, "
            "2026-11-20T08:00Z) or an age like 30m, 12h, 7d, 2w"
        ) from None


@dataclass(frozen=True)
class RunSummary:
    """One row of ``runs list``: the run's own columns and its judges' statuses (in the
    last round, for a multi-round run)."""

    generation_id: str
    created_at: datetime
    status: str
    seq: int | None
    title: str | None
    scoring: bool
    judges: tuple[tuple[str, str], ...]
    error_type: str | None
    error_phase: str | None
    error_message: str | None
    total_tokens: int
    wall_s: float


def _engine(url: str) -> Engine:
    database = sqlite_path(url)
    if database is None:
        # pool_pre_ping: a connection the server dropped (a restart) is replaced on checkout
        # instead of failing the next write.
        return create_engine(url, connect_args={"connect_timeout": 10}, pool_pre_ping=True)
    database.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself (below)
        dbapi_connection.execute("PRAGMA foreign_keys = ON")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A write takes the write lock at BEGIN, so that two writers wait for each other
        # (busy timeout) instead of one failing when it upgrades a read lock. A read begins
        # deferred: it reads what is committed and never waits for a writer's transaction.
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


@dataclass
class PendingWrite:
    """A store transaction opened early (PostgreSQL only): it holds the ``seq`` lock from
    the allocation of ``seq`` to the commit of the run's rows."""

    connection: Connection
    seq: int

    def abandon(self) -> None:
        """Roll back and release the connection (idempotent). The connection is closed even
        when the rollback fails (a server gone at commit); that failure is raised after."""
        if not self.connection.closed:
            try:
                self.connection.rollback()
            finally:
                self.connection.close()


class RunStore:
    """An open store. Use as a context manager or call :meth:`close`."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = url
        # The same pool and events; its transactions are writes (see _engine).
        self._writer = engine.execution_options(**{_WRITE: True})

    @classmethod
    def open(cls, url: str) -> RunStore:
        """Connect to ``url`` and bring its schema to :data:`SCHEMA_REVISION`."""
        store = cls._connect(check_store_url(url))
        try:
            store.migrate()
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def open_current(cls, url: str) -> RunStore | None:
        """The SQLite store at ``url`` if its file exists and is at :data:`SCHEMA_REVISION`,
        opened without creating or migrating anything; None otherwise (no file, an empty
        one, another revision). A file that is not a database raises StoreError."""
        url = check_store_url(url)
        path = sqlite_path(url)
        if path is None:
            raise ValueError(f"not a SQLite store URL: {safe_url(url)!r}")
        if not path.is_file():
            return None
        store = cls._connect(url)
        try:
            with store._errors("open"), store.engine.connect() as conn:
                current = _current_revision(conn)
        except BaseException:
            store.close()
            raise
        if current != SCHEMA_REVISION:
            store.close()
            return None
        return store

    @classmethod
    def _connect(cls, url: str) -> RunStore:
        """The store at the checked ``url``, its schema not looked at."""
        try:
            engine = _engine(url)
        except (SQLAlchemyError, OSError) as exc:
            raise StoreError(f"cannot open the run store {safe_url(url)}: {exc}") from exc
        return cls(engine, url)

    @property
    def safe_url(self) -> str:
        return safe_url(self.url)

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except (SQLAlchemyError, OSError) as exc:
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StoreError(f"cannot {doing} the run store {self.safe_url}: {detail}") from exc

    # ------------------------------------------------------------------ schema

    def revision(self) -> str | None:
        """The schema revision the database is at (None for an empty database)."""
        with self._errors("read"), self.engine.connect() as conn:
            return _current_revision(conn)

    def migrate(self) -> None:
        """Create or upgrade the schema to :data:`SCHEMA_REVISION`, under a lock, so that
        several processes opening a new store at once create it once."""
        with self._errors("open"), self.engine.connect() as conn:
            if _current_revision(conn) == SCHEMA_REVISION:
                return  # the usual case: a read, which never waits for a writer
        with self._errors("open"), self._writer.begin() as conn:
            if self.is_postgres:
                conn.execute(select(func.pg_advisory_xact_lock(_MIGRATE_LOCK)))
            current = _current_revision(conn)
            if current == SCHEMA_REVISION:
                return
            from alembic import command
            from alembic.config import Config
            from alembic.util import CommandError

            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS_DIR))
            config.attributes["connection"] = conn
            try:
                command.upgrade(config, "head")
            except CommandError as exc:
                raise StoreError(
                    f"the run store {self.safe_url} is at schema revision {current!r}, which "
                    f"this version of image_project does not know (newest: "
                    f"{SCHEMA_REVISION!r}): {exc}"
                ) from exc

    # ------------------------------------------------------------------ writing

    def claim_seq(self, local_next: int) -> PendingWrite:
        """Open the run's transaction and allocate its titles ``seq`` in it: one more than
        the largest stored (and at least ``local_next``, this machine's manifest). The lock
        is held until :meth:`write` commits or the pending write is abandoned."""
        with self._errors("allocate a title number in"):
            conn = self._writer.connect()
            try:
                conn.begin()
                if self.is_postgres:
                    conn.execute(select(func.pg_advisory_xact_lock(_SEQ_LOCK)))
                stored = conn.scalar(select(func.max(images.c.seq))) or 0
            except BaseException:
                conn.close()
                raise
        return PendingWrite(connection=conn, seq=max(local_next, stored + 1))

    def write(
        self,
        record: RunRecord,
        *,
        source: str = "run",
        pending: PendingWrite | None = None,
        check: Callable[[Connection], bool] | None = None,
    ) -> None:
        """Write ``record`` in one transaction (``pending``'s, if given). A run already
        stored raises StoreError. ``check`` (without ``pending``) is called in the
        transaction before the rows are written: it raises to write nothing, or returns True
        when the run is already written as it should be (nothing is written then)."""
        rows = record_rows(record, source=source, stored_at=utc_now())
        with self._errors("write to"):
            if pending is None:
                with self._writer.begin() as conn:
                    if check is not None and check(conn):
                        return
                    _insert(conn, rows.tables)
                return
            try:
                _insert(pending.connection, rows.tables)
                pending.connection.commit()
            finally:
                pending.abandon()

    @contextmanager
    def transaction(self, *, seq_lock: bool = False) -> Iterator[Connection]:
        """A write transaction (committed on a clean exit); with ``seq_lock`` it holds the
        titles ``seq`` lock (PostgreSQL), as :meth:`claim_seq` does, until it ends."""
        with self._errors("write to"), self._writer.begin() as conn:
            if seq_lock and self.is_postgres:
                conn.execute(select(func.pg_advisory_xact_lock(_SEQ_LOCK)))
            yield conn

    def import_record(self, record: RunRecord) -> bool:
        """Write ``record`` unless a run with its generation id is stored; True if written.
        A record whose generation id is not one (:mod:`image_project.record.ids`), or whose
        values the database refuses, raises ValueError naming the run, with nothing of it
        written, so an import can skip it and go on; a store that cannot be written raises
        StoreError."""
        rows = record_rows(record, source="import", stored_at=utc_now())
        with self._errors("import into"):
            try:
                with self._writer.begin() as conn:
                    if _stored(conn, record.generation_id):
                        return False
                    _insert(conn, rows.tables)
            except IntegrityError:
                # Written by someone else meanwhile, or a real integrity problem of the rows:
                # only the first is "already stored".
                with self.engine.connect() as conn:
                    if _stored(conn, record.generation_id):
                        return False
                raise
            except DataError as exc:
                detail = str(exc.orig).splitlines()[0] if exc.orig else type(exc).__name__
                raise ValueError(
                    f"run {record.generation_id!r}: {self.safe_url} refused a value of it "
                    f"({detail}); nothing of it was written"
                ) from exc
        return True

    def delete(self, generation_id: str) -> bool:
        """Delete one run and its rows; True if it was stored."""
        with self._errors("delete from"), self._writer.begin() as conn:
            for table in reversed(ALL_TABLES):
                result = conn.execute(table.delete().where(table.c.generation_id == generation_id))
            return result.rowcount > 0

    # ------------------------------------------------------------------ reading

    def records(
        self,
        *,
        last: int | None = None,
        failed: bool = False,
        judge: str | None = None,
        since: datetime | str | None = None,
    ) -> list[RunRecord]:
        """Stored runs, newest first, rebuilt from their recorded JSON (exactly the records
        the runs wrote). ``last`` keeps the newest N; ``failed`` only runs that did not
        succeed; ``judge`` only runs whose panel had that judge id; ``since`` only runs
        created at or after it (see :func:`parse_since`)."""
        query = _filtered(select(runs.c.record_json), failed, judge, since, last)
        with self._errors("read"), self.engine.connect() as conn:
            texts = list(conn.scalars(query))
        return [RunRecord.model_validate_json(t) for t in texts]

    def summaries(
        self,
        *,
        last: int | None = None,
        failed: bool = False,
        judge: str | None = None,
        since: datetime | str | None = None,
    ) -> list[RunSummary]:
        """The ``runs list`` rows, newest first, with the same filters as :meth:`records`."""
        columns = (
            runs.c.generation_id,
            runs.c.created_at,
            runs.c.status,
            runs.c.seq,
            runs.c.title,
            runs.c.scoring,
            runs.c.error_type,
            runs.c.error_phase,
            runs.c.error_message,
            runs.c.total_tokens,
            runs.c.wall_s,
        )
        query = _filtered(select(*columns), failed, judge, since, last)
        with self._errors("read"), self.engine.connect() as conn:
            found = conn.execute(query).all()
            ids = [row.generation_id for row in found]
            panel = _final_panels(conn, ids) if ids else {}
        return [
            RunSummary(
                generation_id=row.generation_id,
                created_at=row.created_at,
                status=row.status,
                seq=row.seq,
                title=row.title,
                scoring=bool(row.scoring),
                judges=tuple(panel.get(row.generation_id, ())),
                error_type=row.error_type,
                error_phase=row.error_phase,
                error_message=row.error_message,
                total_tokens=row.total_tokens,
                wall_s=row.wall_s,
            )
            for row in found
        ]

    def find(self, ref: str) -> RunRecord:
        """The run whose generation id is ``ref`` or uniquely starts with it; KeyError
        saying which ids matched otherwise."""
        with self._errors("read"), self.engine.connect() as conn:
            exact = conn.scalar(select(runs.c.record_json).where(runs.c.generation_id == ref))
            if exact is not None:
                return RunRecord.model_validate_json(exact)
            like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            matches = conn.execute(
                select(runs.c.generation_id, runs.c.record_json)
                .where(runs.c.generation_id.like(like, escape="\\"))
                .order_by(runs.c.generation_id)
                .limit(6)
            ).all()
        if len(matches) == 1:
            return RunRecord.model_validate_json(matches[0].record_json)
        if not matches:
            raise KeyError(f"no stored run has the generation id {ref!r} (or one starting so)")
        shown = ", ".join(m.generation_id for m in matches[:5])
        raise KeyError(f"{ref!r} matches several runs ({shown}{', …' if len(matches) > 5 else ''})")

    def stored_ids(self) -> set[str]:
        """The generation ids of every stored run."""
        with self._errors("read"), self.engine.connect() as conn:
            return {str(gid) for gid in conn.scalars(select(runs.c.generation_id))}

    def status_of(self, generation_id: str) -> str | None:
        """The stored run's status (``ok``, ``failed``, ``interrupted``), None if not stored."""
        query = select(runs.c.status).where(runs.c.generation_id == generation_id)
        with self._errors("read"), self.engine.connect() as conn:
            status = conn.scalar(query)
        return None if status is None else str(status)

    def highest_seq(self) -> int:
        """The highest image ``seq`` stored (0: none)."""
        with self._errors("read"), self.engine.connect() as conn:
            return int(conn.scalar(select(func.max(images.c.seq))) or 0)

    def image_history(self, up_to_seq: int) -> list[tuple[str, str | None]]:
        """``(title, final prompt)`` of every stored image with ``seq <= up_to_seq``, in
        ``seq`` order: what the titles manifest and the generations CSV of a machine that made
        them all would hold (a history shared by every machine on the store)."""
        query = (
            select(images.c.title, runs.c.final_image_prompt)
            .join(runs, runs.c.generation_id == images.c.generation_id)
            .where(images.c.seq <= up_to_seq)
            .order_by(images.c.seq)
        )
        with self._errors("read"), self.engine.connect() as conn:
            return [(str(title), prompt) for title, prompt in conn.execute(query)]

    def count(self) -> int:
        with self._errors("read"), self.engine.connect() as conn:
            return int(conn.scalar(select(func.count()).select_from(runs)) or 0)

    def table_rows(self, table_name: str) -> list[dict[str, Any]]:
        """Every row of one table, in primary-key order (for tests and exports)."""
        table = next(t for t in ALL_TABLES if t.name == table_name)
        order = list(table.primary_key.columns)
        with self._errors("read"), self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(select(table).order_by(*order))]


def _current_revision(conn: Connection) -> str | None:
    if not inspect(conn).has_table("alembic_version"):
        return None
    found = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return found[0] if found else None


def _final_panels(conn: Connection, ids: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """Each run's judges and their statuses in its last round (the panel whose scores made
    the final pick; a one-round run has only round 0)."""
    judged = conn.execute(
        select(
            judge_results.c.generation_id,
            judge_results.c.round,
            judge_results.c.judge_id,
            judge_results.c.status,
        )
        .where(judge_results.c.generation_id.in_(ids))
        .order_by(
            judge_results.c.generation_id, judge_results.c.round.desc(), judge_results.c.position
        )
    )
    panel: dict[str, list[tuple[str, str]]] = {}
    last: dict[str, int] = {}
    for gid, round_, judge_id, status in judged:
        if last.setdefault(gid, round_) == round_:
            panel.setdefault(gid, []).append((judge_id, status))
    return panel


def _stored(conn: Connection, generation_id: str) -> bool:
    query = select(runs.c.generation_id).where(runs.c.generation_id == generation_id)
    return conn.scalar(query) is not None


def _insert(conn: Connection, tables: dict[str, list[dict[str, Any]]]) -> None:
    for table in ALL_TABLES:
        rows = tables.get(table.name)
        if rows:
            conn.execute(table.insert(), rows)


def _filtered(
    query: Select[Any],
    failed: bool,
    judge: str | None,
    since: datetime | str | None,
    last: int | None,
) -> Select[Any]:
    if failed:
        query = query.where(runs.c.status != "ok")
    if judge is not None:
        panel = select(judge_results.c.generation_id).where(judge_results.c.judge_id == judge)
        query = query.where(runs.c.generation_id.in_(panel))
    if since is not None:
        query = query.where(runs.c.created_at >= parse_since(since))
    # Newest first. created_at has whole seconds, so runs started in the same second are
    # ordered by when the store received them (then by id), not by their random ids.
    query = query.order_by(
        runs.c.created_at.desc(), runs.c.stored_at.desc(), runs.c.generation_id.desc()
    )
    if last is not None:
        query = query.limit(last)
    return query


def known_revisions() -> Sequence[str]:
    """Every revision the shipped migrations define, oldest first."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    script = ScriptDirectory.from_config(config)
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]
