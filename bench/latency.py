"""How much faster is the concurrent pipeline than the sequential one, and how close to the
physical limit? Measured through the real ``openai.AsyncOpenAI`` client and real HTTP.

    python bench/latency.py                      # every scenario, 3 repeats (about 10 minutes)
    python bench/latency.py --quick              # a small subset with 20x shorter latencies
    python bench/latency.py --json out.json --timeline timeline.png
    python bench/latency.py --base-url URL --model M   # the scoring scenario on a real server
    python bench/latency.py --batch-only          # only the batch scenario (bench/batch.py)

Each run is the real :func:`image_project.run.driver.run_generation` against a local
OpenAI-compatible latency simulator (``bench/simulator.py``, served by uvicorn in its own
process on 127.0.0.1, as a real API runs elsewhere), once in the engine's ``sequential`` mode
and once ``concurrent``, with the same seed; each request's latency is drawn from a
distribution seeded by the request body, so both modes pay exactly the same latencies. The
N x J sweep seeds it by the call instead (model and API seed), so that the steps after the
scoring stage cost the same whichever card each N leads to. Every run writes into a fresh temporary
directory, so no run sees another's history.

Per scenario:

* ``sequential_s`` / ``concurrent_s``: wall time of ``run_generation`` (median, min, max);
* ``speedup`` = sequential / concurrent (medians); ``ideal`` = (sum of all simulated
  latencies) / critical path, the best any scheduler could do;
* ``critical_path_s``: the lower bound from the simulated latencies of the calls and the
  shape of what the run ran (``bench/shape.py``: the transcript's step paths and the
  parallel groups the engine announced, the same for the standard pipeline's tree and the
  scoring flow's steps run from code): a sequential block sums its children, a parallel
  group takes its slowest child, or its total work / ``max_concurrency`` when the limiter
  is tighter; plus the slower of the image and title calls (they go together);
* ``local_s``: the run's local phase (``records``: captioning, encoding and writing the JPEG
  and the rows; median of the concurrent runs), which no call overlaps; ``bound_s`` =
  critical_path_s + local_s, and ``efficiency`` = bound_s / concurrent_s;
* the **floor** (``bench/floor.py``): after every concurrent run, its requests are replayed
  in the same call structure (that run's shape) against the same simulator through a bare
  ``openai.AsyncOpenAI`` (``sdk``) and through raw ``httpx`` (``httpx``), interleaved with
  the project's runs.
  ``floor_efficiency`` = bound_s / (sdk replay wall + local_s): what the bare SDK reaches on
  the same requests; ``efficiency_vs_floor`` = (sdk wall + local_s) / concurrent_s;
* ``cpu_ms_per_call``: the event-loop thread's CPU time per call (``time.thread_time``; work
  on worker threads such as the JPEG is not in it) of the project's concurrent run, of the
  bare SDK and of raw httpx, medians; ``cpu_ratio`` = project / bare SDK (of the medians),
  ``cpu_ratio_repeats`` the same ratio of each repeat's run and its own replay;
  ``gc_ms_per_call``: of which in garbage collections. Every client is warmed (one untimed
  run and replay) before the first timed one; the process's start-up objects are frozen (as
  the command line does, :mod:`image_project.cli.launch`) and every timed segment starts from a
  settled collector (``bench/cpu.py``), so that no client pays a full collection for the
  garbage of the bench's earlier work;
* ``along_conversation``: the client CPU per chat call against the number of messages it
  sends (the sequential per-stage pipeline, each step's CPU against the bare SDK sending the
  same body alone, and the slope of each);
* ``calls`` (model calls per run) and ``same_selection`` (every run of both modes chose the
  same card and wrote the same final prompt).

Targets (reported, never asserted): efficiency >= 0.97 in every scenario and speedup >= 90%
of ideal; efficiency within 0.03 of floor_efficiency; concurrent time grows <= 15% from N=2
to N=24 ideas; engine overhead < 0.5 ms/step. ``cpu_ratio`` and ``along_conversation`` are
reported, not targeted. Wall times and CPU figures are only meaningful on an otherwise idle
machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import floor  # noqa: E402
from cpu import CpuMeter, freeze_startup, settle  # noqa: E402
from provenance import Provenance  # noqa: E402
from runs import RunOutcome, Scenario, critical_path, paths_by_seed, step_latencies  # noqa: E402

from image_project.backends.base import TextReply, TextRequest  # noqa: E402
from image_project.backends.factory import make_backends  # noqa: E402
from image_project.backends.offline.text import OfflineTextBackend  # noqa: E402
from image_project.config.loading import load_config  # noqa: E402
from image_project.config.models import AppConfig  # noqa: E402
from image_project.engine.context import Context, EngineEvent  # noqa: E402
from image_project.engine.recorder import DefaultStepRecorder, NullStepRecorder  # noqa: E402
from image_project.engine.runner import ChatRunner  # noqa: E402
from image_project.run.driver import run_generation  # noqa: E402
from image_project.stages.profile import avoid_list, load_profile, render_guidance  # noqa: E402
from image_project.stages.scoring.flow import ScoringRun, ScoringSetup  # noqa: E402
from image_project.stages.scoring.novelty import NoveltyState  # noqa: E402
from image_project.stages.standard import Brief  # noqa: E402

if TYPE_CHECKING:  # the simulator (and uvicorn) is imported only when it is used
    from simulator import LatencySimulator, RemoteSimulator

SEED = 2026


def scoring(n: int, judges: int, **kw: Any) -> Scenario:
    ids = ", ".join(f"{{id: j{i + 1}}}" for i in range(judges))
    return Scenario(
        name=kw.pop("name", f"scoring N={n} x J={judges}"),
        overrides=(
            "prompt.scoring.enabled=true",
            f"prompt.scoring.num_ideas={n}",
            f"prompt.scoring.judges=[{ids}]",
        ),
        **kw,
    )


def evolution(
    n: int = 6, judges: int = 3, rounds: int = 2, survivors: int = 3, variants: int = 2
) -> Scenario:
    """Multi-round selection: round 0 (N cards, J judges), then ``rounds`` rounds of
    survivors x variants generator calls and J judges each (docs/rounds.md)."""
    base = scoring(n, judges)
    return Scenario(
        name=f"evolution N={n} x J={judges}, G={rounds} S={survivors} V={variants}",
        overrides=(
            *base.overrides,
            "prompt.scoring.evolution.enabled=true",
            f"prompt.scoring.evolution.generations={rounds}",
            f"prompt.scoring.evolution.survivors={survivors}",
            f"prompt.scoring.evolution.variants_per_survivor={variants}",
        ),
    )


def scenarios(quick: bool) -> list[Scenario]:
    standard = [
        Scenario("standard refinement=final", ("prompt.refinement=final",)),
        Scenario("standard refinement=per_stage", ("prompt.refinement=per_stage",)),
    ]
    limiter = scoring(24, 3, name="scoring N=24 x J=3, max_concurrency=4", max_concurrency=4)
    if quick:
        return [
            standard[0],
            scoring(6, 3),
            evolution(),
            sweep_point(2, 3),
            sweep_point(24, 3),
            limiter,
        ]
    sweep = [sweep_point(n, j) for j in (1, 3, 5) for n in (2, 6, 12, 24)]
    return [*standard, scoring(6, 3), evolution(), *sweep, limiter]


def sweep_point(n: int, judges: int) -> Scenario:
    """A sweep scenario: latencies keyed by the call, not its text (see bench/simulator.py),
    so that the steps after the scoring stage cost the same whichever card N leads to."""
    return scoring(n, judges, name=f"sweep N={n} x J={judges}", group="sweep", latency_key="call")


# --------------------------------------------------------------------------- one run


def make_cfg(
    tmp: Path, scenario: Scenario, mode: str, base_url: str, model: str | None, prompt_only: bool
) -> AppConfig:
    overrides = [
        "backend.provider=openai",
        f"backend.base_url={base_url}",
        f"backend.max_concurrency={scenario.max_concurrency}",
        f"image.generation_path={tmp / 'images'}",
        f"image.log_path={tmp / 'logs'}",
        f"prompt.generations_path={tmp / 'generations.csv'}",
        "image.size=1024x1024",
        f"run.concurrency={mode}",
        # The run store is written after the run (finish), on the event loop: local work
        # that is neither a call nor the records phase; off here, so that the CPU per call
        # and the bound measure the client and the pipeline (bench/store.py measures it).
        "store.enabled=false",
        f"run.mode={'prompt_only' if prompt_only else 'full'}",
        *scenario.overrides,
    ]
    if model:
        overrides.append(f"backend.text_model={model}")
    return load_config(root=REPO, env={}, overrides=overrides)


async def run_once(
    scenario: Scenario,
    mode: str,
    base_url: str,
    sim: LatencySimulator | RemoteSimulator | None,
    *,
    model: str | None = None,
    prompt_only: bool = False,
    recorder: DefaultStepRecorder | None = None,
) -> RunOutcome:
    """One ``run_generation`` of ``scenario`` in ``mode``, timed from a settled collector
    (bench/cpu.py); ``recorder`` (default: a plain :class:`DefaultStepRecorder`) records it."""
    with tempfile.TemporaryDirectory(prefix="latency-") as d:
        cfg = make_cfg(Path(d), scenario, mode, base_url, model, prompt_only)
        backends = make_backends(cfg, os.environ if sim is None else {})
        if sim is not None:
            sim.reset()
        # The default recorder of a run without progress lines, kept to read its groups.
        recorder = recorder if recorder is not None else DefaultStepRecorder()
        settle()
        t0, t0_clock = time.perf_counter(), time.time()
        try:
            with CpuMeter() as meter:
                result = await run_generation(cfg, backends, seed=SEED, recorder=recorder)
        finally:
            await backends.aclose()
        wall = time.perf_counter() - t0
        transcript = json.loads(result.transcript_path.read_text(encoding="utf-8"))
    records = list(sim.records) if sim is not None else []
    return RunOutcome(
        wall, transcript, records, t0_clock, meter.cpu_s, meter.gc_s, dict(recorder.groups)
    )


# --------------------------------------------------------------------------- critical path


SCORING_STAGE = "pipeline/blackbox_scoring"


def scoring_stage(outcome: RunOutcome, capacity: int | None = None) -> tuple[float, float] | None:
    """(wall span, critical path) of the scoring stage's calls (hints, ideas, judges, the
    rounds), from the simulator's records and the run's shape; None for a run without
    scoring or without records."""
    by_seed = paths_by_seed(outcome)
    calls = [
        r
        for r in outcome.records
        if r.kind == "chat" and by_seed[r.seed].startswith(SCORING_STAGE + "/")
    ]
    if not calls:
        return None
    span = max(r.finished for r in calls) - min(r.started for r in calls)
    return span, outcome.shape.cost(SCORING_STAGE, step_latencies(outcome), capacity)


# --------------------------------------------------------------------------- scenario


@dataclass
class Result:
    scenario: Scenario
    sequential: list[float] = field(default_factory=list)
    concurrent: list[float] = field(default_factory=list)
    critical_path_s: float = 0.0
    latency_sum_s: float = 0.0
    calls: int = 0
    same_selection: bool = True
    selected: str | None = None
    stage: dict[str, list[float]] = field(default_factory=dict)
    timeline: dict[str, RunOutcome] = field(default_factory=dict)
    local: list[float] = field(default_factory=list)
    cpu_ms_per_call: dict[str, list[float]] = field(default_factory=dict)  # project/sdk/httpx
    gc_ms_per_call: dict[str, list[float]] = field(default_factory=dict)  # of which in gc
    floor_wall: dict[str, list[float]] = field(default_factory=dict)  # sdk/httpx

    def floor_dict(self, bound: float, con: float) -> dict[str, Any]:
        """The floor's figures (empty without replays: a real endpoint)."""
        if not self.floor_wall:
            return {}
        local = statistics.median(self.local) if self.local else 0.0
        cpu = {k: statistics.median(v) for k, v in self.cpu_ms_per_call.items()}
        gc_ms = {k: statistics.median(v) for k, v in self.gc_ms_per_call.items()}
        floors = {k: statistics.median(v) + local for k, v in self.floor_wall.items()}
        return {
            "cpu_ms_per_call": cpu,
            "cpu_ratio": cpu["project"] / cpu["sdk"] if cpu.get("sdk") else float("nan"),
            # Each repeat's project run against its own replay (interleaved): how far single
            # runs spread on either side of the median ratio.
            "cpu_ratio_repeats": [
                p / q
                for p, q in zip(
                    self.cpu_ms_per_call["project"], self.cpu_ms_per_call["sdk"], strict=True
                )
            ],
            "gc_ms_per_call": gc_ms,
            "floor_s": floors,
            "floor_efficiency": {k: bound / v for k, v in floors.items()},
            "efficiency_vs_floor": floors["sdk"] / con,
        }

    def to_dict(self) -> dict[str, Any]:
        seq, con = statistics.median(self.sequential), statistics.median(self.concurrent)
        ideal = self.latency_sum_s / self.critical_path_s if self.critical_path_s else 0.0
        local = statistics.median(self.local) if self.local else 0.0
        bound = self.critical_path_s + local
        return {
            "scenario": self.scenario.name,
            "group": self.scenario.group,
            "max_concurrency": self.scenario.max_concurrency,
            "calls": self.calls,
            "sequential_s": {
                "median": seq,
                "min": min(self.sequential),
                "max": max(self.sequential),
            },
            "concurrent_s": {
                "median": con,
                "min": min(self.concurrent),
                "max": max(self.concurrent),
            },
            "speedup": seq / con,
            "ideal_speedup": ideal,
            "speedup_of_ideal": (seq / con) / ideal if ideal else 0.0,
            "critical_path_s": self.critical_path_s,
            "latency_sum_s": self.latency_sum_s,
            "local_s": local,
            "bound_s": bound,
            "efficiency": bound / con,
            "same_selection": self.same_selection,
            "selected_id": self.selected,
            "scoring_stage": {k: statistics.median(v) for k, v in self.stage.items()} or None,
            **self.floor_dict(bound, con),
        }


def _fingerprint(t: dict[str, Any]) -> tuple[Any, ...]:
    return (t["blackbox_scoring"].get("selected_id"), t["final_image_prompt"])


async def run_scenario(
    scenario: Scenario,
    base_url: str,
    sim: LatencySimulator | RemoteSimulator | None,
    repeats: int,
    *,
    model: str | None = None,
    prompt_only: bool = False,
) -> Result:
    result = Result(scenario)
    fingerprints = set()
    for _ in range(repeats):
        for mode in ("sequential", "concurrent"):
            outcome = await run_once(
                scenario, mode, base_url, sim, model=model, prompt_only=prompt_only
            )
            (result.sequential if mode == "sequential" else result.concurrent).append(
                outcome.wall_s
            )
            fingerprints.add(_fingerprint(outcome.transcript))
            result.timeline[mode] = outcome
            if mode == "concurrent" and sim is not None:
                await measure_floor(result, outcome, base_url)
            stage = scoring_stage(outcome, scenario.max_concurrency)
            if stage is not None:
                result.stage.setdefault(f"{mode}_s", []).append(stage[0])
                result.stage.setdefault("critical_path_s", []).append(stage[1])
            if mode == "sequential":
                result.critical_path_s, result.latency_sum_s = critical_path(scenario, outcome)
                result.calls = (
                    outcome.transcript["usage"]["model_calls"]
                    + outcome.transcript["usage"]["image_calls"]
                )
    result.same_selection = len(fingerprints) == 1
    result.selected = next(iter(fingerprints))[0]
    return result


async def measure_floor(result: Result, outcome: RunOutcome, base_url: str) -> None:
    """Replay ``outcome``'s requests through the bare SDK and raw httpx (bench/floor.py) and
    add the figures, with the project run's own CPU per call and local time, to ``result``."""
    captured = floor.capture(outcome.records, paths_by_seed(outcome))
    shape = outcome.shape
    cpu, gc_ms = result.cpu_ms_per_call, result.gc_ms_per_call
    cpu.setdefault("project", []).append(outcome.cpu_s / captured.calls * 1000)
    gc_ms.setdefault("project", []).append(outcome.gc_s / captured.calls * 1000)
    result.local.append(outcome.local_s)
    for client in floor.CLIENTS:
        done = await floor.replay(
            client, base_url, shape, captured, result.scenario.max_concurrency
        )
        cpu.setdefault(client, []).append(done.cpu_ms_per_call)
        gc_ms.setdefault(client, []).append(done.gc_ms_per_call)
        result.floor_wall.setdefault(client, []).append(done.wall_s)


async def warm_up(
    scenario: Scenario, base_url: str, sim: LatencySimulator | RemoteSimulator
) -> None:
    """One untimed project run and replay of each client: the first call of a process pays
    the SDK's lazy imports, which must not land in a timed run."""
    outcome = await run_once(scenario, "concurrent", base_url, sim)
    await measure_floor(Result(scenario), outcome, base_url)


# --------------------------------------------------------------------------- along a conversation


class _StepCpu(DefaultStepRecorder):
    """The default recorder, also taking each chat step's event-loop CPU: in the sequential
    mode one step runs at a time, so the thread's CPU from a step's start to its end is that
    step's (rendering its prompt, building and sending the body, reading and recording the
    answer)."""

    def __init__(self) -> None:
        super().__init__()
        self._c0: dict[str, float] = {}
        self.cpu: dict[int | None, tuple[int, float]] = {}  # API seed -> (messages, cpu_s)

    def on_step_start(self, ctx: Context, path: str, **metrics: Any) -> None:
        self._c0[path] = time.thread_time()
        super().on_step_start(ctx, path, **metrics)

    def on_step_end(self, ctx: Context, record: EngineEvent) -> None:
        super().on_step_end(ctx, record)
        if record.type == "chat" and record.answers == 1 and record.attempts == 1:
            spent = time.thread_time() - self._c0[record.path]
            self.cpu[record.params.seed] = (record.context_messages + 1, spent)


CONVERSATION = Scenario("standard refinement=per_stage", ("prompt.refinement=per_stage",))
"""The scenario with the longest conversations (each stage's prompts and answers stay in it)."""


async def along_conversation(
    base_url: str, sim: LatencySimulator | RemoteSimulator, repeats: int
) -> dict[str, Any]:
    """Client CPU per chat call against the length of the conversation it sends: the
    sequential mode of :data:`CONVERSATION`, each step's CPU (:class:`_StepCpu`), against the
    bare SDK sending the same body alone (``floor.per_request_cpu``); medians over
    ``repeats`` runs by the call's position, and the least-squares slope of each against the
    number of messages. Flat: the slope is near zero for the project, whatever the SDK's."""
    by_call: dict[int, list[tuple[int, int, float, float]]] = {}
    for _ in range(repeats):
        recorder = _StepCpu()
        outcome = await run_once(CONVERSATION, "sequential", base_url, sim, recorder=recorder)
        chats = sorted((r for r in outcome.records if r.kind == "chat"), key=lambda r: r.started)
        timed = [r for r in chats if r.seed in recorder.cpu and r.body is not None]
        sdk = await floor.per_request_cpu(base_url, [r.body for r in timed if r.body])
        for i, (record, sdk_s) in enumerate(zip(timed, sdk, strict=True)):
            messages, project_s = recorder.cpu[record.seed]
            size = len(json.dumps(record.body))
            by_call.setdefault(i, []).append((messages, size, project_s * 1000, sdk_s * 1000))
    rows = [
        {
            "call": i,
            "messages": samples[0][0],
            "body_bytes": samples[0][1],
            "project_ms": statistics.median(s[2] for s in samples),
            "sdk_ms": statistics.median(s[3] for s in samples),
        }
        for i, samples in sorted(by_call.items())
    ]
    xs = [float(r["messages"]) for r in rows]

    def fit(key: str) -> dict[str, float]:
        ys = [r[key] for r in rows]
        slope, intercept = statistics.linear_regression(xs, ys)
        return {
            "slope_ms_per_message": slope,
            "at_2_messages_ms": intercept + 2 * slope,
            "at_max_messages_ms": intercept + max(xs) * slope,
        }

    return {
        "scenario": CONVERSATION.name,
        "mode": "sequential",
        "repeats": repeats,
        "calls": len(rows),
        "max_messages": max(xs),
        "project": fit("project_ms"),
        "sdk": fit("sdk_ms"),
        "rows": rows,
    }


def conversation_table(report: Mapping[str, Any]) -> str:
    lines = [
        f"per-call CPU along the conversation ({report['scenario']}, sequential, median of "
        f"{report['repeats']}): messages -> project ms / bare SDK ms (same body)",
    ]
    seen: dict[int, dict[str, Any]] = {}
    for row in report["rows"]:
        seen.setdefault(row["messages"], row)
    lines += [
        f"  {m:>3} msgs {r['body_bytes']:>6} B  {r['project_ms']:6.2f} / {r['sdk_ms']:6.2f}"
        for m, r in sorted(seen.items())
    ]
    for who in ("project", "sdk"):
        f = report[who]
        lines.append(
            f"  {who:<7} fit: {f['at_2_messages_ms']:.2f} ms at 2 messages, "
            f"{f['at_max_messages_ms']:.2f} ms at {report['max_messages']:.0f}, "
            f"slope {f['slope_ms_per_message'] * 1000:+.1f} us per message"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- engine overhead


class _TimedBackend:
    """The offline backend, answering instantly and totalling the time spent inside it."""

    label = "instant"
    default_model = "instant"

    def __init__(self) -> None:
        self.inner = OfflineTextBackend()
        self.spent = 0.0

    async def complete(self, request: TextRequest) -> TextReply:
        t = time.perf_counter()
        try:
            return await self.inner.complete(request)
        finally:
            self.spent += time.perf_counter() - t


class _CountingRecorder(NullStepRecorder):
    """Records nothing, counts the steps that ran."""

    def __init__(self) -> None:
        self.steps = 0

    def on_step_end(self, ctx: Context, record: EngineEvent) -> None:
        self.steps += 1


async def engine_overhead(runs: int = 30) -> float:
    """ms per step of the engine itself: the scoring 6x3 flow (:class:`ScoringRun`, its
    steps run from code) through an in-process backend with zero latency, minus the time
    spent inside the backend, per step that ran."""
    cfg = load_config(root=REPO, env={}, overrides=list(scoring(6, 3).overrides))
    settings = cfg.prompt.scoring
    profile = load_profile(REPO / "config" / "profile.csv")
    backend = _TimedBackend()
    walls = []
    steps = 0
    setup = ScoringSetup(
        brief=Brief(
            ("Baroque", "Bird's-Eye View", "Complementary colours"),
            render_guidance(profile),
            tuple(avoid_list(profile)),
        ),
        run_seed=SEED,
        scoring=settings,
        judges=settings.effective_judges(backend.default_model),
        selector_model=settings.effective_selector_model(backend.default_model),
        likes=(),
        novelty=NoveltyState(enabled=False, window=0),
        refinement=cfg.prompt.refinement,
        temperature=cfg.prompt.text_temperature,
    )
    for _ in range(runs):
        flow = ScoringRun(setup)
        ctx = Context.with_system("bench")
        recorder = _CountingRecorder()
        runner = ChatRunner(backend, recorder=recorder)
        before = backend.spent
        t0 = time.perf_counter()
        await flow.run(runner.root(ctx))
        walls.append((time.perf_counter() - t0) - (backend.spent - before))
        steps = recorder.steps
    return statistics.median(walls) / steps * 1000


# --------------------------------------------------------------------------- output


def table(results: Sequence[Result]) -> str:
    return rows_table([r.to_dict() for r in results])


def rows_table(rows: Sequence[dict[str, Any]]) -> str:
    """The scenario table of ``rows`` (:meth:`Result.to_dict`, or a report's ``scenarios``)."""
    head = (
        f"{'scenario':<40} {'calls':>5} {'sequential_s':>22} {'concurrent_s':>22} "
        f"{'speedup':>7} {'ideal':>6} {'crit_s':>7} {'local':>6} {'effic':>6} {'floor':>6} "
        f"{'cpu ms/call prj/sdk/httpx':>26} {'ratio':>5} same"
    )
    lines = [head, "-" * len(head)]
    for d in rows:
        s, c = d["sequential_s"], d["concurrent_s"]
        lines.append(
            f"{d['scenario']:<40} {d['calls']:>5} "
            f"{s['median']:>7.2f} [{s['min']:.2f}-{s['max']:.2f}] "
            f"{c['median']:>7.2f} [{c['min']:.2f}-{c['max']:.2f}] "
            f"{d['speedup']:>6.2f}x {d['ideal_speedup']:>5.2f}x {d['critical_path_s']:>7.2f} "
            f"{d['local_s']:>6.3f} {d['efficiency']:>6.3f} {_floor_cells(d)} "
            f"{'yes' if d['same_selection'] else 'NO'}"
        )
    return "\n".join(lines)


def _floor_cells(d: dict[str, Any]) -> str:
    if "cpu_ms_per_call" not in d:
        return f"{'-':>6} {'-':>26} {'-':>5}"
    cpu = d["cpu_ms_per_call"]
    cells = f"{cpu['project']:.2f}/{cpu['sdk']:.2f}/{cpu['httpx']:.2f}"
    return f"{d['floor_efficiency']['sdk']:>6.3f} {cells:>26} {d['cpu_ratio']:>5.2f}"


def sweep_summary(results: Sequence[Result]) -> list[dict[str, Any]]:
    out = []
    sweep = [r for r in results if r.scenario.group == "sweep"]
    for judges in sorted({int(r.scenario.name.split("J=")[1]) for r in sweep}):
        rows = sorted(
            (r for r in sweep if r.scenario.name.endswith(f"J={judges}")),
            key=lambda r: int(r.scenario.name.split("N=")[1].split()[0]),
        )
        if len(rows) < 2:
            continue
        lo, hi = rows[0].to_dict(), rows[-1].to_dict()
        out.append(
            {
                "judges": judges,
                "from": lo["scenario"],
                "to": hi["scenario"],
                "concurrent_growth": hi["concurrent_s"]["median"] / lo["concurrent_s"]["median"]
                - 1,
                "sequential_growth": hi["sequential_s"]["median"] / lo["sequential_s"]["median"]
                - 1,
                "critical_path_growth": hi["critical_path_s"] / lo["critical_path_s"] - 1,
                "stage_concurrent_growth": _growth(lo, hi, "concurrent_s"),
                "stage_critical_path_growth": _growth(lo, hi, "critical_path_s"),
                "stage_sequential_growth": _growth(lo, hi, "sequential_s"),
            }
        )
    return out


def _growth(lo: dict[str, Any], hi: dict[str, Any], key: str) -> float:
    a, b = lo["scoring_stage"] or {}, hi["scoring_stage"] or {}
    return b[key] / a[key] - 1 if a.get(key) and key in b else float("nan")


_COLOURS = {
    "profile hints": (244, 180, 0),
    "idea cards": (66, 133, 244),
    "judges": (219, 68, 55),
    "ToT refinement": (15, 157, 88),
    "image": (171, 71, 188),
    "title": (0, 172, 193),
    "drafts, rewrite": (120, 120, 120),
    "records (local)": (30, 30, 30),
}


def _category(path: str) -> str:
    for key, name in (
        ("/ideas/", "idea cards"),
        ("/variants/", "idea cards"),  # an evolution round's generator calls
        ("/judges/", "judges"),
        ("blackbox_scoring", "profile hints"),
        ("tot_enclave", "ToT refinement"),
    ):
        if key in path:
            return name
    if path in ("image", "title", "records (local)"):
        return path
    return "drafts, rewrite"


def _short(path: str) -> str:
    """A bar's label: the step's name, with its parent for the generic ones."""
    parts = path.split("/")
    if parts[-1] in ("draft", "representative") or len(parts) == 1:
        return "/".join(parts[-2:])
    return parts[-1]


def draw_timeline(result: Result, path: Path) -> None:
    """One labelled bar per model call on a shared time axis: sequential above, concurrent
    below, a grid line every second and a line at each mode's wall time."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=11)
    panels = []
    for mode in ("sequential", "concurrent"):
        outcome = result.timeline[mode]
        by_seed = paths_by_seed(outcome)
        bars = []
        for rec in sorted(outcome.records, key=lambda r: r.started):
            label = "image" if rec.kind == "image" else by_seed.get(rec.seed, "?")
            bars.append((rec.started - outcome.t0, rec.finished - outcome.t0, label))
        if bars and outcome.local_s:  # the local records phase, after the last call
            last = max(end for _, end, _ in bars)
            bars.append((last, last + outcome.local_s, "records (local)"))
        panels.append((mode, bars, outcome.wall_s))
    span = max(wall for _, _, wall in panels)
    width, left, right, bar_h, gap = 1500, 20, 170, 11, 3
    heights = [44 + len(bars) * (bar_h + gap) + 26 for _, bars, _ in panels]
    img = Image.new("RGB", (width, 34 + sum(heights) + 40), "white")
    draw = ImageDraw.Draw(img)
    scale = (width - left - right) / span
    step = next(s for s in (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0) if span / s <= 15)
    draw.text(
        (left, 10),
        f"{result.scenario.name}: one bar per model call, time in seconds "
        f"(critical path {result.critical_path_s:.2f} s)",
        fill="black",
        font=font,
    )
    y = 34
    for (mode, bars, wall), h in zip(panels, heights, strict=True):
        top, bottom = y + 22, y + h - 24
        for i in range(int(span / step) + 1):  # grid and ticks on every panel
            x = left + i * step * scale
            draw.line((x, top - 4, x, bottom), fill=(225, 225, 225))
            draw.text((x - 3, bottom + 3), f"{i * step:g}", fill="black", font=font)
        draw.text(
            (left, y), f"{mode}: {wall:.2f} s wall, {len(bars)} calls", fill="black", font=font
        )
        for i, (start, end, label) in enumerate(bars):
            by = top + i * (bar_h + gap)
            x0, x1 = left + start * scale, left + max(end * scale, start * scale + 2)
            draw.rectangle((x0, by, x1, by + bar_h), fill=_COLOURS[_category(label)])
            draw.text((x1 + 4, by - 1), _short(label), fill=(60, 60, 60), font=font)
        x = left + wall * scale
        draw.line((x, top - 6, x, bottom), fill="black", width=2)
        y += h
    x = left
    for name, colour in _COLOURS.items():
        draw.rectangle((x, y + 8, x + 12, y + 18), fill=colour)
        draw.text((x + 16, y + 6), name, fill="black", font=font)
        x += 40 + int(draw.textlength(name, font=font))
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)


# --------------------------------------------------------------------------- main


async def main_async(args: argparse.Namespace) -> tuple[list[Result], dict[str, Any]]:
    logging.getLogger("image_project").addHandler(logging.NullHandler())
    logging.getLogger("image_project").propagate = False
    freeze_startup()
    results: list[Result] = []
    conversation: dict[str, Any] | None = None
    if args.base_url:
        scenario = scoring(6, 3, name=f"scoring N=6 x J=3 on {args.base_url} ({args.model})")
        print(
            f"running {scenario.name} (prompt only, {args.repeats} repeat(s)) ...", file=sys.stderr
        )
        results.append(
            await run_scenario(
                scenario, args.base_url, None, args.repeats, model=args.model, prompt_only=True
            )
        )
        sim_info: dict[str, Any] = {"base_url": args.base_url, "model": args.model}
    else:
        import batch  # the image_project.run.batch machinery, only when it runs
        from simulator import RemoteSimulator

        factor = 0.05 if args.quick else 1.0
        sim = RemoteSimulator(chat_median_s=0.4 * factor, image_median_s=2.0 * factor)
        sim_info = {
            "chat_median_s": sim.chat_median_s,
            "image_median_s": sim.image_median_s,
            "sigma": sim.sigma,
            "latency_key": {"main": "body", "sweep": "call"},
            "served_by": "uvicorn in its own process on 127.0.0.1",
        }
        with sim.serve() as base_url:
            await warm_up(scenarios(args.quick)[0], base_url, sim)
            for scenario in [] if args.batch_only else scenarios(args.quick):
                repeats = (
                    1
                    if args.quick
                    else (args.sweep_repeats if scenario.group == "sweep" else args.repeats)
                )
                print(
                    f"running {scenario.name} ({repeats} repeat(s) per mode) ...",
                    file=sys.stderr,
                    flush=True,
                )
                sim.latency_key = scenario.latency_key
                results.append(await run_scenario(scenario, base_url, sim, repeats))
            sim.latency_key = "body"
            if not args.batch_only:
                print("running the per-call CPU along a conversation ...", file=sys.stderr)
                conversation = await along_conversation(base_url, sim, 3)
            batches = await batch.run_batches(base_url, sim, args.quick)
        sim_info["batch"] = batches
        print(batch.batch_table(batches))
    if args.batch_only:
        return results, {"simulator": sim_info, "all_same_selection": True}
    overhead = await engine_overhead(10 if args.quick else 30)
    sweep = sweep_summary(results)
    report = {
        "simulator": sim_info,
        "repeats": args.repeats,
        "sweep_repeats": args.sweep_repeats,
        "quick": args.quick,
        "scenarios": [r.to_dict() for r in results],
        "sweep": sweep,
        "engine_overhead_ms_per_step": overhead,
        "along_conversation": conversation,
        "all_same_selection": all(r.same_selection for r in results),
    }
    print(report_text(report))
    if conversation is not None:
        print(conversation_table(conversation))
    return results, report


def report_text(report: Mapping[str, Any]) -> str:
    """The scenario table, the sweep's growth and the engine overhead of a report."""
    lines = [rows_table(report["scenarios"])]
    for s in report["sweep"]:
        lines.append(
            f"sweep J={s['judges']} (N=2 -> N=24): whole run: concurrent "
            f"{s['concurrent_growth']:+.1%} (its critical path {s['critical_path_growth']:+.1%}), "
            f"sequential {s['sequential_growth']:+.1%}; scoring stage: concurrent "
            f"{s['stage_concurrent_growth']:+.1%} (critical path "
            f"{s['stage_critical_path_growth']:+.1%}), sequential {s['stage_sequential_growth']:+.1%}"
        )
    lines.append(
        "engine overhead (in-process backend, zero latency): "
        f"{report['engine_overhead_ms_per_step']:.3f} ms per step"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small subset, 20x shorter latencies")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per mode (default 3)")
    parser.add_argument("--sweep-repeats", type=int, default=1, help="repeats in the N x J sweep")
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    parser.add_argument("--timeline", metavar="PATH", help="draw a PNG timeline of one scenario")
    parser.add_argument(
        "--base-url", help="a real OpenAI-compatible endpoint instead of the simulator"
    )
    parser.add_argument("--model", help="text model for --base-url")
    parser.add_argument(
        "--batch-only", action="store_true", help="only the batch scenario (bench/batch.py)"
    )
    args = parser.parse_args(argv)
    if args.base_url and not args.model:
        parser.error("--base-url needs --model")
    provenance = Provenance.start()
    results, report = anyio.run(main_async, args)
    report["measured"] = provenance.finish()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
        print(f"json: {args.json}")
    if args.timeline:
        target = next(
            (r for r in results if r.scenario.name.startswith("scoring N=6 x J=3")), results[0]
        )
        draw_timeline(target, Path(args.timeline))
        print(f"timeline: {args.timeline}")
    if not report["all_same_selection"]:
        if args.base_url:
            # A real model is not deterministic even at temperature 0 with a seed, so the two
            # modes may well choose differently; that says nothing about the engine.
            print(
                "note: the runs did not all choose the same card (a real model's answers vary "
                "between calls even with a seed)",
                file=sys.stderr,
            )
            return 0
        print("FAILED: the modes did not select the same card in every scenario", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
