"""The batch scenario of bench/latency.py: N runs of the standard pipeline through
the real client against the simulator, with its realistic latencies and a requests-per-window
rate limit, one after another, ``--parallel 4``, ``--parallel 12`` and ``auto``.

    python bench/latency.py --batch-only          # just this scenario (about 4 minutes)
    python bench/latency.py --batch-only --quick  # 6 runs, 20x shorter latencies and window

Each batch is :func:`image_project.run.batch.run_batch` (what ``image-project --runs N
--parallel K`` runs) in a fresh folder, with the same seed, so every batch makes the same
runs (tests/test_batch.py shows they ask the same). Its bound is
``max(critical path x ceil(N / K), total calls / rate)``: ``critical path`` is the mean over
the batch's runs of each run's own critical path (its calls' simulated latencies costed in
the run's shape, bench/shape.py, plus its local records phase), ``rate`` the limit per
second. ``auto`` is costed with K = the most runs it had in flight. Reported per batch: wall
time, bound, efficiency = bound / wall, the replay (bench/batch_replay.py: the same runs
and latencies under the same limit, sent by an ideal first-come scheduler; the formula above
is not tight when K runs are in flight) and r_effic = replay / wall, speedup over one after another, 429s (all, and
after the first window), CPU per call (the process's CPU time, every thread: the client, the
JPEG encoding, the runs' records) and the process's peak RSS after the batch (a high-water
mark: the batches run in growing order of parallelism, so each one's is its own unless an
earlier one was higher). Two figures say how much the machine's other load weighed:
``queued_s``, the seconds the event loop's thread waited for a CPU while it could run
(``/proc/thread-self/schedstat``), and ``srv_ms``, the mean time the simulator took beyond
each call's simulated latency.
"""

from __future__ import annotations

import io
import math
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from batch_replay import RunDag, ideal_wall
from runs import REPO, RunOutcome, Scenario, critical_path, paths_by_seed

from image_project.backends.factory import make_backends
from image_project.config.loading import load_config
from image_project.engine.recorder import DefaultStepRecorder
from image_project.run.batch import Batch, run_batch
from image_project.run.batch_progress import BatchProgress
from image_project.run.driver import run_generation

if TYPE_CHECKING:
    from simulator import CallRecord, RemoteSimulator

SEED = 2027
STANDARD = Scenario("batch", max_concurrency=64)


@dataclass(frozen=True)
class Setting:
    runs: int
    rate_limit: int  # requests per window
    window_s: float
    parallels: tuple[int | str, ...]

    @property
    def rate(self) -> float:
        return self.rate_limit / self.window_s


def setting(quick: bool) -> Setting:
    """48 requests per 1 s window: a 2,880 RPM limit enforced per second. It binds when all
    24 runs are in flight (about 60 calls a second wanted), not at 12 (about 30)."""
    if quick:
        return Setting(runs=6, rate_limit=48, window_s=0.05, parallels=(1, "auto"))
    return Setting(runs=24, rate_limit=48, window_s=1.0, parallels=(1, 4, 12, "auto"))


@dataclass
class BatchResult:
    parallel: int | str
    wall_s: float
    calls: int
    refused: int
    refused_late: int
    most_in_flight: int
    critical_path_s: float  # mean per run, local records phase included
    bound_s: float
    replay_s: float  # the ideal scheduler's wall on the same runs (bench/batch_replay.py)
    cpu_ms_per_call: float
    peak_rss_mb: float
    exit_code: int
    runqueue_wait_s: float  # the event loop's thread waiting for a CPU (/proc schedstat)
    server_overrun_ms: float  # mean time the simulator took beyond each call's latency

    def row(self, sequential_s: float) -> dict[str, Any]:
        return {
            "parallel": self.parallel,
            "wall_s": self.wall_s,
            "bound_s": self.bound_s,
            "efficiency": self.bound_s / self.wall_s,
            "replay_s": self.replay_s,
            "replay_efficiency": self.replay_s / self.wall_s,
            "speedup": sequential_s / self.wall_s,
            "calls": self.calls,
            "429s": self.refused,
            "429s_after_first_window": self.refused_late,
            "most_in_flight": self.most_in_flight,
            "critical_path_s": self.critical_path_s,
            "cpu_ms_per_call": self.cpu_ms_per_call,
            "peak_rss_mb": self.peak_rss_mb,
            "exit_code": self.exit_code,
            "runqueue_wait_s": self.runqueue_wait_s,
            "server_overrun_ms": self.server_overrun_ms,
        }


def _overrides(tmp: Path, base_url: str, runs: int, parallel: int | str) -> list[str]:
    return [
        "backend.provider=openai",
        f"backend.base_url={base_url}",
        "backend.max_concurrency=64",
        f"image.generation_path={tmp / 'images'}",
        f"image.log_path={tmp / 'logs'}",
        f"prompt.generations_path={tmp / 'generations.csv'}",
        "image.size=1024x1024",
        "store.enabled=false",  # bench/store.py measures the store
        f"prompt.random_seed={SEED}",
        f"run.runs={runs}",
        f"run.parallel={parallel}",
        f"run.parallel_cap={runs}",
    ]


async def shape_groups(base_url: str) -> dict[str, int]:
    """The parallel groups of a standard run (the same for every run: one static tree)."""
    with tempfile.TemporaryDirectory(prefix="batch-") as d:
        cfg = load_config(root=REPO, env={}, overrides=_overrides(Path(d), base_url, 1, 1))
        backends = make_backends(cfg, {})
        recorder = DefaultStepRecorder()
        try:
            await run_generation(cfg, backends, seed=SEED, recorder=recorder)
        finally:
            await backends.aclose()
    return dict(recorder.groups)


def run_outcome(
    transcript: dict[str, Any], records: list[CallRecord], groups: dict[str, int]
) -> RunOutcome:
    """One run with its own calls (chat calls by their API seed, the image call by its
    prompt)."""
    outcome = RunOutcome(0.0, transcript, [], 0.0, groups=groups)
    seeds = paths_by_seed(outcome)
    mine = [
        r
        for r in records
        if r.status == 200
        and (
            (r.kind == "chat" and r.seed in seeds)
            or (
                r.kind == "image"
                and (r.body or {}).get("prompt") == transcript["final_image_prompt"]
            )
        )
    ]
    outcome.records = sorted(mine, key=lambda r: r.started)
    return outcome


def run_critical_path(outcome: RunOutcome) -> float:
    """One run's critical path plus its local records phase."""
    return critical_path(STANDARD, outcome)[0] + outcome.local_s


def run_dag(outcome: RunOutcome) -> RunDag:
    """One run for the ideal scheduler's replay: its shape, each step's call latencies."""
    by_seed = paths_by_seed(outcome)
    latencies: dict[str, list[float]] = {}
    for r in outcome.records:
        path = "image" if r.kind == "image" else by_seed[r.seed]
        latencies.setdefault(path, []).append(r.latency_s)
    return RunDag(outcome.shape, latencies, outcome.local_s)


async def batch_once(
    base_url: str, sim: RemoteSimulator, s: Setting, parallel: int | str, groups: dict[str, int]
) -> BatchResult:
    import json

    with tempfile.TemporaryDirectory(prefix="batch-") as d:
        tmp = Path(d)
        cfg = load_config(root=REPO, env={}, overrides=_overrides(tmp, base_url, s.runs, parallel))
        backends = make_backends(cfg, {})
        sim.reset()
        sim.set_rate_limit(s.rate_limit, s.window_s)
        most = [0]

        def watch(batch: Batch) -> None:
            def sample() -> None:
                most[0] = max(most[0], len(batch.in_state("running")))

            if backends.pacer is not None:
                backends.pacer.watch(sample)

        sink = io.StringIO()
        progress = BatchProgress(s.runs, quiet=True, together=True, out=sink, err=sink, bar=False)
        t0, t0_clock, c0, q0 = time.perf_counter(), time.time(), time.process_time(), _queued()
        code = await run_batch(cfg, backends, quiet=True, progress=progress, started=watch)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        queued = _queued() - q0
        transcripts = [
            json.loads(p.read_text(encoding="utf-8"))
            for p in sorted((tmp / "logs").glob("*_transcript.json"))
        ]
    records = sim.records
    sim.set_rate_limit(0, 1.0)
    served = [r for r in records if r.status == 200]
    refused = [r for r in records if r.status == 429]
    outcomes = [run_outcome(t, served, groups) for t in transcripts]
    crit = statistics.mean(run_critical_path(o) for o in outcomes)
    k = most[0] if parallel == "auto" else int(parallel)
    bound = max(crit * math.ceil(s.runs / max(1, k)), len(served) / s.rate)
    # Run order (the batch starts runs in seq order; transcripts sort by their file name).
    replay = ideal_wall([run_dag(o) for o in outcomes], max(1, k), s.rate_limit, s.window_s)
    return BatchResult(
        parallel=parallel,
        wall_s=wall,
        calls=len(served),
        refused=len(refused),
        refused_late=sum(1 for r in refused if r.started > t0_clock + s.window_s),
        most_in_flight=k,
        critical_path_s=crit,
        bound_s=bound,
        replay_s=replay,
        cpu_ms_per_call=cpu / max(1, len(served)) * 1000,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        exit_code=code,
        runqueue_wait_s=queued,
        server_overrun_ms=statistics.mean(r.finished - r.started - r.latency_s for r in served)
        * 1000,
    )


def _queued() -> float:
    """Seconds this thread (the event loop's) has waited for a CPU while runnable: how much
    other load on the machine held the client back (Linux; 0 elsewhere)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


async def run_batches(base_url: str, sim: RemoteSimulator, quick: bool) -> dict[str, Any]:
    s = setting(quick)
    groups = await shape_groups(base_url)
    results = []
    for parallel in s.parallels:
        print(f"running batch N={s.runs} parallel={parallel} ...", flush=True)
        results.append(await batch_once(base_url, sim, s, parallel, groups))
    sequential = results[0].wall_s
    rows = [r.row(sequential) for r in results]
    shared = None
    if not quick:
        print(f"running 2 machines x {s.runs // 2} runs, auto, one key's limit ...", flush=True)
        shared = await two_machines(base_url, sim, s)
    return {
        "runs": s.runs,
        "rate_limit": f"{s.rate_limit} requests per {s.window_s:g} s window",
        "rate_per_s": s.rate,
        "rows": rows,
        "two_machines": shared,
    }


def batch_table(report: dict[str, Any]) -> str:
    head = (
        f"{'parallel':>8} {'wall_s':>7} {'bound_s':>7} {'effic':>6} {'replay_s':>8} "
        f"{'r_effic':>7} {'speedup':>7} "
        f"{'calls':>5} {'429s':>5} {'late429':>7} {'in_flight':>9} {'crit_s':>6} "
        f"{'cpu_ms/call':>11} {'peak_MB':>7} {'queued_s':>8} {'srv_ms':>6}"
    )
    lines = [
        f"batch N={report['runs']}, rate limit {report['rate_limit']}",
        head,
        "-" * len(head),
    ]
    for r in report["rows"]:
        lines.append(
            f"{r['parallel']!s:>8} {r['wall_s']:>7.2f} {r['bound_s']:>7.2f} "
            f"{r['efficiency']:>6.3f} {r['replay_s']:>8.2f} {r['replay_efficiency']:>7.3f} "
            f"{r['speedup']:>6.2f}x {r['calls']:>5} {r['429s']:>5} "
            f"{r['429s_after_first_window']:>7} {r['most_in_flight']:>9} "
            f"{r['critical_path_s']:>6.2f} {r['cpu_ms_per_call']:>11.2f} {r['peak_rss_mb']:>7.0f} "
            f"{r['runqueue_wait_s']:>8.2f} {r['server_overrun_ms']:>6.1f}"
        )
    shared = report.get("two_machines")
    if shared:
        lines.append(
            f"2 machines x {shared['runs_each']} runs, auto, one key: wall {shared['wall_s']:.2f} s, "
            f"rate bound {shared['rate_bound_s']:.2f} s (efficiency {shared['efficiency']:.3f}), "
            f"{shared['429s']} 429s ({shared['429s_after_first_window']} after the first window)"
        )
    return "\n".join(lines)


async def two_machines(base_url: str, sim: RemoteSimulator, s: Setting) -> dict[str, Any]:
    """Two "machines" (two processes' worth: each its own transport and pacer) sharing one
    API key's limit, each running half the batch with ``auto``, at the same time: what each
    pacing alone does to the shared limit (429s, wall time against the rate bound)."""
    import json

    import anyio

    half = s.runs // 2
    sim.reset()
    sim.set_rate_limit(s.rate_limit, s.window_s)
    walls: list[float] = []
    calls = [0]
    t0_clock = time.time()

    async def machine(index: int) -> None:
        with tempfile.TemporaryDirectory(prefix=f"machine{index}-") as d:
            tmp = Path(d)
            overrides = _overrides(tmp, base_url, half, "auto")
            overrides.append(f"prompt.random_seed={SEED + index}")
            cfg = load_config(root=REPO, env={}, overrides=overrides)
            backends = make_backends(cfg, {})
            sink = io.StringIO()
            progress = BatchProgress(half, quiet=True, together=True, out=sink, err=sink, bar=False)
            t0 = time.perf_counter()
            await run_batch(cfg, backends, quiet=True, progress=progress)
            walls.append(time.perf_counter() - t0)
            for p in (tmp / "logs").glob("*_transcript.json"):
                usage = json.loads(p.read_text(encoding="utf-8"))["usage"]
                calls[0] += usage["model_calls"] + usage["image_calls"]

    async with anyio.create_task_group() as tg:
        tg.start_soon(machine, 1)
        tg.start_soon(machine, 2)
    records = sim.records
    sim.set_rate_limit(0, 1.0)
    refused = [r for r in records if r.status == 429]
    served = sum(1 for r in records if r.status == 200)
    wall = max(walls)
    return {
        "machines": 2,
        "runs_each": half,
        "wall_s": wall,
        "rate_bound_s": served / s.rate,
        "efficiency": served / s.rate / wall,
        "calls": served,
        "429s": len(refused),
        "429s_after_first_window": sum(1 for r in refused if r.started > t0_clock + s.window_s),
    }
