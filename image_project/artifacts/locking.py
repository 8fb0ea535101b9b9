"""Mutual exclusion across processes and threads with a kernel-held file lock.

:class:`FileLock` wraps :class:`filelock.FileLock`: on POSIX an exclusive ``fcntl.flock`` on
``path`` (the file is created if missing), on Windows an ``msvcrt`` lock. What it guarantees:

* **At most one holder.** Between processes, and between threads of one process: every
  acquisition opens the file anew, and a ``flock`` lock belongs to the open file description,
  so two :class:`FileLock` objects in one process exclude each other exactly as two processes
  do (filelock is used with ``is_singleton=False``, so each of ours is its own lock).
* **No stale lock.** The kernel holds the lock, not the file: it is dropped when its holder
  releases it or its process ends in any way (SIGKILL, a crash). There is nothing to detect
  or recover, so there is no pid, age or breaker logic here.
* **A leftover lock file means nothing.** The file stays on disk after release on POSIX
  (unlinking it would let a waiter that already opened the old file and a newcomer that
  creates a new one both "hold" the lock). It is empty, any content is ignored, and a file
  at ``path`` with no live holder never blocks a run. Never delete it while a run may be
  active: a run that opens a new file at the same path would not be excluded by the holder
  of the old one. Deleting it when nothing runs is harmless and never needed.
* **A bounded wait.** Acquiring retries every ``poll_interval_s`` for up to ``timeout_s``
  (finite; ``0`` tries once); on timeout an :class:`~image_project.errors.ImageProjectError`
  names the lock file and says what to do.
* **No silent downgrade.** filelock would fall back to its ``SoftFileLock`` (an existence
  lock, which a killed process leaves stale) on a filesystem without ``flock``; we pass
  ``fallback_to_soft=False`` and raise :class:`~image_project.errors.ImageProjectError`.

The lock lives as long as its holder keeps it: dropping the last reference to a held
:class:`FileLock` closes its file and so releases it (hold it in a ``with`` block or a
variable until :meth:`FileLock.release`).

No thread affinity: a lock may be acquired in one worker thread and released in another (the
app runs these calls through ``anyio.to_thread.run_sync``), hence ``thread_local=False``. Not
re-entrant: :meth:`FileLock.acquire` on a lock that is held (or being acquired, from any
thread) raises ``RuntimeError`` (filelock itself would count the nesting and let a second
thread in). A second :class:`FileLock` on the same path waits like any other waiter, even in
the thread that holds the first, and then times out; so code must not take a lock it already
holds (:func:`~image_project.artifacts.manifest.append_manifest_row` does not take it).
"""

from __future__ import annotations

import errno
import math
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from image_project.errors import ImageProjectError

if TYPE_CHECKING:  # imported when a lock is first taken: a prompt-only run never takes one
    import filelock

DEFAULT_TIMEOUT_S = 30.0
_POLL_INTERVAL_S = 0.025


class FileLock:
    """Exclusive ownership of ``path`` across processes and threads; use as a context manager.

    ``timeout_s`` bounds the wait (``0`` tries once); on timeout an
    :class:`~image_project.errors.ImageProjectError` names the lock file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        poll_interval_s: float = _POLL_INTERVAL_S,
    ) -> None:
        if not 0 <= timeout_s < math.inf:  # also rejects NaN
            raise ValueError(f"timeout_s: got {timeout_s!r}, must be >= 0 and finite")
        if not 0 < poll_interval_s < math.inf:
            raise ValueError(f"poll_interval_s: got {poll_interval_s!r}, must be > 0 and finite")
        self._path = Path(path)
        self._timeout_s = float(timeout_s)
        self._poll_interval_s = float(poll_interval_s)
        self._guard = threading.Lock()
        # The filelock object of the acquisition in progress or held; None when free.
        self._inner: filelock.BaseFileLock | None = None
        self._held = False

    @property
    def path(self) -> Path:
        return self._path

    @property
    def is_held(self) -> bool:
        return self._held

    def __repr__(self) -> str:
        return f"FileLock({str(self._path)!r}, held={self.is_held})"

    def acquire(self) -> FileLock:
        """Wait until the lock is ours or raise after ``timeout_s``."""
        import filelock

        with self._guard:
            if self._inner is not None:
                raise RuntimeError(f"{self!r} is already held; FileLock is not re-entrant")
            # A fresh filelock object per acquisition: its own open file, so its own flock.
            inner = filelock.FileLock(
                self._path,
                timeout=self._timeout_s,
                poll_interval=self._poll_interval_s,
                thread_local=False,
                is_singleton=False,
                fallback_to_soft=False,
            )
            self._inner = inner
        try:
            inner.acquire()
        except filelock.Timeout:
            self._forget(inner)
            raise ImageProjectError(
                f"Timed out after {self._timeout_s:g}s waiting for lock {self._path}: another "
                "run (in this or another process) is holding it. Let that run finish and try "
                f"again, or find it with `fuser -v {self._path}`. Do not delete the lock file "
                "while a run is active; a lock file with no live holder never blocks a run."
            ) from None
        except OSError as exc:
            self._forget(inner)
            if exc.errno == errno.ENOSYS:
                raise ImageProjectError(
                    f"Cannot lock {self._path}: its filesystem does not support flock locks. "
                    "Put the output files on a local filesystem."
                ) from exc
            raise
        except BaseException:
            self._forget(inner)
            raise
        with self._guard:
            self._held = True
        return self

    def release(self) -> None:
        """Release the lock (the file stays on disk); a no-op when not held."""
        with self._guard:
            inner = self._inner
            if inner is None or not self._held:
                return
            self._held = False
            self._inner = None
            inner.release()

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _forget(self, inner: filelock.BaseFileLock) -> None:
        """Drop a failed acquisition so the object can be acquired again."""
        with self._guard:
            if self._inner is inner:
                self._inner = None
