"""The database as a worker sees it: :class:`Outage`, one per worker, shared by every
connection the worker holds (procrastinate's queue connector, the store, the key's shared
rate budget).

A call that loses its connection (:func:`is_connection_loss`: psycopg's
``OperationalError``, which covers a refused connect, a server shut down under the session
and a pool that cannot hand out a connection) is made again on a fresh connection after a
backoff (:data:`BACKOFF_S`, doubling up to :data:`BACKOFF_MAX_S`) until it succeeds or the
database has been unreachable for ``lost_after_s`` seconds, counted from the first failure
of the outage, whichever connection saw it. Then :class:`DatabaseLost` is raised, and every
later call raises it at once: the worker stops (``image-project worker`` exits
:data:`EXIT_DATABASE_LOST` with one line). Any success ends the outage.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import anyio

from image_project.store.writer import StoreUnreachable

T = TypeVar("T")

BACKOFF_S: Final = 0.1
BACKOFF_MAX_S: Final = 2.0
EXIT_DATABASE_LOST: Final = 3
"""``image-project worker``'s exit code when the database stayed unreachable longer than
``--database-lost-after``."""


class DatabaseLost(StoreUnreachable):
    """The database has been unreachable for longer than the worker's bound (a run that
    meets it writes nothing: :class:`~image_project.store.writer.RecordsRefused`)."""


def is_connection_loss(exc: BaseException) -> bool:
    """True when ``exc`` (or what it was raised from) is a lost or refused connection."""
    import psycopg

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, psycopg.OperationalError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class Outage:
    """The worker's view of the database: when the current outage began (None: the last
    call succeeded) and when the last one ended; see the module docstring."""

    def __init__(self, lost_after_s: float, *, clock: Callable[[], float] = time.monotonic):
        self.lost_after_s = lost_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self.began: float | None = None
        self.ended: float | None = None
        self.lost = False
        self.outages = 0
        self._failures = 0
        self.on_lost: Callable[[], None] = lambda: None

    def ok(self) -> None:
        """A call succeeded: any outage is over."""
        with self._lock:
            if self.began is not None:
                self.began, self.ended = None, self._clock()

    def failed(self, exc: BaseException) -> float:
        """A call lost its connection: the seconds to wait before the next try; raises
        :class:`DatabaseLost` (from ``exc``) once the outage is longer than the bound."""
        with self._lock:
            now = self._clock()
            if self.began is None:
                self.began, self._failures = now, 0
                self.outages += 1
            self._failures += 1
            failures = self._failures
            waited = now - self.began
            newly_lost = not self.lost and waited > self.lost_after_s
            self.lost = self.lost or newly_lost
            lost = self.lost
        if newly_lost:
            self.on_lost()
        if lost:
            raise DatabaseLost(
                f"the database has not answered for {self.lost_after_s:g} s "
                f"(--database-lost-after): {_first_line(exc)}"
            ) from exc
        return float(min(BACKOFF_MAX_S, BACKOFF_S * 2 ** min(5, failures - 1)))

    def check(self) -> None:
        """Raise :class:`DatabaseLost` if the database was given up on."""
        if self.lost:
            raise DatabaseLost(f"the database has not answered for {self.lost_after_s:g} s")

    def since_recovered(self) -> float | None:
        """Seconds since the last outage ended (None: no outage ended yet)."""
        return None if self.ended is None else self._clock() - self.ended

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` (blocking; call it from a thread), made again after a lost connection."""
        while True:
            self.check()
            try:
                result = fn()
            except Exception as exc:
                if not is_connection_loss(exc):
                    raise
                time.sleep(self.failed(exc))
                continue
            self.ok()
            return result

    async def acall(self, fn: Callable[[], Awaitable[T]]) -> T:
        """``await fn()``, made again after a lost connection."""
        while True:
            self.check()
            try:
                result = await fn()
            except Exception as exc:
                if not is_connection_loss(exc):
                    raise
                await anyio.sleep(self.failed(exc))
                continue
            self.ok()
            return result


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
