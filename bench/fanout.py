"""Wall-clock check of the engine's fan-out, with an in-process fake backend (no HTTP).

    python bench/fanout.py            # 6 parallel calls of 100 ms, concurrent vs sequential
    python bench/fanout.py --json out.json

Reports the median wall time of a 6-way parallel block of 100 ms calls in each mode, and the
engine's own overhead per step with zero simulated latency. Timing claims live here, never in
unit tests. The full HTTP benchmark is bench/latency.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from image_project.backends.base import TextRequest
from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep
from image_project.engine.recorder import NullStepRecorder
from image_project.engine.runner import ChatRunner, ExecutionMode
from image_project.testing import FunctionTextBackend


def six_way(width: int) -> list[ChatStep[str]]:
    return [
        ChatStep(name=f"c{i}", prompt=f"call {i}", temperature=0, merge="none")
        for i in range(width)
    ]


async def wall_time(mode: ExecutionMode, latency_s: float, width: int) -> float:
    async def answer(request: TextRequest) -> str:
        await anyio.sleep(latency_s)
        return "ok"

    runner = ChatRunner(FunctionTextBackend(answer), mode=mode, recorder=NullStepRecorder())
    t0 = time.perf_counter()
    await runner.root(Context()).gather("fan", six_way(width))
    return time.perf_counter() - t0


async def overhead_per_step(steps: int) -> float:
    runner = ChatRunner(FunctionTextBackend(lambda r: "ok"), recorder=NullStepRecorder())
    t0 = time.perf_counter()
    async with runner.root(Context()).scope("pipeline") as pipeline:
        for i in range(steps):
            await pipeline.ask(ChatStep(prompt=f"p{i}", temperature=0, merge="none"))
    return (time.perf_counter() - t0) / steps


async def main_async(args: argparse.Namespace) -> dict[str, float]:
    results: dict[str, float] = {}
    for mode in ("sequential", "concurrent"):
        samples = [await wall_time(mode, args.latency, args.width) for _ in range(args.repeats)]
        results[f"{mode}_s"] = statistics.median(samples)
    results["speedup"] = results["sequential_s"] / results["concurrent_s"]
    results["overhead_ms_per_step"] = (
        statistics.median([await overhead_per_step(500) for _ in range(5)]) * 1000
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--width", type=int, default=6)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per fake call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = anyio.run(main_async, args)
    print(
        f"{args.width} parallel calls of {args.latency * 1000:.0f} ms (median of {args.repeats}):"
    )
    print(f"  sequential  {results['sequential_s'] * 1000:8.1f} ms")
    print(f"  concurrent  {results['concurrent_s'] * 1000:8.1f} ms")
    print(f"  speedup     {results['speedup']:8.2f}x")
    print(f"engine overhead, zero latency: {results['overhead_ms_per_step']:.3f} ms per step")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
