"""Cross-process mutual exclusion with a lock file.

:class:`FileLock` owns ``path`` while the file exists. It is created with
``O_CREAT | O_EXCL`` (atomic on local filesystems) and holds
``{"pid": ..., "host": ..., "created_at": ..., "token": ...}`` as JSON, so a person looking at
a leftover lock can tell who made it (``token`` makes every lock's content unique). Waiting
is a short sleep-and-retry loop bounded by ``timeout_s``: this is inter-process exclusion,
where no in-process event can tell us the file went away.
The lock has no thread affinity: it may be acquired in one worker thread and released in
another (the app runs these calls through ``anyio.to_thread.run_sync``). It is not
re-entrant: a second :class:`FileLock` on the same path in the same process waits like
any other process would.

A lock left behind by a killed run is *stale* and is recovered with a WARNING naming the
path and the old owner when:

* its process is not running on this host (``os.kill(pid, 0)``; on Linux also a zombie, or
  a process that started after the lock was written, i.e. a recycled pid; on Windows a
  process handle query, never ``os.kill``, which would terminate the target there);
* it names this very process but no :class:`FileLock` of ours holds it (a container that
  reuses the same pid on every start);
* it is older than ``stale_after_s`` (``None`` disables this rule), whoever owns it;
* its content is unreadable (a writer killed between create and write) and it is older
  than a few seconds.

Two waiters that judge the same lock stale at once must not both remove it (the second
would delete the lock the first has just taken), so breaking goes through a short-lived
``<path>.break`` lock, under which the lock is re-read and removed only if unchanged. A
breaker lives for milliseconds; one older than ten seconds was abandoned by a killed process
and is removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from image_project.errors import ImageProjectError

__all__ = ["DEFAULT_STALE_AFTER_S", "DEFAULT_TIMEOUT_S", "FileLock"]

_LOGGER = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_STALE_AFTER_S = 600.0
_POLL_INTERVAL_S = 0.025
_UNREADABLE_GRACE_S = 5.0
_BREAK_LOCK_STALE_S = 10.0
_PID_REUSE_MARGIN_S = 5.0
_BINARY = getattr(os, "O_BINARY", 0)

_HOST = socket.gethostname()
# Exact lock-file contents currently held by FileLock objects of this process.
_HELD_BY_THIS_PROCESS: set[bytes] = set()


@dataclass(frozen=True)
class _LockOwner:
    """What a lock file says about its owner. ``pid`` is None when the content is unreadable."""

    raw: bytes
    pid: int | None
    host: str | None
    created_at: str | None
    created_epoch: float
    age_s: float

    def describe(self) -> str:
        if self.pid is None:
            return f"unreadable content {self.raw[:80]!r}, {self.age_s:.1f}s old"
        return (
            f"pid={self.pid}, host={self.host}, created_at={self.created_at}, {self.age_s:.1f}s old"
        )


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _read_owner(path: Path) -> _LockOwner | None:
    """The current owner of ``path``, or None if there is no lock file right now."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
            mtime = os.fstat(fh.fileno()).st_mtime
    except FileNotFoundError:
        return None
    except PermissionError:
        if os.name == "nt":  # a file being deleted on Windows
            return None
        raise
    now = time.time()
    pid: int | None = None
    host: str | None = None
    created_at: str | None = None
    created_epoch = mtime
    try:
        info = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        info = None
    if isinstance(info, dict) and isinstance(info.get("pid"), int):
        pid = info["pid"]
        host = info["host"] if isinstance(info.get("host"), str) else None
        if isinstance(info.get("created_at"), str):
            created_at = info["created_at"]
            with contextlib.suppress(ValueError):
                created_epoch = datetime.fromisoformat(created_at).timestamp()
    return _LockOwner(raw, pid, host, created_at, created_epoch, max(0.0, now - mtime))


def _linux_process(pid: int) -> tuple[str, float] | None:
    """(state letter, start time as epoch seconds) from /proc, or None when unavailable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/stat").read_text()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    # The command name is in parentheses and may contain spaces: split after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    btime = next((line.split()[1] for line in boot.splitlines() if line.startswith("btime ")), None)
    try:
        state = fields[0]
        start = int(btime) + int(fields[19]) / ticks if btime is not None else float("nan")
    except (IndexError, ValueError, ZeroDivisionError):
        return None
    return state, start


if sys.platform == "win32":
    import ctypes

    def _pid_running(pid: int) -> bool:
        kernel32 = ctypes.windll.kernel32
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return kernel32.GetLastError() != 87  # ERROR_INVALID_PARAMETER: no such process
        try:
            code = ctypes.c_ulong()
            if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
                return True
            return code.value == 259  # STILL_ACTIVE
        finally:
            kernel32.CloseHandle(handle)

else:

    def _pid_running(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:  # PermissionError: it exists but belongs to someone else
            return True
        return True


def _owner_dead_reason(owner: _LockOwner) -> str | None:
    """Why the owning process cannot be holding the lock, if we can tell (same host only)."""
    pid = owner.pid
    if pid is None or owner.host != _HOST:
        return None
    if pid == os.getpid():
        if owner.raw in _HELD_BY_THIS_PROCESS:
            return None
        return f"it names this process (pid {pid}) but no lock of ours holds it"
    if pid <= 0 or not _pid_running(pid):
        return f"process {pid} is not running on this host"
    proc = _linux_process(pid)
    if proc is not None:
        state, started = proc
        if state in ("Z", "X"):
            return f"process {pid} has exited (state {state})"
        if started > owner.created_epoch + _PID_REUSE_MARGIN_S:
            return f"process {pid} started after the lock was written (recycled pid)"
    return None


def _write_exclusive(path: Path, payload: bytes) -> bool:
    """Create ``path`` holding ``payload`` iff it does not exist. True when we created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY, 0o644)
    except FileExistsError:
        return False
    except PermissionError:
        if os.name == "nt":  # the previous lock is still being deleted
            return False
        raise
    try:
        try:
            os.write(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return True


def _owner_payload() -> bytes:
    """Lock-file content; ``token`` makes it unique so ownership is compared byte for byte."""
    info = {
        "pid": os.getpid(),
        "host": _HOST,
        "created_at": _now_iso(),
        "token": secrets.token_hex(8),
    }
    return json.dumps(info).encode()


def _create_owned(path: Path, payload: bytes) -> bool:
    """:func:`_write_exclusive`, registering ``payload`` as ours *before* the file appears.

    Another thread of this process that reads the new file must never judge it stale
    (a lock naming this pid that no lock of ours holds).
    """
    _HELD_BY_THIS_PROCESS.add(payload)
    try:
        created = _write_exclusive(path, payload)
    except BaseException:
        _HELD_BY_THIS_PROCESS.discard(payload)
        raise
    if not created:
        _HELD_BY_THIS_PROCESS.discard(payload)
    return created


class FileLock:
    """Exclusive ownership of ``path`` across processes; use as a context manager.

    ``timeout_s`` bounds the wait (``0`` tries once); on timeout an
    :class:`~image_project.errors.ImageProjectError` names the lock file and its owner.
    ``stale_after_s`` is the age beyond which any lock is considered abandoned (``None``:
    never by age alone).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        stale_after_s: float | None = DEFAULT_STALE_AFTER_S,
        poll_interval_s: float = _POLL_INTERVAL_S,
    ) -> None:
        if timeout_s < 0:
            raise ValueError(f"timeout_s: got {timeout_s!r}, must be >= 0")
        if stale_after_s is not None and stale_after_s <= 0:
            raise ValueError(f"stale_after_s: got {stale_after_s!r}, must be > 0 or None")
        if poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s: got {poll_interval_s!r}, must be > 0")
        self._path = Path(path)
        self._timeout_s = float(timeout_s)
        self._stale_after_s = stale_after_s
        self._poll_interval_s = poll_interval_s
        self._held: bytes | None = None

    @property
    def path(self) -> Path:
        return self._path

    @property
    def is_held(self) -> bool:
        return self._held is not None

    def __repr__(self) -> str:
        return f"FileLock({str(self._path)!r}, held={self.is_held})"

    def acquire(self) -> FileLock:
        """Wait until the lock is ours (recovering a stale one) or raise after ``timeout_s``."""
        if self._held is not None:
            raise RuntimeError(f"{self!r} is already held; FileLock is not re-entrant")
        self._path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self._timeout_s
        while True:
            payload = _owner_payload()
            if _create_owned(self._path, payload):
                self._held = payload
                return self
            owner = _read_owner(self._path)
            if owner is not None:
                reason = self._stale_reason(owner)
                broken = reason is not None and self._break(owner, reason)
                if broken and time.monotonic() < deadline:
                    continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                held_by = owner.describe() if owner is not None else "an owner that just left"
                raise ImageProjectError(
                    f"Timed out after {self._timeout_s:g}s waiting for lock {self._path} "
                    f"(held by {held_by}). If no other run is using it, delete {self._path}."
                )
            time.sleep(min(self._poll_interval_s, remaining))

    def release(self) -> None:
        """Remove the lock file if it is still ours; a no-op when not held."""
        payload = self._held
        if payload is None:
            return
        self._held = None
        try:
            try:
                current = self._path.read_bytes()
            except FileNotFoundError:
                _LOGGER.warning("Lock %s disappeared while we held it", self._path)
                return
            if current != payload:
                _LOGGER.warning(
                    "Lock %s was taken over while we held it (now %r); leaving it in place",
                    self._path,
                    current[:120],
                )
                return
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
        finally:
            # Only now: until the file is gone, other threads must still see it as ours.
            _HELD_BY_THIS_PROCESS.discard(payload)

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _stale_reason(self, owner: _LockOwner) -> str | None:
        if owner.pid is None:
            grace = _UNREADABLE_GRACE_S
            if self._stale_after_s is not None:
                grace = min(grace, self._stale_after_s)
            return (
                f"its content is unreadable and {owner.age_s:.1f}s old"
                if owner.age_s > grace
                else None
            )
        dead = _owner_dead_reason(owner)
        if dead is not None:
            return dead
        if self._stale_after_s is not None and owner.age_s > self._stale_after_s:
            return f"it is older than stale_after_s={self._stale_after_s:g}s"
        return None

    def _break(self, owner: _LockOwner, reason: str) -> bool:
        """Remove the stale lock ``owner`` describes, unless it changed. True: retry now."""
        breaker = self._path.with_name(self._path.name + ".break")
        breaker_payload = _owner_payload()
        if not _create_owned(breaker, breaker_payload):
            # Someone else is breaking it. Breakers live for milliseconds, so only age marks
            # one abandoned: judging by owner would race with its (unverifiable) removal.
            other = _read_owner(breaker)
            if other is not None and other.age_s > _BREAK_LOCK_STALE_S:
                _LOGGER.warning("Removing abandoned lock-breaker file %s", breaker)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(breaker)
            return False
        try:
            current = _read_owner(self._path)
            if current is None or current.raw != owner.raw:
                return True
            try:
                os.unlink(self._path)
            except FileNotFoundError:  # its owner released it after all
                return True
            _LOGGER.warning(
                "Recovered stale lock %s (previous owner: %s) because %s",
                self._path,
                owner.describe(),
                reason,
            )
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(breaker)
            _HELD_BY_THIS_PROCESS.discard(breaker_payload)
