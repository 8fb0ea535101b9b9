"""Where the client's CPU goes in the standard scenario: the project's run against the bare
SDK replaying its requests, profiled and with the garbage collector's share.

    python bench/cpu_profile.py                       # 10 runs, the bench's collector handling
    python bench/cpu_profile.py --unsettled           # without it (no freeze, no collect)
    python bench/cpu_profile.py --json bench/results/cpu_profile.json
    python bench/cpu_profile.py --scenario "sweep N=24 x J=5"   # any bench/latency.py scenario

Each of ``--runs`` rounds is, as in bench/latency.py, a sequential ``run_generation`` of its
standard scenario (``refinement=final``; untimed here), a concurrent one, then the bare
SDK's replay of its requests (bench/floor.py), against the latency simulator (20x shorter
latencies, as ``--quick``). Per round: the
event-loop thread's CPU per call of each, and how much of it the garbage collector took
(collections by generation). Then one more round of each under ``cProfile`` with the
thread's CPU clock (``time.thread_time``), and the functions with the most CPU of their own.
cProfile adds a cost per Python call, which weighs on the SDK (hundreds of small calls per
request in its parameter transform) more than on the project; the per-round figures are
taken without it.

``--scenario`` takes any scenario of bench/latency.py's full run by name (default the standard
one). Each round's sequential run also measures the run's own work between its calls: the
event-loop CPU of the run outside the backends' calls (``complete`` and ``generate``; one
call at a time, so nothing else runs inside them), per run (``between_calls_ms``), what the
bare SDK's replay has no counterpart for (the inputs, the checks on each answer, the scoring
stage's aggregation and selection, the records and the transcript). The profile also lists
the project's own functions (``image_project/``) with the most CPU of their own.

At the end: how many objects the collector tracks (frozen ones are not) and what one full
collection of them costs (``full_collection_ms``).

``--unsettled`` leaves the collector as bench/latency.py did before ``bench/cpu.py``: the
process's start-up objects not frozen and no collection before a timed segment, so a full
collection lands in whichever run triggers it.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import cpu  # noqa: E402
import floor  # noqa: E402
import latency  # noqa: E402
from provenance import Provenance  # noqa: E402
from runs import Scenario, paths_by_seed  # noqa: E402

TOP = 15


def _top(
    profile: cProfile.Profile, calls: int, top: int = TOP, under: str | None = None
) -> list[dict[str, Any]]:
    """The ``top`` functions by CPU of their own, per call of the run (only files whose path
    holds ``under``, if given)."""
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, name), (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if under is not None and under not in filename:
            continue
        where = filename.split("site-packages/")[-1].split("/lib/python3")[-1]
        where = where.replace(str(REPO) + "/", "")
        rows.append(
            {
                "function": f"{where}:{line}({name})" if line else name,
                "calls_per_call": ncalls / calls,
                "own_ms_per_call": tottime / calls * 1000,
            }
        )
    rows.sort(key=lambda r: -r["own_ms_per_call"])
    return rows[:top]


class _BetweenCalls:
    """The event-loop CPU a sequential run spends inside its backends' calls, so that the
    rest of the run's CPU is its own work between calls (see the module docstring)."""

    def __init__(self) -> None:
        self.inside_s = 0.0

    def __enter__(self) -> _BetweenCalls:
        from image_project.backends.openai_backend import OpenAIImageBackend, OpenAITextBackend

        self._saved = [
            (cls, name, getattr(cls, name))
            for cls, name in ((OpenAITextBackend, "complete"), (OpenAIImageBackend, "generate"))
        ]
        for cls, name, original in self._saved:
            setattr(cls, name, self._timed(original))
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, name, original in self._saved:
            setattr(cls, name, original)

    def _timed(self, original: Any) -> Any:
        async def timed(backend: Any, request: Any) -> Any:
            t0 = time.thread_time()
            try:
                return await original(backend, request)
            finally:
                self.inside_s += time.thread_time() - t0

        return timed


def scenario_named(name: str | None) -> Scenario:
    """The bench/latency.py scenario called ``name`` (None: the standard one)."""
    every = latency.scenarios(False)
    if name is None:
        return every[0]
    for scenario in every:
        if scenario.name == name:
            return scenario
    known = ", ".join(repr(s.name) for s in every)
    raise SystemExit(f"--scenario: no scenario {name!r}; known: {known}")


async def measure(runs: int, settled: bool, name: str | None = None) -> dict[str, Any]:
    from simulator import RemoteSimulator

    if not settled:  # what latency.py did before bench/cpu.py: neither hook runs
        cpu.settle = lambda: None
        latency.settle = floor.settle = cpu.settle  # type: ignore[attr-defined]
    else:
        cpu.freeze_startup()
    scenario = scenario_named(name)
    sim = RemoteSimulator(chat_median_s=0.02, image_median_s=0.1)
    rounds = []
    with sim.serve() as url:
        sim.latency_key = scenario.latency_key  # as bench/latency.py does per scenario
        await latency.warm_up(scenario, url, sim)
        for _ in range(runs):
            # As in bench/latency.py: the sequential run first (untimed here), then the
            # concurrent one and its replay.
            with _BetweenCalls() as between:
                sequential = await latency.run_once(scenario, "sequential", url, sim)
            run = await latency.run_once(scenario, "concurrent", url, sim)
            captured = floor.capture(run.records, paths_by_seed(run))
            replay = await floor.replay("sdk", url, run.shape, captured, 64)
            n = captured.calls
            rounds.append(
                {
                    "project_ms": run.cpu_s / n * 1000,
                    "project_gc_ms": run.gc_s / n * 1000,
                    "sdk_ms": replay.cpu_ms_per_call,
                    "sdk_gc_ms": replay.gc_ms_per_call,
                    "between_calls_ms": (sequential.cpu_s - between.inside_s) * 1000,
                }
            )
        project, sdk = cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)
        profile_calls = captured.calls
        original = latency.run_generation  # type: ignore[attr-defined]

        async def profiled(*args: Any, **kwargs: Any) -> Any:
            project.enable()
            try:
                return await original(*args, **kwargs)
            finally:
                project.disable()

        latency.run_generation = profiled  # type: ignore[attr-defined]
        try:
            run = await latency.run_once(scenario, "concurrent", url, sim)
        finally:
            latency.run_generation = original  # type: ignore[attr-defined]
        captured = floor.capture(run.records, paths_by_seed(run))
        sdk.enable()
        await floor.replay("sdk", url, run.shape, captured, 64)
        sdk.disable()
    tracked = len(gc.get_objects())
    t0 = time.thread_time()
    gc.collect()
    full_ms = (time.thread_time() - t0) * 1000
    return {
        "scenario": scenario.name,
        "settled": settled,
        "tracked_objects": tracked,
        "full_collection_ms": full_ms,
        "calls": profile_calls,
        "rounds": rounds,
        "median": {k: statistics.median(r[k] for r in rounds) for k in rounds[0]},
        "ratio_median": statistics.median(r["project_ms"] / r["sdk_ms"] for r in rounds),
        "gc_threshold": list(gc.get_threshold()),
        "profile": {
            "project": _top(project, profile_calls),
            "sdk": _top(sdk, profile_calls),
            "project_own": _top(project, profile_calls, under="image_project/"),
        },
    }


def text(report: dict[str, Any]) -> str:
    lines = [
        f"{report['scenario']}, {len(report['rounds'])} rounds, collector "
        f"{'settled' if report['settled'] else 'unsettled'}: ms per call (of which gc)",
        f"{'round':>5} {'project':>16} {'bare SDK':>16} {'ratio':>6}",
    ]
    for i, r in enumerate(report["rounds"], 1):
        lines.append(
            f"{i:>5} {r['project_ms']:>7.2f} ({r['project_gc_ms']:>5.2f}) "
            f"{r['sdk_ms']:>7.2f} ({r['sdk_gc_ms']:>5.2f}) {r['project_ms'] / r['sdk_ms']:>6.2f}"
        )
    m = report["median"]
    lines.append(
        f"{'median':>6} {m['project_ms']:>6.2f} ({m['project_gc_ms']:>5.2f}) "
        f"{m['sdk_ms']:>7.2f} ({m['sdk_gc_ms']:>5.2f}) {report['ratio_median']:>6.2f}"
    )
    if "between_calls_ms" in m:
        lines.append(
            f"the run's own work between calls (sequential run): {m['between_calls_ms']:.1f} ms"
        )
    for who in ("project", "sdk", "project_own"):
        lines.append(f"cProfile, {who}: own CPU ms per call (calls per call), top {TOP}")
        lines += [
            f"  {r['own_ms_per_call']:7.3f} ({r['calls_per_call']:8.1f})  {r['function']}"
            for r in report["profile"][who]
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="rounds (default 10)")
    parser.add_argument("--unsettled", action="store_true", help="leave the collector alone")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the report here")
    parser.add_argument(
        "--scenario", metavar="NAME", help="a bench/latency.py scenario (default the standard)"
    )
    args = parser.parse_args(argv)
    provenance = Provenance.start()
    report = anyio.run(measure, args.runs, not args.unsettled, args.scenario)
    report["measured"] = provenance.finish()
    print(text(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
