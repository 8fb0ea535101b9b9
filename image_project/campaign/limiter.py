"""One request budget for every worker on an API key: :class:`PostgresBudget`, a
:class:`~image_project.backends.pacing.SharedBudget` kept in the campaign's PostgreSQL by
pyrate-limiter's ``PostgresBucket``.

The bucket is a sliding-window log (one row per request, stamped with the database's clock,
so machines with skewed clocks agree) checked and written under a table lock: at most
``limit`` requests in any ``window`` across every process that uses the table. The rate comes
from the provider's headers, as the in-process pacer's does (and once one process has it,
from the database to the others): ``x-ratelimit-limit-requests``
and the window's length (the longest ``x-ratelimit-reset-requests`` seen), rounded up to a
whole second, plus :data:`TRANSIT_S` for the time a request takes to reach the server (which
counts it when it arrives). Before the first answer the rate is unknown and nothing is held.

The table is named after the key (a hash of the base URL and the API key, never the key
itself), so workers of one key share one budget and a worker with its own local server
(``backend.base_url``) has its own.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import anyio

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool
    from pyrate_limiter import PostgresBucket

    from image_project.campaign.outage import Outage

T = TypeVar("T")

TRANSIT_S = 0.1
"""Added to the window: a request stamped at the end of one window may reach the server in
the next."""

_CONTENTION_S = 0.02  # another process held the table lock: try again this soon
_LEAK_EVERY = 64  # puts between two clean-ups of rows older than the window
_LOOKUP_EVERY_S = 0.25  # before any rate is known: how often to look for a published one
_POOL_WAIT_S = 2.0  # waiting longer for a pooled connection counts as a lost connection
_RATES_LOCK = 0x1A6E_0004  # pg_advisory_xact_lock key: creating RATES_TABLE

RATES_TABLE = "image_project_budget_rates"
"""Each budget's rate as a process learned it from the headers."""


def budget_name(base_url: str | None, api_key: str | None) -> str:
    """The budget's table name for one key: ``b_`` and 16 hex digits of a hash of the base
    URL and the key (the key is never stored)."""
    digest = hashlib.sha256(f"{base_url or 'openai'}\0{api_key or ''}".encode()).hexdigest()
    return f"b_{digest[:16]}"


class PostgresBudget:
    """The shared budget of one key in the database at ``conninfo`` (a libpq URL).

    The rate a process learns is also published (table :data:`RATES_TABLE`, one row per
    budget), and a process that has not heard an answer yet takes it from there: a worker
    that starts late spends the budget from its first call, instead of sending a burst that
    the others' share of the window does not allow. The database work happens in
    :meth:`spend`'s thread, never on the event loop (:meth:`learn` only notes the rate)."""

    def __init__(self, conninfo: str, name: str, outage: Outage | None = None) -> None:
        from psycopg_pool import ConnectionPool

        self.name = name
        self._outage = outage
        # check: a connection the server dropped (a restart) is replaced when taken.
        self._pool: ConnectionPool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=4,
            open=True,
            name=f"budget-{name}",
            check=ConnectionPool.check_connection,
            timeout=_POOL_WAIT_S,
            reconnect_timeout=outage.lost_after_s if outage is not None else 300.0,
        )
        self._bucket: PostgresBucket | None = None
        self._rate: tuple[int, int] | None = None  # (limit, window in ms) in force
        self._wanted: tuple[int, int] | None = None  # what the headers said last
        self._next_lookup = 0.0
        self._lock = threading.Lock()  # the bucket keeps its last decision per object
        self._puts = 0
        self.spent = 0
        self.waited_s = 0.0
        try:
            self._retried(self._create)
        except BaseException:
            self._pool.close()
            raise

    def _create(self) -> None:
        with self._pool.connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_RATES_LOCK,))
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {RATES_TABLE} (name varchar PRIMARY KEY, "
                "request_limit integer NOT NULL, window_ms integer NOT NULL)"
            )

    def _retried(self, fn: Callable[[], T]) -> T:
        """``fn()``, made again after a lost connection when the budget has an outage
        tracker (a campaign worker's: :mod:`.outage`)."""
        return fn() if self._outage is None else self._outage.call(fn)

    @property
    def rate(self) -> tuple[int, int] | None:
        """``(limit, window_ms)`` in force, None before the headers (this process's or
        another's) gave one."""
        return self._rate

    def learn(self, limit: int, window_s: float) -> None:
        self._wanted = (limit, int((math.ceil(window_s) + TRANSIT_S) * 1000))

    def _apply(self) -> None:
        """Bring the bucket to the rate this process learned (publishing it), or to the one
        another process published; under ``_lock``, in a thread."""
        wanted = self._wanted
        if wanted is not None and wanted != self._rate:
            with self._pool.connection() as conn:
                conn.execute(
                    f"INSERT INTO {RATES_TABLE} (name, request_limit, window_ms) "
                    "VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
                    "request_limit = EXCLUDED.request_limit, window_ms = EXCLUDED.window_ms",
                    (self.name, *wanted),
                )
            self._set_rate(wanted)
        elif self._rate is None and time.monotonic() >= self._next_lookup:
            with self._pool.connection() as conn:
                row = conn.execute(
                    f"SELECT request_limit, window_ms FROM {RATES_TABLE} WHERE name = %s",
                    (self.name,),
                ).fetchone()
            if row is None:
                self._next_lookup = time.monotonic() + _LOOKUP_EVERY_S
            else:
                self._set_rate((int(row[0]), int(row[1])))

    def _set_rate(self, rate: tuple[int, int]) -> None:
        from pyrate_limiter import PostgresBucket, Rate

        rates = [Rate(*rate)]
        if self._bucket is None:
            self._bucket = PostgresBucket(self._pool, self.name, rates)
        else:
            self._bucket.rates = rates
        self._rate = rate

    async def spend(self) -> float:
        """Wait until one more request fits the shared window and record it; the seconds
        waited (0 before the rate is known)."""
        waited = 0.0
        while True:
            wait_s = await anyio.to_thread.run_sync(self._try)
            if wait_s <= 0:
                self.spent += 1
                self.waited_s += waited
                return waited
            await anyio.sleep(wait_s)
            waited += wait_s

    def _try(self) -> float:
        """Put one request in the bucket: 0 when it fits, else the seconds to wait; made
        again on a fresh connection after a lost one."""
        return self._retried(self._try_once)

    def _try_once(self) -> float:
        from pyrate_limiter import RateItem

        with self._lock:
            # A live connection first: the bucket's clock would fall back to this machine's
            # clock (logging a traceback) on a dead one.
            with self._pool.connection() as conn:
                conn.execute("SELECT 1")
            self._apply()
            bucket = self._bucket
            if bucket is None:
                return 0.0
            item = RateItem("call", int(bucket.now()), 1)  # type: ignore[no-untyped-call]
            decision = bucket.put_decision(item)
            assert not isinstance(decision, Awaitable)
            if decision.allowed:
                self._puts += 1
                if self._puts % _LEAK_EVERY == 0:
                    bucket.leak(item.timestamp)
                return 0.0
        if decision.retry_after_ms is None:
            # Another process held the table lock (the bucket does not wait for it): the
            # window may have room, so ask again soon rather than for a full window's wait.
            return _CONTENTION_S
        return max(decision.retry_after_ms / 1000, _CONTENTION_S)

    def close(self) -> None:
        self._pool.close()
