"""Batches (image_project.run.batch): runs in flight together ask exactly what runs
one after another ask; Ctrl-C starts no new run and leaves every run whole or recorded as
interrupted; a failure every run would hit stops the batch once. In-process, fake backends
that interleave the runs' calls with checkpoints (never a sleep); the interrupt is triggered
from the backend at a known call count, through the same Batch.stop a signal calls."""

from __future__ import annotations

import signal
import zlib
from pathlib import Path
from typing import Any

import anyio
import pytest

from image_project.backends.base import TextReply, TextRequest
from image_project.backends.offline.text import OfflineTextBackend
from image_project.cli.command import main
from image_project.errors import AuthenticationError, ConfigError
from image_project.run.batch import Batch, fatal_cause, run_batch
from image_project.testing import FunctionTextBackend
from tests.faults.common import images, make_cfg, read_rows, transcripts
from tests.support.transcripts import RUN_VOLATILE, without_keys
from tests.test_app import backends

pytestmark = pytest.mark.anyio

RUNS = 8


def _normal(value: Any) -> Any:
    return without_keys(value, RUN_VOLATILE)


class Interleaving:
    """The offline backend's answers, each after a number of checkpoints that depends on the
    request (so concurrent calls finish in an order unlike their start order); counts the
    calls and the most runs that were in flight at once."""

    def __init__(self) -> None:
        self.offline = OfflineTextBackend()
        self.requests: list[str] = []
        self.batch: Batch | None = None
        self.most_in_flight = 0
        self.on_call: Any = None

    def attach(self, batch: Batch) -> None:
        self.batch = batch

    async def answer(self, request: TextRequest) -> TextReply:
        self.requests.append(repr(request))
        if self.on_call is not None:
            self.on_call(len(self.requests))
        if self.batch is not None:
            running = len(self.batch.in_state("running"))
            self.most_in_flight = max(self.most_in_flight, running)
        for _ in range(zlib.crc32(repr(request).encode()) % 7):
            await anyio.lowlevel.checkpoint()
        return await self.offline.complete(request)


async def _batch(tmp: Path, *extra: str, fake: Interleaving | None = None) -> tuple[int, Any]:
    fake = fake or Interleaving()
    cfg = make_cfg(tmp, *extra)
    code = await run_batch(
        cfg, backends(FunctionTextBackend(fake.answer)), quiet=True, started=fake.attach
    )
    return code, fake


async def test_parallel_8_asks_and_picks_exactly_what_one_after_another_does(
    tmp_path: Path,
) -> None:
    one_code, one = await _batch(tmp_path / "p1", f"run.runs={RUNS}", "run.parallel=1")
    eight_code, eight = await _batch(tmp_path / "p8", f"run.runs={RUNS}", "run.parallel=8")
    assert one_code == eight_code == 0
    assert one.most_in_flight == 1 and eight.most_in_flight > 1, "the runs did overlap"
    assert sorted(one.requests) == sorted(eight.requests), "the same request bodies"
    assert one.requests != eight.requests, "in another order"

    def by_seed(folder: Path) -> dict[int, dict[str, Any]]:
        return {t["seed"]: _normal(t) for t in transcripts(folder)}

    sequential, together = by_seed(tmp_path / "p1"), by_seed(tmp_path / "p8")
    assert len(sequential) == RUNS and sequential.keys() == together.keys()
    for seed, record in sequential.items():
        assert together[seed] == record, f"run with seed {seed} differs"
    seqs = sorted(int(r["seq"]) for r in read_rows(tmp_path / "p8/out/images/titles_manifest.csv"))
    assert seqs == list(range(1, RUNS + 1))


async def test_ctrl_c_in_a_batch_starts_no_run_and_leaves_every_run_whole_or_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = Interleaving()
    started_at_stop: set[int] = set()

    def interrupt_at(calls: int) -> None:
        if calls == 60:  # runs 1-3 have made their text calls, the next ones are going
            assert fake.batch is not None
            started_at_stop.update(s.number for s in fake.batch.slots if s.state != "waiting")
            fake.batch.stop(signal.SIGINT)

    fake.on_call = interrupt_at
    code, _ = await _batch(tmp_path, "run.runs=10", "run.parallel=3", fake=fake)
    assert code == 130
    assert fake.batch is not None
    slots = {s.number: s.state for s in fake.batch.slots}
    started_after = {n for n, state in slots.items() if state != "waiting"} - started_at_stop
    assert not started_after, f"runs {started_after} started after the interrupt"

    runs = {t["generation_id"]: t for t in transcripts(tmp_path)}
    assert len(runs) == len(started_at_stop), "a transcript for every run that started"
    manifest = {r["generation_id"] for r in read_rows(tmp_path / "out/images/titles_manifest.csv")}
    generations = {r["generation_id"] for r in read_rows(tmp_path / "out/generations.csv")}
    pictures = {p.name.removesuffix("_image.jpg") for p in images(tmp_path)}
    complete = {g for g, t in runs.items() if t["error"] is None}
    interrupted = {g for g, t in runs.items() if t["error"] is not None}
    assert all(runs[g]["error"]["type"] == "interrupted" for g in interrupted)
    assert manifest == generations == pictures == complete, "whole, or nothing written"
    assert interrupted, "the interrupt cut runs in flight"
    never = 10 - len(started_at_stop)
    assert never > 0
    closing = capsys.readouterr().err.strip().splitlines()[-1]
    assert closing == (
        f"interrupted (SIGINT): {len(complete)} completed, {len(interrupted)} interrupted, "
        f"{never} never started"
    )


async def test_a_failure_every_run_would_hit_stops_the_batch_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def refused(request: TextRequest) -> TextReply:
        await anyio.lowlevel.checkpoint()
        raise AuthenticationError("the key was refused (HTTP 401)", status=401)

    cfg = make_cfg(tmp_path, "run.runs=6", "run.parallel=2")
    code = await run_batch(cfg, backends(FunctionTextBackend(refused)), quiet=True)
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("stopping the batch: run 1 failed with AuthenticationError") == 1, err
    assert len(transcripts(tmp_path)) == 2, "only the two runs in flight ran"
    assert err.count("error: run failed") == 2


async def test_an_ordinary_failure_does_not_stop_the_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    offline = OfflineTextBackend()
    failed_once: list[str] = []

    async def flaky(request: TextRequest) -> TextReply:
        if not failed_once:
            failed_once.append("x")
            raise ValueError("a bug in one call")
        return await offline.complete(request)

    cfg = make_cfg(tmp_path, "run.runs=4", "run.parallel=2")
    code = await run_batch(cfg, backends(FunctionTextBackend(flaky)), quiet=True)
    captured = capsys.readouterr()
    assert code == 1
    assert "stopping the batch" not in captured.err
    assert len(transcripts(tmp_path)) == 4
    assert captured.out.strip().splitlines()[-1] == (
        "3 of 4 succeeded (run 1 failed; its error is above)"
    )


def test_fatal_cause_names_errors_every_run_would_hit() -> None:
    from image_project.errors import QuotaExceededError, RequestRejectedError, ServerError

    def chained(exc: BaseException) -> RuntimeError:
        outer = RuntimeError("run failed")
        outer.__cause__ = exc
        return outer

    assert fatal_cause(chained(QuotaExceededError("no credit", status=429))) is not None
    assert fatal_cause(chained(RequestRejectedError("no such model", status=404))) is not None
    assert fatal_cause(chained(RequestRejectedError("bad temperature", status=400))) is None
    assert fatal_cause(chained(ServerError("502", status=502))) is None


@pytest.mark.parametrize(
    ("value", "ok"),
    [("auto", True), ("1", True), ("12", True), ("0", False), ('"4"', False), ("x", False)],
)
def test_run_parallel_is_auto_or_a_whole_number(tmp_path: Path, value: str, ok: bool) -> None:
    if ok:
        assert make_cfg(tmp_path, f"run.parallel={value}").run.parallel in (
            "auto",
            int(value if value != "auto" else 0),
        )
    else:
        with pytest.raises(ConfigError, match=r"run\.parallel"):
            make_cfg(tmp_path, f"run.parallel={value}")


def test_parallel_option_refuses_anything_but_auto_or_a_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--parallel", "many"])
    assert exit_info.value.code == 2
    assert "--parallel: got 'many', must be auto or an int >= 1" in capsys.readouterr().err


async def test_auto_adds_runs_while_the_pacer_has_budget(tmp_path: Path) -> None:
    from dataclasses import replace

    from image_project.backends.pacing import CallPacing, Pacer
    from image_project.run.batch_progress import BatchProgress
    from image_project.run.state import load_inputs

    release = anyio.Event()

    async def held_until_released(_seconds: float) -> None:
        await release.wait()

    pacer = Pacer(anyio.CapacityLimiter(8), sleep=held_until_released, clock=lambda: 0.0)
    cfg = make_cfg(tmp_path, "run.runs=10", "run.parallel=auto", "run.parallel_cap=4")
    quiet = BatchProgress(10, quiet=True, together=True, bar=False)
    batch = Batch(
        cfg,
        replace(backends(OfflineTextBackend()), pacer=pacer),
        inputs=load_inputs(cfg),
        store=None,
        progress=quiet,
    )
    assert batch._room(), "the first run always starts"
    batch.slots[0].state = "running"
    assert not batch._room(), "the budget is unknown before the first answer"

    async def one_call() -> None:
        async with pacer.slot(CallPacing()) as slot:
            slot.answered(
                {
                    "x-ratelimit-limit-requests": "10",
                    "x-ratelimit-remaining-requests": "5",
                    "x-ratelimit-reset-requests": "1s",
                },
                "ok",
            )

    await one_call()  # budget 5 of 10 in this window
    assert batch._room()
    for slot in batch.slots[1:4]:
        slot.state = "running"
    assert not batch._room(), "never more than run.parallel_cap"
    batch.slots[3].state = "ok"
    assert batch._room()
    while pacer.budget:  # spend the rest of the window
        await one_call()
    async with anyio.create_task_group() as tg:
        tg.start_soon(one_call)  # held: the window is spent
        await anyio.wait_all_tasks_blocked()
        assert pacer.held == 1
        assert not batch._room(), "no run is added while calls wait for the window"
        release.set()
    assert pacer.held == 0
    assert batch._room()
