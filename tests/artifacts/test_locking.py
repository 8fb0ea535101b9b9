"""The lock file: at most one holder across processes and across threads of one process, a
bounded wait, and nothing a dead holder or a leftover file can leave behind to block a run.

Processes here are real child processes; nothing sleeps to synchronise. Where a test needs to
know that a waiter really met the holder's lock, it wraps ``fcntl.flock`` to report the
first refused attempt (an event in this process, a line on stdout in a child).
"""

from __future__ import annotations

import errno
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from image_project.artifacts.locking import FileLock
from image_project.artifacts.manifest import manifest_lock
from image_project.errors import ImageProjectError

# Holds the lock until told to let go (a line on stdin), or until it is killed. Before
# releasing it notes in the journal (argv[2]) that it is done, while it still holds the lock.
HOLDER = r"""
import sys
from image_project.artifacts.locking import FileLock

lock = FileLock(sys.argv[1], timeout_s=0).acquire()
print("locked", flush=True)
sys.stdin.readline()
with open(sys.argv[2], "a") as fh:
    fh.write("holder done\n")
lock.release()
"""

# Waits for the lock; says "contended" at its first attempt refused by the kernel, then, once
# it holds the lock, prints what the journal held at that moment.
WAITER = r"""
import fcntl, sys
from image_project.artifacts.locking import FileLock

real_flock, told = fcntl.flock, []
def flock(fd, op):
    try:
        return real_flock(fd, op)
    except BlockingIOError:
        if not told:
            told.append(1)
            print("contended", flush=True)
        raise
fcntl.flock = flock

with FileLock(sys.argv[1], timeout_s=60):
    with open(sys.argv[2]) as fh:
        print("journal: " + fh.read().replace("\n", "|"), flush=True)
"""

# argv: path, counter file, iterations. Starts when a line arrives on stdin; every iteration
# does a read-modify-write of the counter (lost updates show an overlap) and creates an
# O_EXCL marker for its time inside (a second one inside at once fails to create it).
COUNTER_WORKER = r"""
import os, sys
from image_project.artifacts.locking import FileLock

path, counter, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
for _ in range(n):
    with FileLock(path, timeout_s=60, poll_interval_s=0.001):
        marker = os.open(counter + ".inside", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        with open(counter) as fh:
            value = int(fh.read())
        with open(counter, "w") as fh:
            fh.write(str(value + 1))
        os.close(marker)
        os.unlink(counter + ".inside")
"""


def _spawn(script: str, *args: str | Path | int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline()


def _tell(proc: subprocess.Popen[str], line: str = "go") -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _reap(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def assert_free(path: Path) -> None:
    """The lock at ``path`` can be taken at once (a single attempt)."""
    with FileLock(path, timeout_s=0) as lock:
        assert lock.is_held


def assert_taken(path: Path) -> None:
    """Someone else holds the lock at ``path``: a single attempt is refused."""
    with pytest.raises(ImageProjectError, match="Timed out"):
        FileLock(path, timeout_s=0).acquire()


@pytest.fixture
def contended(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when an ``flock`` attempt in this process is refused because another holds it."""
    fcntl = pytest.importorskip("fcntl")
    event = threading.Event()
    real_flock: Callable[[int, int], None] = fcntl.flock

    def flock(fd: int, op: int) -> None:
        try:
            real_flock(fd, op)
        except BlockingIOError:
            event.set()
            raise

    monkeypatch.setattr(fcntl, "flock", flock)
    return event


def test_lock_file_is_created_and_left_in_place_free(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "x.lock"
    with FileLock(path) as lock:
        assert lock.is_held
        assert path.exists()
        assert_taken(path)
    assert not lock.is_held
    # Unlinking it would let two holders lock two different files under one name.
    assert path.exists() or os.name == "nt"
    assert_free(path)


def test_lock_timeout_error_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "busy.lock"
    with FileLock(path), pytest.raises(ImageProjectError) as info:
        FileLock(path, timeout_s=0.05).acquire()
    message = str(info.value)
    assert str(path) in message
    assert "Timed out after 0.05s" in message
    assert "another run" in message and "Do not delete the lock file" in message
    assert_free(path)


def test_a_process_killed_while_holding_the_lock_frees_it_at_once(tmp_path: Path) -> None:
    path = tmp_path / "killed.lock"
    holder = _spawn(HOLDER, path, tmp_path / "journal")
    try:
        assert _read_line(holder) == "locked\n"
        assert_taken(path)  # it really holds it, across processes
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    finally:
        _reap(holder)
    assert holder.returncode == -signal.SIGKILL
    assert path.exists(), "the killed process left its lock file behind"
    assert_free(path)  # timeout 0: no waiting, no recovery step, no warning


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\xff not a lock \xfe" * 100,
        # What the old PID-file lock wrote, naming this very (live) process and another host.
        json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "created_at": "x"}).encode(),
        json.dumps({"pid": 1, "host": "some-other-host", "created_at": "2020-01-01Z"}).encode(),
    ],
    ids=["empty", "garbage", "old_format_live_pid", "old_format_other_host"],
)
def test_a_leftover_lock_file_with_any_content_never_blocks(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "leftover.lock"
    path.write_bytes(content)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no warning either
        assert_free(path)


def test_two_processes_exclude_each_other(tmp_path: Path) -> None:
    path, journal = tmp_path / "p.lock", tmp_path / "journal"
    journal.write_text("")
    holder = _spawn(HOLDER, path, journal)
    waiter: subprocess.Popen[str] | None = None
    try:
        assert _read_line(holder) == "locked\n"
        assert_taken(path)
        waiter = _spawn(WAITER, path, journal)
        # The waiter met the holder's kernel lock (if it got the lock instead, it would print
        # the journal here, empty).
        assert _read_line(waiter) == "contended\n"
        _tell(holder)  # finish: note it in the journal, then release
        assert _read_line(waiter) == "journal: holder done|\n"
        for proc in (holder, waiter):
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
    finally:
        _reap(holder, *([waiter] if waiter else []))
    assert_free(path)


def test_many_processes_never_hold_the_lock_together(tmp_path: Path) -> None:
    path, counter = tmp_path / "c.lock", tmp_path / "counter"
    counter.write_text("0")
    workers, per_worker = 4, 25
    procs = [_spawn(COUNTER_WORKER, path, counter, per_worker) for _ in range(workers)]
    try:
        for proc in procs:  # every worker has imported everything: start them together
            assert _read_line(proc) == "ready\n"
        for proc in procs:
            _tell(proc)
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err  # a FileExistsError here: two were inside
    finally:
        _reap(*procs)
    assert counter.read_text() == str(workers * per_worker)  # no lost update
    assert_free(path)


@pytest.mark.anyio
async def test_two_runs_in_worker_threads_of_one_process_exclude_each_other(
    tmp_path: Path, contended: threading.Event
) -> None:
    # As the app does: the manifest lock taken inside anyio.to_thread.run_sync.
    manifest = tmp_path / "titles_manifest.csv"
    first = manifest_lock(manifest, timeout_s=0)
    await anyio.to_thread.run_sync(first.acquire)
    # Another lock object of this process, in a worker thread, is refused at once...
    with pytest.raises(ImageProjectError, match="Timed out"):
        await anyio.to_thread.run_sync(manifest_lock(manifest, timeout_s=0).acquire)
    contended.clear()
    journal: list[str] = []

    def second_run() -> None:
        with manifest_lock(manifest, timeout_s=60):
            journal.append("second in")

    # ...and one that waits gets in only once the first has let go.
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, second_run)
        assert await anyio.to_thread.run_sync(contended.wait, 60)
        journal.append("first out")
        await anyio.to_thread.run_sync(first.release)
    assert journal == ["first out", "second in"]
    assert_free(manifest_lock(manifest).path)


def test_many_threads_never_hold_the_lock_together(tmp_path: Path) -> None:
    path, counter = tmp_path / "contended.lock", tmp_path / "counter"
    path.write_bytes(b"left over")
    counter.write_text("0")
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
                    # A read-modify-write through the file system: a lost update shows an
                    # overlap the in-memory count could miss.
                    value = int(counter.read_text())
                    counter.write_text(str(value + 1))
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
    assert counter.read_text() == str(workers * 5)
    assert_free(path)


def test_lock_is_not_reentrant_on_one_object(tmp_path: Path) -> None:
    with FileLock(tmp_path / "r.lock") as lock, pytest.raises(RuntimeError):
        lock.acquire()


def test_a_held_lock_object_refuses_a_second_thread_and_can_be_reused(tmp_path: Path) -> None:
    # filelock's own object, shared across threads, would count a second acquire as nesting.
    path = tmp_path / "shared.lock"
    lock = FileLock(path, timeout_s=0).acquire()
    errors: list[BaseException] = []

    def grab() -> None:
        try:
            lock.acquire()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=grab)
    thread.start()
    thread.join()
    assert [type(e) for e in errors] == [RuntimeError]
    lock.release()
    assert_free(path)
    with lock:
        assert_taken(path)
    assert not lock.is_held


def test_a_lock_object_dropped_while_held_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "dropped.lock"
    FileLock(path, timeout_s=0).acquire()  # no reference kept: its file is closed
    gc.collect()
    assert_free(path)


def test_lock_acquired_in_one_thread_is_released_from_another(tmp_path: Path) -> None:
    path = tmp_path / "handoff.lock"
    lock = FileLock(path, timeout_s=0)
    thread = threading.Thread(target=lock.acquire)
    thread.start()
    thread.join()
    assert lock.is_held
    assert_taken(path)
    lock.release()
    lock.release()  # a no-op once released
    assert not lock.is_held
    assert_free(path)


def test_a_filesystem_without_flock_is_an_error_not_a_soft_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fcntl = pytest.importorskip("fcntl")

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    path = tmp_path / "nfs.lock"
    lock = FileLock(path, timeout_s=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # filelock warns when it falls back to SoftFileLock
        with pytest.raises(ImageProjectError, match="does not support flock") as info:
            lock.acquire()
    assert str(path) in str(info.value)
    assert not lock.is_held


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout_s": -1},
        {"timeout_s": float("nan")},
        {"timeout_s": float("inf")},
        {"poll_interval_s": 0},
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        FileLock(tmp_path / "a.lock", **kwargs)
