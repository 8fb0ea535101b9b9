"""Concurrent runs against a slow service: ``--runs 20`` in one process, and four processes
started together, must give exactly one manifest row (unique, consecutive ``seq``), one
generations row, one transcript and one image per run, with no torn or interleaved line.
A lock held by a process that is then killed does not block the next run: the kernel drops
it with the process, and the lock file it leaves behind means nothing."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from image_project.artifacts.generations import GENERATIONS_FIELDS
from image_project.artifacts.locking import FileLock
from image_project.artifacts.manifest import MANIFEST_FIELDS, manifest_lock
from image_project.errors import ImageProjectError
from image_project.seeding import derive_seed
from tests.faults.common import (
    REPO,
    child_env,
    images,
    read_rows,
    spawn_main,
    transcripts,
    write_config,
)
from tests.support.openai_server import OpenAIServer

LATENCY_S = 0.01  # every call takes a little while, so the runs really overlap
FAST = {"refinement": "none"}  # fewer calls per run; the records phase is what is tested


def assert_records_consistent(tmp: Path, runs: int) -> None:
    manifest_path = tmp / "out" / "images" / "titles_manifest.csv"
    generations_path = tmp / "out" / "generations.csv"
    manifest = read_rows(manifest_path)
    generations = read_rows(generations_path)
    # Every row complete: no missing cell (None) and no extra one (key None) from a torn line.
    for rows, fields in ((manifest, MANIFEST_FIELDS), (generations, GENERATIONS_FIELDS)):
        assert len(rows) == runs
        for row in rows:
            assert list(row) == list(fields) and None not in row.values(), row
    assert sorted(int(r["seq"]) for r in manifest) == list(range(1, runs + 1))
    ids = {r["generation_id"] for r in manifest}
    assert len(ids) == runs
    assert {r["generation_id"] for r in generations} == ids
    ts = transcripts(tmp)
    assert len(ts) == runs and all(t["error"] is None for t in ts)
    assert {t["generation_id"] for t in ts} == ids
    by_id = {r["generation_id"]: r for r in manifest}
    for t in ts:  # the transcript and the manifest agree on seq and title
        row = by_id[t["generation_id"]]
        assert (str(t["title_generation"]["seq"]), t["title_generation"]["title"]) == (
            row["seq"],
            row["title"],
        )
    assert len(images(tmp)) == runs
    titles = [r["title"].lower() for r in manifest]
    assert len(set(titles)) == runs, "titles are disambiguated under the manifest lock"
    for path in (manifest_path, generations_path):
        assert path.read_bytes().endswith(b"\n")
        # Every run let go of the lock (its file stays on disk by design): one attempt takes it.
        with FileLock(path.with_name(path.name + ".lock"), timeout_s=0):
            pass


def test_twenty_runs_in_one_process(tmp_path: Path, allow_loopback: None) -> None:
    with OpenAIServer(offline=True, latency_s=LATENCY_S) as server:
        config = write_config(tmp_path, base_url=server.base_url, prompt=FAST)
        proc = spawn_main(tmp_path, "--config", str(config), "--runs", "20", "--seed", "3", "-q")
        _, err = proc.communicate(timeout=300)
        in_flight = server.max_in_flight
    assert proc.returncode == 0, err
    assert_records_consistent(tmp_path, 20)
    # The runs follow each other, one call at a time (refinement none) except a run's title
    # and image calls, which go together: a second run overlapping would make it 3.
    assert in_flight == 2


GATED_MAIN = """
import runpy, sys
import image_project.cli.command  # imports done before the gate opens
print("ready", flush=True)
sys.stdin.readline()
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_four_processes_started_together(tmp_path: Path, allow_loopback: None) -> None:
    with OpenAIServer(offline=True, latency_s=LATENCY_S) as server:
        config = write_config(tmp_path, base_url=server.base_url, prompt=FAST)
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    GATED_MAIN,
                    str(REPO / "main.py"),
                    "--config",
                    str(config),
                    "--runs",
                    "5",
                    "--seed",
                    str(s),
                    "-q",
                ],
                cwd=tmp_path,
                env=child_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for s in range(4)
        ]
        # Open the gate only when all four are ready, so they really start at one moment.
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = [p.communicate(timeout=300) for p in procs]
        overlapped = server.max_in_flight
    for proc, (_, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
    assert_records_consistent(tmp_path, 20)
    # One run makes one call at a time (refinement none), so two calls in flight at once
    # means two processes were calling together, not one after another.
    assert overlapped >= 2
    # And their records interleave: some process's seqs are not one contiguous block.
    seeds = {s: {s, *(derive_seed(s, "run", k) for k in range(1, 5))} for s in range(4)}
    seqs = {s: [] for s in range(4)}  # type: dict[int, list[int]]
    for row in read_rows(tmp_path / "out" / "images" / "titles_manifest.csv"):
        (owner,) = [s for s, own in seeds.items() if int(row["seed"]) in own]
        seqs[owner].append(int(row["seq"]))
    assert any(max(v) - min(v) + 1 > len(v) for v in seqs.values()), seqs


def test_a_lock_held_by_a_killed_process_does_not_block_the_next_run(
    tmp_path: Path, allow_loopback: None
) -> None:
    manifest = tmp_path / "out" / "images" / "titles_manifest.csv"
    with subprocess.Popen(  # the with closes its pipes
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from image_project.artifacts.manifest import manifest_lock\n"
            # Keep the reference: a lock object that is garbage-collected lets go of its lock.
            f"lock = manifest_lock({str(manifest)!r}).acquire()\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(ImageProjectError, match="Timed out"):  # it really holds the lock
            manifest_lock(manifest, timeout_s=0).acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock = manifest_lock(manifest).path
    assert lock.exists(), "the killed process left its lock file behind"

    with OpenAIServer(offline=True) as server:
        config = write_config(tmp_path, base_url=server.base_url, prompt=FAST)
        proc = spawn_main(tmp_path, "--config", str(config), "--seed", "9")
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert str(lock) not in err  # nothing to recover, so nothing to report
    assert [r["seq"] for r in read_rows(manifest)] == ["1"]
    with manifest_lock(manifest, timeout_s=0):  # free, its file still there
        pass
