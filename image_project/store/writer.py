"""What a run uses to write itself into the store: :class:`StoreWriter`.

The transcript is the source of truth, so the writer never fails a run: every problem is
returned as a :class:`StoreOutcome` (and the run says so, loudly). The store is opened when
the writer first touches it, through :class:`~image_project.store.db.RunStore` (which
creates or migrates it). One writer serves one run or, in the CLI, all the runs of one
process (the store is opened once), also runs in flight together (``run.parallel``): each
run's ``seq`` transaction is kept under its generation id, so one run's claim never rolls
back another's.

``seq``: with a PostgreSQL store the titles ``seq`` is allocated inside the run's store
transaction (:meth:`StoreWriter.claim_seq`), so machines sharing the store never share a
number; with SQLite (one machine) the manifest's file lock allocates it, as without a store.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from image_project.config.store_url import POSTGRES_PREFIX, redact_url, sqlite_path
from image_project.errors import ImageProjectError

if TYPE_CHECKING:
    from image_project.record.run import RunRecord
    from image_project.store.db import PendingWrite, RunStore


class RecordsRefused(ImageProjectError):
    """This attempt at a run must write none of its records (no image, manifest row,
    generations row, transcript or store row): raised by a fenced writer (a campaign's,
    :mod:`image_project.campaign.fence`) and passed through by the run driver, which then
    writes nothing. Its message is the one line that says why."""


class RunAlreadyRecorded(RecordsRefused):
    """The run is already in the store: another attempt made it."""


class RunTakenOver(RecordsRefused):
    """Another attempt owns the run now (this one was taken for stalled)."""


class StoreUnreachable(RecordsRefused):
    """The store could not be asked whether this attempt may record the run."""


TRANSCRIPT_SUFFIX = "_transcript.json"
"""A run's transcript is ``<image.log_path>/<generation_id>_transcript.json``."""


def unstored_transcripts(folder: Path, stored: Collection[str]) -> list[Path]:
    """The transcripts in ``folder`` whose generation id (read from the file name, so no
    transcript is opened) is not in ``stored``, by name: runs that ended without their store
    write (killed between the transcript and the store, or a store outage)."""
    try:
        names = sorted(folder.glob("*" + TRANSCRIPT_SUFFIX))
    except OSError:
        return []
    return [p for p in names if p.name[: -len(TRANSCRIPT_SUFFIX)] not in stored]


logger = logging.getLogger("image_project.store")


@dataclass(frozen=True)
class StoreOutcome:
    """Whether the run reached the store: ``url`` without its password, ``error`` None when
    it was written."""

    url: str
    error: str | None = None
    later: bool = False
    """The record was not written because the connection was lost; the caller writes it
    again once the store answers (a campaign worker does)."""

    @property
    def written(self) -> bool:
        return self.error is None


class StoreWriter:
    """Writes runs to the store at ``url``; :meth:`close` when done."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._store: RunStore | None = None
        # The open seq transactions (PostgreSQL), by the generation id of the run that
        # claimed it (None: a caller that named none).
        self._pending: dict[str | None, PendingWrite] = {}
        self._open_failure: Exception | None = None
        self._looked_for_unstored = False

    @property
    def shown_url(self) -> str:
        """The URL as messages show it (no password)."""
        if self._store is not None:
            return self._store.safe_url
        return redact_url(self.url)

    @property
    def allocates_seq(self) -> bool:
        """True when the store, not the manifest lock, allocates ``seq`` (PostgreSQL)."""
        return self.url.startswith(POSTGRES_PREFIX)

    def _open(self) -> RunStore:
        """The open store. A store that could not be opened is not tried again by this
        writer: each attempt can wait for the connect timeout, and a later run of the same
        process would pay it twice more (its ``seq`` claim and its save); its runs say the
        store was not written, and ``runs import`` writes them later."""
        if self._open_failure is not None:
            raise self._open_failure
        if self._store is None:
            from image_project.store.db import RunStore

            try:
                self._store = RunStore.open(self.url)
            except Exception as exc:
                self._open_failure = exc
                raise
        return self._store

    def claim_seq(self, local_next: int, run_id: str | None = None) -> tuple[int, str | None]:
        """The run's ``seq`` and, if the store could not allocate it, why (``seq`` is then
        ``local_next``, from this machine's manifest). Only a PostgreSQL store allocates;
        otherwise ``(local_next, None)``. Call from the records phase, under the manifest
        lock; :meth:`save` of the record of generation ``run_id`` commits the transaction
        this opens (a run's claim waits for the commit of another run's)."""
        if not self.allocates_seq:
            return local_next, None
        self.abandon(run_id)
        try:
            pending = self._open().claim_seq(local_next)
        except Exception as exc:
            return local_next, _reason(exc)
        self._pending[run_id] = pending
        return pending.seq, None

    def save(self, record: RunRecord, *, only_if_ready: bool = False) -> StoreOutcome:
        """Write ``record`` (in the transaction :meth:`claim_seq` opened, if any). Never
        raises for a store problem: the outcome says what went wrong.

        ``only_if_ready`` (an interrupted run, whose user is waiting for the exit): write
        only into a store that is open or is a SQLite file at the current schema, which
        SQLAlchemy opens and writes in a fraction of a second; a SQLite store that would
        first have to be created (the first run into a new output folder: Alembic imported,
        the schema migrated, 1-2 s) is left alone and the outcome says so. The transcript
        has the run, and the next run names it with the command that imports it."""
        if only_if_ready and self._store is None and self._open_failure is None:
            not_ready = self._not_ready()
            if not_ready is not None:
                return StoreOutcome(self.shown_url, not_ready)
        key = record.generation_id if record.generation_id in self._pending else None
        pending = self._pending.pop(key, None)
        try:
            self._open().write(record, pending=pending)
        except Exception as exc:
            if pending is not None:
                self._pending[key] = pending
            self.abandon(key)  # never raises: the outcome already says what went wrong
            return StoreOutcome(self.shown_url, _reason(exc))
        return StoreOutcome(self.shown_url)

    def may_record(self, run_id: str) -> None:
        """Raise :class:`RecordsRefused` when the run ``run_id`` must write nothing (a fenced
        writer's check, made before the transcript is written); this writer never does."""

    def _not_ready(self) -> str | None:
        """Why the store cannot be written at once (a SQLite store not yet created, or at
        another schema revision), else None, with it then open for the write."""
        if sqlite_path(self.url) is None:
            return None
        from image_project.store.db import RunStore

        try:
            store = RunStore.open_current(self.url)
        except Exception:
            return None  # the write reports the problem
        if store is None:
            return "not created on an interrupted exit, which it would slow down"
        self._store = store
        return None

    def unstored_once(self, folder: Path) -> list[Path]:
        """The transcripts in ``folder`` that the store lacks (:func:`unstored_transcripts`),
        the first time this writer is asked after a write; ``[]`` every later time, when the
        store is not open, or when it cannot be read (a store problem is reported by the
        write itself, never here)."""
        if self._looked_for_unstored or self._store is None:
            return []
        self._looked_for_unstored = True
        try:
            stored = self._store.stored_ids()
        except Exception as exc:
            logger.debug("could not list the stored runs: %s", exc)
            return []
        return unstored_transcripts(folder, stored)

    def abandon(self, run_id: str | None = None) -> None:
        """Roll back the transaction :meth:`claim_seq` opened for ``run_id`` and :meth:`save`
        did not use."""
        pending = self._pending.pop(run_id, None)
        if pending is not None:
            try:
                pending.abandon()
            except Exception as exc:  # the connection is gone; nothing was committed
                logger.debug("rolling back the store transaction failed: %s", exc)

    def close(self) -> None:
        for run_id in list(self._pending):
            self.abandon(run_id)
        if self._store is not None:
            self._store.close()
            self._store = None


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
