"""Interruption: Ctrl-C (SIGINT) or SIGTERM during concurrent model calls cancels them at once,
writes the transcript with ``error.type == "interrupted"`` and the phase, leaves no image and
no CSV row, and exits 130 / 143. A cancellation that arrives while the records are being
written waits for them instead of splitting them."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import anyio
import pytest

from image_project.app import RunResult, run_generation
from image_project.artifacts import manifest_lock
from image_project.backends.base import TextReply, TextRequest
from image_project.backends.offline import OfflineTextBackend
from image_project.testing import FunctionTextBackend
from tests.faults.common import images, make_cfg, read_rows, spawn_main, transcripts, write_config
from tests.support.openai_server import OpenAIServer, Reply
from tests.test_app import backends

IDEAS = 6
SCORING = {"scoring": {"enabled": True, "num_ideas": IDEAS}}


@pytest.mark.parametrize(
    ("signum", "exit_code"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
    ids=["SIGINT", "SIGTERM"],
)
def test_signal_during_concurrent_calls_cancels_them_and_records_the_interruption(
    tmp_path: Path, allow_loopback: None, signum: signal.Signals, exit_code: int
) -> None:
    release = threading.Event()  # never set: the idea calls would hang without cancellation
    with OpenAIServer(offline=True) as server:
        server.rule(lambda r: r.schema_name == "idea_card", *[Reply(wait_for=release)] * IDEAS)
        config = write_config(tmp_path, base_url=server.base_url, prompt=SCORING)
        proc = spawn_main(tmp_path, "--config", str(config), "--seed", "11")
        try:
            assert server.wait_for_in_flight(IDEAS, timeout=60), "the idea calls never arrived"
            arrived = len(server.requests)
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert len(server.requests) == arrived, "no call may start after the interrupt"

    assert proc.returncode == exit_code, err
    assert f"interrupted ({signum.name})" in err
    (t,) = transcripts(tmp_path)
    error = t["error"]
    assert error["type"] == "interrupted"
    assert error["phase"] == "pipeline"
    cut_off = [p for p in error["cancelled_paths"] if "/ideas/" in p]
    assert len(cut_off) == IDEAS, error
    assert t["blackbox_scoring"]["enabled"] is True
    assert t["image_path"] is None and t["final_image_prompt"] is None
    assert images(tmp_path) == []
    assert read_rows(tmp_path / "out" / "generations.csv") == []
    assert read_rows(tmp_path / "out" / "images" / "titles_manifest.csv") == []
    assert not list(tmp_path.rglob("*.tmp")), "no temporary file may be left behind"


def blocking_ideas(all_arrived: anyio.Event) -> FunctionTextBackend:
    """The offline backend's answers, except that idea-card calls never return (they wait
    until cancelled); ``all_arrived`` is set once all of them are in flight."""
    offline = OfflineTextBackend()
    arrived = 0

    async def answer(request: TextRequest) -> TextReply:
        nonlocal arrived
        if request.json_schema is not None and request.json_schema.name == "idea_card":
            arrived += 1
            if arrived == IDEAS:
                all_arrived.set()
            await anyio.sleep_forever()
        return await offline.complete(request)

    return FunctionTextBackend(answer)


@pytest.mark.anyio
async def test_cancelled_run_lists_the_steps_it_cut_off(tmp_path: Path) -> None:
    all_arrived = anyio.Event()
    cfg = make_cfg(tmp_path, "prompt.scoring.enabled=true", f"prompt.scoring.num_ideas={IDEAS}")
    with pytest.raises(anyio.get_cancelled_exc_class()):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_generation, cfg, backends(blocking_ideas(all_arrived)))
            await all_arrived.wait()
            raise anyio.get_cancelled_exc_class()()
    (t,) = transcripts(tmp_path)
    assert t["error"]["type"] == "interrupted" and t["error"]["phase"] == "pipeline"
    ideas = sorted(p for p in t["error"]["cancelled_paths"] if "/ideas/" in p)
    assert len(ideas) == IDEAS
    recorded = {s["path"] for s in t["steps"]}
    assert not recorded & set(ideas), "a cut-off step is not recorded as finished"
    assert images(tmp_path) == [] and read_rows(tmp_path / "out" / "generations.csv") == []


@pytest.mark.anyio
async def test_cancel_during_records_finishes_the_records(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path)
    entered_records = anyio.Event()

    def emit(line: str) -> None:
        if line.startswith("→ records"):
            entered_records.set()

    results: list[RunResult] = []
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            results.append(await run_generation(cfg, backends(OfflineTextBackend()), emit=emit))

    # Hold the manifest lock so that the records phase is certainly still waiting for it
    # when the cancellation arrives.
    lock = manifest_lock(cfg.effective_titles_manifest_path).acquire()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await entered_records.wait()
            scope.cancel()
            await anyio.lowlevel.checkpoint()
            lock.release()
    finally:
        lock.release()

    (result,) = results
    record = result.record
    assert record.title_generation is not None and record.title_generation.seq == 1
    assert [str(p) for p in images(tmp_path)] == [record.image_path]
    (t,) = transcripts(tmp_path)
    assert t["error"] is None
    assert [r["generation_id"] for r in read_rows(tmp_path / "out" / "generations.csv")] == [
        record.generation_id
    ]
    manifest = read_rows(cfg.effective_titles_manifest_path)
    assert [(r["seq"], r["generation_id"]) for r in manifest] == [("1", record.generation_id)]
