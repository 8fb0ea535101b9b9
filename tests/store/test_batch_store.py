"""A batch's runs in flight together share one store writer: on PostgreSQL each
run's seq transaction (claimed under the manifest lock, committed with its rows) is its own,
so one run's claim never rolls back another's; every run is stored once, with the seq its
manifest row and caption have."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from image_project.run.batch import run_batch
from image_project.store import open_store
from image_project.testing import FunctionTextBackend
from tests.faults.common import make_cfg, read_rows
from tests.test_app import answer, backends

pytestmark = pytest.mark.anyio


async def test_runs_in_flight_together_are_each_stored_with_their_own_seq(
    tmp_path: Path, store_url: str
) -> None:
    cfg = make_cfg(tmp_path, "run.runs=6", "run.parallel=3", f"store.url={store_url}")
    code = await run_batch(cfg, backends(FunctionTextBackend(answer)), quiet=True)
    assert code == 0
    manifest = {
        r["generation_id"]: int(r["seq"]) for r in read_rows(cfg.effective_titles_manifest_path)
    }
    with open_store(store_url) as store:
        stored = {row["generation_id"]: int(row["seq"]) for row in store.table_rows("images")}
        runs = [row["generation_id"] for row in store.table_rows("runs")]
    assert sorted(manifest.values()) == list(range(1, 7))
    assert stored == manifest
    assert sorted(runs) == sorted(manifest)


async def test_a_runs_seq_claim_waits_for_the_other_runs_commit_instead_of_undoing_it(
    tmp_path: Path, store_url: str
) -> None:
    # Two runs of one writer claim seq one after the other, the first saving only after the
    # second has claimed (its claim waits for that commit in a thread). The writer used to
    # keep one transaction: the second claim rolled back the first, both got the same seq.
    import threading

    if not store_url.startswith("postgresql"):
        pytest.skip("with SQLite the manifest lock allocates seq, not the store")
    from image_project.run.driver import run_generation
    from image_project.store.writer import StoreWriter

    cfg = make_cfg(tmp_path, "store.enabled=false")
    base = (await run_generation(cfg, backends(FunctionTextBackend(answer)))).record
    writer = StoreWriter(store_url)
    first, problem = writer.claim_seq(1, "run-a")
    assert problem is None
    claimed: list[int] = []
    second = threading.Thread(target=lambda: claimed.append(writer.claim_seq(1, "run-b")[0]))
    second.start()

    def numbered(generation_id: str, seq: int) -> Any:
        assert base.title_generation is not None
        title = base.title_generation.model_copy(update={"seq": seq})
        return base.model_copy(update={"generation_id": generation_id, "title_generation": title})

    assert writer.save(numbered("run-a", first)).written
    second.join(timeout=60)
    assert not second.is_alive()
    (seq_b,) = claimed
    assert writer.save(numbered("run-b", seq_b)).written
    writer.close()
    if store_url.startswith("postgresql"):
        assert (first, seq_b) == (1, 2), "the second claim saw the first run's commit"
    with open_store(store_url) as store:
        assert sorted(int(r["seq"]) for r in store.table_rows("images")) == sorted({first, seq_b})
