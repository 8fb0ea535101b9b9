"""Exactly-once records on an at-least-once queue: :class:`FencedWriter`.

procrastinate gives a run's job to another worker when the one that had it stops sending
heartbeats, so two attempts at one run can exist (a dead worker's and its successor, or a
worker taken for dead that is not). The generation id (campaign + index) is the run's
idempotency key, and the store knows which attempt owns the run: a claim row in
:data:`CLAIMS_TABLE`, written when an attempt starts (the latest attempt owns the run) and
checked, under a row lock, in every transaction that records the run:

* the records phase's ``seq`` is reserved on the claim row (in a committed transaction under
  the store's ``seq`` lock) before the image, the manifest row or the generations row is
  written; an attempt whose run is recorded, or that no longer owns it, raises
  :class:`~image_project.store.writer.RecordsRefused` there and writes nothing;
* before the transcript of a run that reserved no ``seq`` (a failed run) the claim is
  checked again;
* the store row is written only by the owner, in a transaction that locks its claim row
  (so a successor's claim waits for it, then finds the run recorded).

A reserved ``seq`` is the run's: its store row carries it however often the write is made
again after a lost connection, and a successor (after a kill) takes the same number.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import TYPE_CHECKING, Final

from sqlalchemy import text

from image_project.store.writer import (
    RecordsRefused,
    RunAlreadyRecorded,
    RunTakenOver,
    StoreOutcome,
    StoreUnreachable,
    StoreWriter,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from image_project.campaign.outage import Outage
    from image_project.record.run import RunRecord
    from image_project.store.db import RunStore

CLAIMS_TABLE: Final = "image_project_run_claims"
CLAIMS_DDL: Final = (
    f"CREATE TABLE IF NOT EXISTS {CLAIMS_TABLE} ("
    "generation_id varchar(64) PRIMARY KEY, "
    "campaign varchar(64) NOT NULL, "
    "attempt varchar(80) NOT NULL, "
    "attempts integer NOT NULL DEFAULT 1, "
    "requeued integer NOT NULL DEFAULT 0, "
    "seq integer, "
    "claimed_at timestamptz NOT NULL DEFAULT now())"
)
"""One row per campaign run: the attempt that owns it, how many attempts started it, how
many of them went back to the queue because the database failed (``requeued``), and the
``seq`` reserved for it."""


def new_attempt() -> str:
    """A token naming one attempt: this host and process, and 8 random hex digits."""
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(4)}"


class FencedWriter(StoreWriter):
    """A campaign worker's store writer: the runs :meth:`claim` named are fenced (see the
    module docstring); every connection is made again after it is lost (``outage``)."""

    def __init__(self, url: str, outage: Outage) -> None:
        super().__init__(url)
        self.outage = outage
        self._attempts: dict[str, str] = {}  # generation id -> this process's attempt
        self._reserved: set[str] = set()

    # -- the store, opened again after a failure (the plain writer gives up on it) --------

    def _open(self) -> RunStore:
        from image_project.store.db import RunStore

        if self._store is None:
            self._store = RunStore.open(self.url)
        assert isinstance(self._store, RunStore)
        return self._store

    def store(self) -> RunStore:
        """The open store (blocking: call from a thread), opened again after a loss."""
        return self.outage.call(self._open)

    # -- an attempt -----------------------------------------------------------------------

    def claim(self, generation_id: str, campaign: str) -> tuple[str, int, str | None]:
        """Make this process's new attempt the owner of ``generation_id`` (blocking):
        ``(attempt, attempts started so far, stored status or None)``. The claim waits for an
        owner's records transaction in flight, so a run it finds unrecorded is not being
        recorded."""
        attempt = new_attempt()

        def write() -> tuple[int, str | None]:
            with self._open().transaction() as conn:
                started = conn.execute(
                    text(
                        f"INSERT INTO {CLAIMS_TABLE} (generation_id, campaign, attempt) "
                        "VALUES (:g, :c, :a) ON CONFLICT (generation_id) DO UPDATE SET "
                        f"attempt = EXCLUDED.attempt, attempts = {CLAIMS_TABLE}.attempts + 1, "
                        "claimed_at = now() RETURNING attempts"
                    ),
                    {"g": generation_id, "c": campaign, "a": attempt},
                ).scalar_one()
                status = conn.execute(
                    text("SELECT status FROM runs WHERE generation_id = :g"), {"g": generation_id}
                ).scalar()
            return int(started), None if status is None else str(status)

        started, status = self.outage.call(write)
        self._attempts[generation_id] = attempt
        return attempt, started, status

    def release(self, generation_id: str) -> None:
        """This process is done with its attempt at ``generation_id``."""
        self._attempts.pop(generation_id, None)
        self._reserved.discard(generation_id)

    def requeued(self, generation_id: str) -> None:
        """Count one attempt that went back to the queue because the infrastructure failed
        (blocking)."""

        def write() -> None:
            with self._open().transaction() as conn:
                conn.execute(
                    text(
                        f"UPDATE {CLAIMS_TABLE} SET requeued = requeued + 1 "
                        "WHERE generation_id = :g"
                    ),
                    {"g": generation_id},
                )

        self.outage.call(write)

    def _check(self, conn: Connection, generation_id: str) -> bool:
        """Raise unless this attempt owns the unrecorded run (the claim row locked until the
        transaction ends); True when the run is recorded and this attempt still owns it (its
        own write, whose commit was not acknowledged)."""
        owner = conn.execute(
            text(f"SELECT attempt FROM {CLAIMS_TABLE} WHERE generation_id = :g FOR UPDATE"),
            {"g": generation_id},
        ).scalar()
        recorded = conn.execute(
            text("SELECT status FROM runs WHERE generation_id = :g"), {"g": generation_id}
        ).scalar()
        if owner != self._attempts.get(generation_id):
            if recorded is not None:
                raise RunAlreadyRecorded(f"already recorded by another attempt ({recorded})")
            raise RunTakenOver(f"taken over by another attempt ({owner})")
        return recorded is not None

    def claim_seq(self, local_next: int, run_id: str | None = None) -> tuple[int, str | None]:
        if run_id is None or run_id not in self._attempts:
            return super().claim_seq(local_next, run_id)

        def reserve() -> int:
            with self._open().transaction(seq_lock=True) as conn:
                if self._check(conn, run_id):
                    raise RunAlreadyRecorded("already recorded")
                mine = conn.execute(
                    text(f"SELECT seq FROM {CLAIMS_TABLE} WHERE generation_id = :g"), {"g": run_id}
                ).scalar()
                if mine is not None:
                    return int(mine)
                highest = conn.execute(
                    text(
                        "SELECT greatest((SELECT max(seq) FROM images), "
                        f"(SELECT max(seq) FROM {CLAIMS_TABLE}))"
                    )
                ).scalar()
                seq = max(local_next, int(highest or 0) + 1)
                conn.execute(
                    text(f"UPDATE {CLAIMS_TABLE} SET seq = :s WHERE generation_id = :g"),
                    {"s": seq, "g": run_id},
                )
                return seq

        seq = self.outage.call(reserve)  # past the bound: DatabaseLost, a RecordsRefused
        self._reserved.add(run_id)
        return seq, None

    def may_record(self, run_id: str) -> None:
        if run_id not in self._attempts or run_id in self._reserved:
            return
        from image_project.campaign.outage import is_connection_loss

        try:
            self.outage.check()
            with self._open().transaction() as conn:
                if self._check(conn, run_id):
                    raise RunAlreadyRecorded("already recorded")
        except RecordsRefused:
            raise
        except Exception as exc:
            if is_connection_loss(exc):
                raise StoreUnreachable(f"the store did not answer: {_first_line(exc)}") from exc
            raise

    def save(self, record: RunRecord, *, only_if_ready: bool = False) -> StoreOutcome:
        gid = record.generation_id
        if gid not in self._attempts:
            return super().save(record, only_if_ready=only_if_ready)
        from image_project.campaign.outage import is_connection_loss

        try:
            self._open().write(record, check=lambda conn: self._check(conn, gid))
        except RecordsRefused:
            raise
        except Exception as exc:
            return StoreOutcome(self.shown_url, _first_line(exc), later=is_connection_loss(exc))
        return StoreOutcome(self.shown_url)

    def save_again(self, record: RunRecord) -> None:
        """Write ``record`` (blocking), made again after every lost connection; raises
        :class:`RecordsRefused` when another attempt owns the run now, and
        :class:`~image_project.campaign.outage.DatabaseLost` past the bound."""
        gid = record.generation_id
        self.outage.call(
            lambda: self._open().write(record, check=lambda conn: self._check(conn, gid))
        )


def _first_line(exc: BaseException) -> str:
    text_ = str(exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__
