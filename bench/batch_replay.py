"""The batch's tighter bound (bench/batch.py): the batch replayed on a simulated clock by an
ideal scheduler, with the same runs, the same call latencies and the same rate limit.

``max(critical path x ceil(N / K), calls / rate)`` is a lower bound only when one of the two
constraints binds alone. With K runs started together, every run reaches its fan-outs at about
the same moment: 12 runs x a 5-call fan-out ask for 60 calls in a window that admits 48, so
the rate limit binds in bursts while the runs are also on their critical paths, and the calls
that come after the last full window still take their latency (a run ends with its image
call, the slowest). Neither term sees that.

:func:`ideal_wall` replays the batch as a discrete-event simulation: each run is the DAG of
its calls (its :class:`shape.Shape`: sequential blocks in order, parallel groups at once, a
step's re-asks one after the other, the image and title calls together, then its local
records phase), at most K runs in flight (the next run starts when one ends, in run order),
and a scheduler with no overhead that sends every ready call, first ready first sent, as soon
as the fixed window (the simulator's: ``limit`` requests per ``window_s``, aligned with the
batch's start) has room, and no concurrency limit. Its wall time is what a perfect pacer
with this first-come policy achieves; it is not a proof that no schedule is faster (a
scheduler that knew the future could favour calls on longer remaining paths), so it is
reported next to bench/batch.py's bound ``max(critical path x ceil(N / K), total calls /
rate)``, not instead of it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from shape import Shape

__all__ = ["RunDag", "ideal_wall"]


@dataclass(frozen=True)
class RunDag:
    """One run for the replay: what it ran, each step's call latencies (in order; empty for
    a step without a call) and its local records phase."""

    shape: Shape
    latencies: Mapping[str, Sequence[float]]
    local_s: float


@dataclass
class _Node:
    run: int
    latency: float
    call: bool
    succs: list[int] = field(default_factory=list)
    waiting: int = 0  # predecessors not yet done


def _build(dag: RunDag, run: int, nodes: list[_Node]) -> tuple[int, int]:
    """Add one run's nodes; (its start node, its end node)."""

    def node(latency: float, call: bool, preds: Sequence[int]) -> int:
        nodes.append(_Node(run, latency, call, waiting=len(preds)))
        for p in preds:
            nodes[p].succs.append(len(nodes) - 1)
        return len(nodes) - 1

    def build(path: str, preds: list[int]) -> list[int]:
        shape = dag.shape
        if shape.is_step(path):
            exits = preds
            for latency in dag.latencies.get(path, ()):
                exits = [node(latency, True, exits)]
            return exits
        kids = shape.children[path]
        if shape.parallel(path):
            return [e for kid in kids for e in build(kid, preds)]
        for kid in kids:
            preds = build(kid, preds)
        return preds

    start = node(0.0, False, [])
    exits = [start]
    for stage in dag.shape.stages():
        exits = [e for root in stage for e in build(root, exits)]
    return start, node(dag.local_s, False, exits)


def ideal_wall(runs: Sequence[RunDag], parallel: int, limit: int, window_s: float) -> float:
    """The replayed batch's wall time in seconds (see the module docstring)."""
    nodes: list[_Node] = []
    ends = [_build(dag, i, nodes) for i, dag in enumerate(runs)]
    end_of = {end: i for i, (_, end) in enumerate(ends)}
    order = itertools.count()
    events: list[tuple[float, int, int]] = []  # (time, tie-break, node finished)
    ready: deque[int] = deque()  # calls ready to send, first ready first
    used: dict[int, int] = {}  # requests sent per window number
    next_run = 0

    def begin(n: int, now: float) -> None:
        if nodes[n].call:
            ready.append(n)
        else:
            heapq.heappush(events, (now + nodes[n].latency, next(order), n))

    def start_run(now: float) -> None:
        nonlocal next_run
        if next_run < len(runs):
            begin(ends[next_run][0], now)
            next_run += 1

    for _ in range(min(parallel, len(runs))):
        start_run(0.0)
    now = 0.0
    while events or ready:
        number = int(now / window_s + 1e-9)
        while ready and used.get(number, 0) < limit:
            n = ready.popleft()
            used[number] = used.get(number, 0) + 1
            heapq.heappush(events, (now + nodes[n].latency, next(order), n))
        if ready and (not events or events[0][0] >= (number + 1) * window_s):
            now = (number + 1) * window_s  # the window is spent: the next one opens
            continue
        now, _, done = heapq.heappop(events)
        if done in end_of:
            start_run(now)
        for s in nodes[done].succs:
            nodes[s].waiting -= 1
            if not nodes[s].waiting:
                begin(s, now)
    return now
