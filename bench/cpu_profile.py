"""Where the client's CPU goes in the standard scenario: the project's run against the bare
SDK replaying its requests, profiled and with the garbage collector's share.

    python bench/cpu_profile.py                       # 10 runs, the bench's collector handling
    python bench/cpu_profile.py --unsettled           # without it (no freeze, no collect)
    python bench/cpu_profile.py --json docs/cpu_profile.json

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
from runs import paths_by_seed  # noqa: E402

TOP = 15


def _top(profile: cProfile.Profile, calls: int, top: int = TOP) -> list[dict[str, Any]]:
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, name), (_, ncalls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
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


async def measure(runs: int, settled: bool) -> dict[str, Any]:
    from simulator import RemoteSimulator

    if not settled:  # what latency.py did before bench/cpu.py: neither hook runs
        cpu.settle = lambda: None
        latency.settle = floor.settle = cpu.settle  # type: ignore[attr-defined]
    else:
        cpu.freeze_startup()
    scenario = latency.scenarios(True)[0]
    sim = RemoteSimulator(chat_median_s=0.02, image_median_s=0.1)
    rounds = []
    with sim.serve() as url:
        await latency.warm_up(scenario, url, sim)
        for _ in range(runs):
            # As in bench/latency.py: the sequential run first (untimed here), then the
            # concurrent one and its replay.
            await latency.run_once(scenario, "sequential", url, sim)
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
        "profile": {"project": _top(project, profile_calls), "sdk": _top(sdk, profile_calls)},
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
    for who in ("project", "sdk"):
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
    args = parser.parse_args(argv)
    provenance = Provenance.start()
    report = anyio.run(measure, args.runs, not args.unsettled)
    report["measured"] = provenance.finish()
    print(text(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
