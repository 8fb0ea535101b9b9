"""``image-project | head -1``: the reader of standard output goes away. The command stops
quietly, as one killed by SIGPIPE would, with its status 141; the runs already started still
finish and write their records, and no run starts after that.

Each case runs a child whose stdout is a pipe that the test closes after the first line (the
backend line, printed before any run starts), as ``head -1`` does."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.faults.common import child_env, read_rows, transcripts, write_config
from tests.faults.test_interrupt import ENTRY_POINTS, Lines


def head_1(cwd: Path, argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` with its stdout read by a ``head -1``: the first line, then the pipe's
    read end closed. ``(exit code, stderr)``."""
    proc = subprocess.Popen(
        argv, cwd=cwd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    err = Lines(proc.stderr)
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert first.startswith("Using the built-in OFFLINE backend"), first
        proc.stdout.close()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, err.text()


def assert_every_run_complete(tmp: Path, runs: int) -> None:
    records = transcripts(tmp)
    assert len(records) == runs
    assert [t["error"] for t in records] == [None] * runs
    manifest = read_rows(tmp / "out" / "images" / "titles_manifest.csv")
    ids = sorted(t["generation_id"] for t in records)
    assert sorted(r["generation_id"] for r in manifest) == ids
    assert sorted(r["generation_id"] for r in read_rows(tmp / "out" / "generations.csv")) == ids
    assert len(list((tmp / "out" / "images").glob("*.jpg"))) == runs


def test_a_closed_stdout_exits_141_quietly_after_the_runs_in_flight_write_their_records(
    tmp_path: Path,
) -> None:
    # --parallel 3: the three runs start together, before any can end. Before: run 1's
    # summary met the closed pipe, a 50-line BrokenPipeError traceback cancelled runs 2 and
    # 3 (recorded as interrupted) and the command exited 1.
    config = write_config(tmp_path)
    code, err = head_1(
        tmp_path,
        [*ENTRY_POINTS["image-project"], "--config", str(config), "--runs", "3", "--parallel", "3"],
    )
    assert code == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert_every_run_complete(tmp_path, 3)


def test_main_py_piped_into_head_1_exits_141_quietly_with_the_run_recorded(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path)
    code, err = head_1(tmp_path, [*ENTRY_POINTS["main.py"], "--config", str(config)])
    assert code == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert_every_run_complete(tmp_path, 1)


def test_no_run_starts_after_the_output_is_closed(tmp_path: Path) -> None:
    # One run at a time: run 1's summary meets the closed pipe, so run 2 never starts.
    config = write_config(tmp_path)
    code, err = head_1(
        tmp_path,
        [*ENTRY_POINTS["image-project"], "--config", str(config), "--runs", "3", "--parallel", "1"],
    )
    assert code == 141, err
    assert "== run 2 of 3" not in err, err
    assert_every_run_complete(tmp_path, 1)
