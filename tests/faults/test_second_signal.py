"""A second Ctrl-C quits at once, whatever is in flight: exit 130, one line, no traceback.

The first SIGINT stops the batch (its runs write their interrupted transcripts); a second one,
at any moment after it, ends the process there and then (``image_project.run.interrupts``).
Each case runs the console script as a child process and signals it once a progress line
shows the runs are under way. The 50 ms between the two signals is the scenario (a double
press), not a synchronisation: every assertion holds whether the second signal lands while
the runs are stopping or after the process has ended. The one case that must see the second
signal land holds the manifest lock, so the child cannot end before it. A hang fails the test
at the timeout of :func:`finish`.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from image_project.artifacts.manifest import manifest_lock
from image_project.run.interrupts import quit_now_line
from tests.faults.common import child_env, read_rows, write_config
from tests.faults.test_interrupt import ENTRY_POINTS, Lines, finish

QUIT_LINE = quit_now_line(signal.SIGINT)
TRIALS = 20


def spawn(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*ENTRY_POINTS["image-project"], *args],
        cwd=cwd,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def double_ctrl_c(cwd: Path, ready: str, *args: str) -> tuple[int, str, str]:
    """Start ``image-project ARGS`` in ``cwd``; once a stderr line starts with ``ready``,
    press Ctrl-C twice, 50 ms apart. ``(exit code, stdout, stderr)``."""
    proc = spawn(cwd, *args)
    err = Lines(proc.stderr)
    try:
        err.wait_for(lambda line: line.startswith(ready))
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)  # the double press being tested, not a wait for anything
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    finally:
        code, out, text = finish(proc, err)
    return code, out, text


def assert_quit_cleanly(code: int, out: str, err: str) -> bool:
    """Exit 130, no traceback, and at most the one line of the second signal, which is then
    the last thing printed. Whether the second signal landed before the process ended."""
    assert code == 130, err
    for text in (out, err):
        assert "Traceback" not in text, text
        assert "KeyboardInterrupt" not in text, text
        assert "Task exception was never retrieved" not in text, text
    assert err.count(QUIT_LINE) <= 1, err
    landed = QUIT_LINE in err
    if landed:
        assert err.rstrip("\n").splitlines()[-1] == QUIT_LINE, err
    else:
        assert "interrupted (SIGINT)" in err, err
    return landed


def test_two_ctrl_cs_50_ms_apart_quit_a_parallel_batch_at_once_every_time(
    tmp_path: Path,
) -> None:
    # Before: 6 of 6 hung for good (the main thread waited at exit for idle worker threads).
    landed = 0
    for trial in range(TRIALS):
        cwd = tmp_path / f"trial_{trial:02d}"
        cwd.mkdir()
        code, out, err = double_ctrl_c(
            cwd, "[run 3/6] started", "--offline", "--runs", "6", "--parallel", "3"
        )
        landed += assert_quit_cleanly(code, out, err)
    print(f"the second SIGINT landed before the exit in {landed} of {TRIALS} trials")


def test_two_ctrl_cs_quit_a_single_run_at_once(tmp_path: Path) -> None:
    # Before: `Task exception was never retrieved ... raise KeyboardInterrupt` (4 of 4).
    for trial in range(5):
        cwd = tmp_path / f"trial_{trial}"
        cwd.mkdir()
        code, out, err = double_ctrl_c(cwd, "→ prompt pipeline", "--offline")
        assert_quit_cleanly(code, out, err)


def test_a_second_ctrl_c_quits_while_a_worker_thread_waits_for_the_manifest_lock(
    tmp_path: Path,
) -> None:
    # The run's records phase waits in a worker thread for the lock this test holds, so the
    # child cannot end before both signals have landed; the second must end it at once.
    config = write_config(tmp_path)
    manifest = tmp_path / "out" / "images" / "titles_manifest.csv"
    manifest.parent.mkdir(parents=True)
    lock = manifest_lock(manifest).acquire()
    try:
        proc = spawn(tmp_path, "--config", str(config), "--seed", "11")
        err = Lines(proc.stderr)
        try:
            err.wait_for(lambda line: line.startswith("→ records"))
            proc.send_signal(signal.SIGINT)
            err.wait_for(lambda line: line.startswith("SIGINT: cancelling"))
            proc.send_signal(signal.SIGINT)
        finally:
            code, out, text = finish(proc, err)
    finally:
        lock.release()
    assert assert_quit_cleanly(code, out, text), "the second SIGINT must have landed"
    # Killed before its first write: nothing of the run is on disk but its log.
    assert read_rows(manifest) == [] and not list((tmp_path / "out" / "images").glob("*.jpg"))
