"""Four real processes, three runs each, writing into one store at the same time.

PostgreSQL: four "machines" (each its own output folder and titles manifest) share one
store, which allocates ``seq`` inside each run's store transaction: twelve runs, ``seq``
1..12, no number twice. SQLite: four processes on one machine share the output folder;
the manifest's file lock allocates ``seq``, and the store takes the twelve runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from image_project.store import open_store
from tests.faults.common import REPO, child_env, read_rows, write_config

PROCESSES, RUNS = 4, 3


def _start(config: Path, seed: int, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(REPO / "main.py"), "--config", str(config), "--runs", str(RUNS),
         "--seed", str(seed), "-q"],
        cwd=cwd,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"], indirect=True)
def test_four_processes_three_runs_each_into_one_store(
    tmp_path: Path, store_url: str, engine: str
) -> None:
    shared = engine == "sqlite"  # one machine (shared outputs) or four (one folder each)
    machines = [tmp_path / ("shared" if shared else f"machine{i}") for i in range(PROCESSES)]
    for machine in machines:
        machine.mkdir(exist_ok=True)
    configs = [write_config(m, store={"url": store_url}, image={"size": "64x64"}) for m in machines]
    procs = [_start(c, 100 + i, c.parent) for i, c in enumerate(configs)]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        outputs.append((proc.returncode, out, err))
    for code, out, err in outputs:
        assert code == 0, f"{out}\n{err}"
        assert "NOT WRITTEN" not in out and "NOT written" not in err

    with open_store(store_url) as store:
        records = store.records()
        images = store.table_rows("images")
    assert len(records) == PROCESSES * RUNS
    assert all(r.error is None for r in records)
    assert sorted(row["seq"] for row in images) == list(range(1, PROCESSES * RUNS + 1))
    manifests = {m / "out" / "images" / "titles_manifest.csv" for m in machines}
    manifest_seqs = sorted(int(row["seq"]) for path in manifests for row in read_rows(path))
    assert manifest_seqs == list(range(1, PROCESSES * RUNS + 1))
    # Each run's caption number is the one the store holds for it.
    by_id = {row["generation_id"]: row["seq"] for row in images}
    for path in manifests:
        for row in read_rows(path):
            assert by_id[row["generation_id"]] == int(row["seq"])
