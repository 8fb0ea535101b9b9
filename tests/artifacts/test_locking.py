from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from image_project.artifacts.locking import FileLock
from image_project.errors import ImageProjectError

LOGGER_NAME = "image_project.artifacts.locking"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_lock(path: Path, *, pid: int, host: str, age_s: float = 0.0) -> None:
    path.write_text(json.dumps({"pid": pid, "host": host, "created_at": "2020-01-01T00:00:00Z"}))
    if age_s:
        then = time.time() - age_s
        os.utime(path, (then, then))


def test_lock_file_holds_owner_json_and_is_removed_on_exit(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "x.lock"
    with FileLock(path) as lock:
        assert lock.is_held
        info = json.loads(path.read_text())
        assert info["pid"] == os.getpid()
        assert info["host"] == socket.gethostname()
        assert info["created_at"].endswith("Z")
    assert not path.exists()
    assert not lock.is_held


def test_lock_timeout_error_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "busy.lock"
    with FileLock(path), pytest.raises(ImageProjectError) as info:
        FileLock(path, timeout_s=0.05).acquire()
    assert str(path) in str(info.value)
    assert f"pid={os.getpid()}" in str(info.value)
    assert not path.exists()


def test_stale_lock_with_dead_pid_is_recovered_with_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "stale.lock"
    dead = _dead_pid()
    _write_lock(path, pid=dead, host=socket.gethostname())
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    with FileLock(path, timeout_s=5.0):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(path) in warnings[0].getMessage()
    assert f"pid={dead}" in warnings[0].getMessage()
    assert not path.with_name("stale.lock.break").exists()


def test_lock_older_than_stale_after_is_recovered_even_from_another_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "old.lock"
    _write_lock(path, pid=12345, host="some-other-host", age_s=120)
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    with FileLock(path, timeout_s=5.0, stale_after_s=60):
        pass
    assert any("some-other-host" in r.getMessage() for r in caplog.records)


def test_fresh_lock_from_another_host_is_respected(tmp_path: Path) -> None:
    path = tmp_path / "remote.lock"
    _write_lock(path, pid=12345, host="some-other-host")
    with pytest.raises(ImageProjectError, match="some-other-host"):
        FileLock(path, timeout_s=0.05).acquire()
    assert path.exists()


def test_lock_naming_this_process_but_not_held_is_recovered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A container restarting with the same pid finds its previous incarnation's lock.
    path = tmp_path / "mine.lock"
    _write_lock(path, pid=os.getpid(), host=socket.gethostname())
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    with FileLock(path, timeout_s=5.0):
        pass
    assert any(str(path) in r.getMessage() for r in caplog.records)


def test_unreadable_lock_waits_while_fresh_and_is_recovered_when_old(tmp_path: Path) -> None:
    path = tmp_path / "empty.lock"
    path.write_bytes(b"")
    with pytest.raises(ImageProjectError, match="unreadable"):
        FileLock(path, timeout_s=0.05).acquire()
    then = time.time() - 60
    os.utime(path, (then, then))
    with FileLock(path, timeout_s=5.0):
        pass
    assert not path.exists()


def test_abandoned_breaker_file_is_removed_and_the_stale_lock_recovered(tmp_path: Path) -> None:
    path = tmp_path / "b.lock"
    _write_lock(path, pid=_dead_pid(), host=socket.gethostname())
    breaker = tmp_path / "b.lock.break"
    _write_lock(breaker, pid=_dead_pid(), host=socket.gethostname(), age_s=60)
    with FileLock(path, timeout_s=5.0):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not breaker.exists()


def test_release_leaves_a_lock_that_was_taken_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "taken.lock"
    lock = FileLock(path).acquire()
    path.write_text(json.dumps({"pid": 1, "host": "elsewhere", "created_at": "x"}))
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    lock.release()
    assert path.exists()
    assert any("taken over" in r.getMessage() for r in caplog.records)


def test_lock_is_not_reentrant_on_one_object(tmp_path: Path) -> None:
    with FileLock(tmp_path / "r.lock") as lock, pytest.raises(RuntimeError):
        lock.acquire()


def test_many_threads_breaking_one_stale_lock_never_hold_it_together(tmp_path: Path) -> None:
    path = tmp_path / "contended.lock"
    _write_lock(path, pid=_dead_pid(), host=socket.gethostname())
    workers = 8
    barrier = threading.Barrier(workers)
    guard = threading.Lock()
    inside = 0
    overlaps: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        nonlocal inside
        try:
            barrier.wait()
            for _ in range(5):
                with FileLock(path, timeout_s=30.0, poll_interval_s=0.001):
                    with guard:
                        inside += 1
                        overlaps.append(inside)
                    with guard:
                        inside -= 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(overlaps) == workers * 5
    assert max(overlaps) == 1
    assert not path.exists()
