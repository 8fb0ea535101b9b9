"""docs/batches.md's promises that tests/test_batch.py does not keep: at most ``--parallel``
runs in flight, ``seq`` in completion order while summaries print in run order (and the
lines a batch shows), each run's log file holding only its own records, the inputs read
once, runs of one batch not seeing each other's titles (a shared one told apart by a
numeral), and one ``backend.max_concurrency`` limiter for every call of the batch."""

from __future__ import annotations

import io
import re
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from image_project.backends.base import TextRequest
from image_project.backends.offline.text import OfflineTextBackend
from image_project.backends.pacing import CallPacing, Pacer
from image_project.cli import command as cli
from image_project.config.models import AppConfig
from image_project.errors import AuthenticationError
from image_project.run import batch, driver
from image_project.run.batch import Batch, run_batch
from image_project.run.batch_progress import BatchProgress
from image_project.run.state import Inputs, load_inputs
from image_project.seeding import run_seed
from image_project.testing import FunctionTextBackend, last_user_text
from tests.faults.common import make_cfg, read_rows, transcripts, write_config
from tests.support.openai_server import OpenAIServer
from tests.test_app import answer, backends, system_text
from tests.test_batch import Interleaving

pytestmark = pytest.mark.anyio


async def test_parallel_k_keeps_at_most_k_runs_in_flight(tmp_path: Path) -> None:
    fake = Interleaving()
    cfg = make_cfg(tmp_path, "run.runs=8", "run.parallel=3")
    code = await run_batch(
        cfg, backends(FunctionTextBackend(fake.answer)), quiet=True, started=fake.attach
    )
    assert code == 0 and len(transcripts(tmp_path)) == 8
    assert fake.most_in_flight == 3


async def test_seq_follows_completion_while_summaries_print_in_run_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = Interleaving()
    cfg = make_cfg(tmp_path, "run.runs=4", "run.parallel=4")
    code = await run_batch(
        cfg, backends(FunctionTextBackend(fake.answer)), quiet=False, started=fake.attach
    )
    out, err = capsys.readouterr()
    assert code == 0
    seeds = [run_seed(77, i) for i in range(4)]
    for n, seed in enumerate(seeds, start=1):
        assert f"[run {n}/4] started (seed {seed})" in err.splitlines()
    done = re.findall(r"^\[run (\d)/4\] done: #(\d{3}) .+ \(\d+\.\d s\)$", err, re.M)
    assert [int(seq) for _, seq in done] == [1, 2, 3, 4], "seq in completion order"
    finished = [int(n) for n, _ in done]
    assert finished != [1, 2, 3, 4], "the runs finished out of order (else nothing is shown)"
    overall = re.findall(r"^(\d)/4 done, 0 failed", err, re.M)
    assert overall == ["1", "2", "3", "4"]
    printed = [int(s) for s in re.findall(r"^Generation \S+ +\(seed (\d+),", out, re.M)]
    assert printed == seeds, "summaries in run order"
    seq_of_run = {n: int(seq) for n, seq in (map(int, pair) for pair in done)}
    titles = re.findall(r"^  Title +#(\d{3}) ", out, re.M)
    assert [int(t) for t in titles] == [seq_of_run[n] for n in (1, 2, 3, 4)]


async def test_quiet_keeps_only_the_summaries_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = make_cfg(tmp_path, "run.runs=2", "run.parallel=2")
    assert await run_batch(cfg, backends(FunctionTextBackend(answer)), quiet=True) == 0
    out, err = capsys.readouterr()
    assert "[run " not in err and "done" not in err
    assert len(re.findall(r"^Generation ", out, re.M)) == 2


async def test_each_runs_log_file_holds_only_its_own_records(tmp_path: Path) -> None:
    fake = Interleaving()
    cfg = make_cfg(tmp_path, "run.runs=3", "run.parallel=3")
    code = await run_batch(
        cfg, backends(FunctionTextBackend(fake.answer)), quiet=True, started=fake.attach
    )
    assert code == 0 and fake.most_in_flight == 3
    ids = [t["generation_id"] for t in transcripts(tmp_path)]
    assert len(ids) == 3
    for gid in ids:
        (log,) = (tmp_path / "out" / "logs").glob(f"{gid}*.log")
        text = log.read_text(encoding="utf-8")
        assert gid in text
        assert [other for other in ids if other != gid and other in text] == []


async def test_the_inputs_are_read_once_for_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[AppConfig] = []

    def counted(cfg: AppConfig) -> Inputs:
        reads.append(cfg)
        return load_inputs(cfg)

    monkeypatch.setattr(batch, "load_inputs", counted)
    monkeypatch.setattr(driver, "load_inputs", counted)
    cfg = make_cfg(tmp_path, "run.runs=3", "run.parallel=2")
    assert await run_batch(cfg, backends(FunctionTextBackend(answer)), quiet=True) == 0
    assert len(transcripts(tmp_path)) == 3 and len(reads) == 1


async def test_runs_of_a_batch_do_not_see_each_others_titles(tmp_path: Path) -> None:
    """One after another (parallel 1): run 2's title prompt does not list run 1's title; the
    same answer is told apart with a numeral when the second run writes its records."""
    title_prompts: list[str] = []

    def text(request: TextRequest) -> str:
        if "title" in system_text(request).lower():
            title_prompts.append(last_user_text(request))
        return answer(request)

    cfg = make_cfg(tmp_path, "run.runs=3", "run.parallel=1")
    assert await run_batch(cfg, backends(FunctionTextBackend(text)), quiet=True) == 0
    assert len(title_prompts) == 3 and len(set(title_prompts)) == 3  # other prompts
    assert not any("Quiet Harbor Light" in prompt for prompt in title_prompts)
    rows = read_rows(tmp_path / "out" / "images" / "titles_manifest.csv")
    assert [r["title"] for r in rows] == [
        "Quiet Harbor Light",
        "Quiet Harbor Light II",
        "Quiet Harbor Light III",
    ]


def test_one_limiter_bounds_every_call_of_the_batch(
    tmp_path: Path, allow_loopback: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAIServer(offline=True, latency_s=0.01) as server:
        config = write_config(tmp_path, base_url=server.base_url, prompt={"refinement": "none"})
        args = ["--config", str(config), "--runs", "4", "--parallel", "4", "-q"]
        code = cli.main([*args, "--set", "backend.max_concurrency=2"], env={"OPENAI_API_KEY": "x"})
        in_flight = server.max_in_flight
    assert code == 0, capsys.readouterr().err
    assert len(transcripts(tmp_path)) == 4
    assert in_flight == 2


@pytest.mark.parametrize("verbose", [0, 1])
async def test_verbose_adds_each_runs_step_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verbose: int
) -> None:
    cfg = make_cfg(tmp_path, "run.runs=2", "run.parallel=2")
    code = await run_batch(cfg, backends(FunctionTextBackend(answer)), verbose=verbose)
    err = capsys.readouterr().err
    assert code == 0
    steps = re.findall(r"^\[run (\d)/2\] \[ *\d+\.\ds\] ✓ pipeline/", err, re.M)
    phases = re.findall(r"^\[run (\d)/2\] → prompt pipeline", err, re.M)
    assert sorted(phases) == ["1", "2"]
    assert sorted(set(steps)) == (["1", "2"] if verbose else [])


async def test_a_batch_stopped_by_a_failure_every_run_would_hit_counts_the_runs_not_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def refused(request: TextRequest) -> str:
        raise AuthenticationError("the key was refused (HTTP 401)", status=401)

    cfg = make_cfg(tmp_path, "run.runs=6", "run.parallel=2")
    assert await run_batch(cfg, backends(FunctionTextBackend(refused)), quiet=True) == 1
    closing = capsys.readouterr().out.strip().splitlines()[-1]
    assert closing == "0 of 6 succeeded (runs 1, 2 failed; their errors are above); 4 not started"


def _auto_batch(tmp_path: Path, pacer: Pacer | None, runs: int = 6) -> Batch:
    cfg = make_cfg(tmp_path, f"run.runs={runs}", "run.parallel=auto", "run.parallel_cap=4")
    return Batch(
        cfg,
        replace(backends(OfflineTextBackend()), pacer=pacer),
        inputs=load_inputs(cfg),
        store=None,
        progress=BatchProgress(runs, quiet=True, together=True, bar=False),
    )


async def _answer(pacer: Pacer, headers: dict[str, str]) -> None:
    async with pacer.slot(CallPacing()) as slot:
        slot.answered(headers, "ok")


WINDOW = {
    "x-ratelimit-limit-requests": "100",
    "x-ratelimit-remaining-requests": "90",
    "x-ratelimit-reset-requests": "1s",
}


async def test_auto_adds_no_run_while_a_call_waits_for_a_slot(tmp_path: Path) -> None:
    limiter = anyio.CapacityLimiter(1)
    pacer = Pacer(limiter, clock=lambda: 0.0)
    batch = _auto_batch(tmp_path, pacer)
    batch.slots[0].state = "running"
    await _answer(pacer, WINDOW)
    assert batch._room(), "budget known, nothing waiting"
    await limiter.acquire()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_answer, pacer, WINDOW)  # waits for the one slot
        await anyio.wait_all_tasks_blocked()
        assert limiter.statistics().tasks_waiting == 1
        assert not batch._room(), "no run is added while a call waits for a slot"
        limiter.release()
    assert batch._room()


async def test_auto_adds_no_run_while_the_token_window_is_spent(tmp_path: Path) -> None:
    pacer = Pacer(anyio.CapacityLimiter(8), clock=lambda: 0.0)
    batch = _auto_batch(tmp_path, pacer)
    batch.slots[0].state = "running"
    await _answer(pacer, WINDOW)
    assert batch._room()
    spent = {**WINDOW, "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "5s"}
    await _answer(pacer, spent)
    assert pacer.paused_until is not None
    assert not batch._room(), "a spent token window is a pause"


async def test_auto_on_the_offline_backend_is_the_cap(tmp_path: Path) -> None:
    fake = Interleaving()
    cfg = make_cfg(tmp_path, "run.runs=6", "run.parallel=auto", "run.parallel_cap=3")
    code = await run_batch(
        cfg, backends(FunctionTextBackend(fake.answer)), quiet=True, started=fake.attach
    )
    assert code == 0 and fake.most_in_flight == 3


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False])
def test_the_overall_line_is_a_bar_exactly_when_stderr_is_a_terminal(terminal: bool) -> None:
    err = _Terminal() if terminal else io.StringIO()
    progress = BatchProgress(3, quiet=False, together=True, out=io.StringIO(), err=err)
    progress.line("[run 1/3] started (seed 1)")
    progress.run_ended(1, "done: #001 A Title (0.1 s)", "ok")
    progress.close()
    text = err.getvalue()
    assert "[run 1/3] started (seed 1)\n" in text and "[run 1/3] done: #001" in text
    overall = [ln for ln in text.splitlines() if ln.startswith("1/3 done, 0 failed")]
    assert bool(overall) is not terminal
    assert ("1/3" in text and "run/s" in text) is terminal  # tqdm's bar: n/total and rate
