"""What bench/latency.py and bench/batch.py both cost a run with: a :class:`Scenario` (the
configuration overrides and the concurrency limit of one benchmark case), a run's
:class:`RunOutcome` (its transcript, the simulator's records of its calls, its parallel
groups) and its critical path (:func:`critical_path`: the run's shape, bench/shape.py, costed
with its calls' latencies).

Imported by both, importing neither: latency.py runs the batch scenario (batch.py), and
batch.py costs its runs with these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import floor
from shape import Shape

if TYPE_CHECKING:  # the simulator (and uvicorn) is imported only when it is used
    from simulator import CallRecord

__all__ = [
    "REPO",
    "RunOutcome",
    "Scenario",
    "critical_path",
    "paths_by_seed",
    "step_latencies",
]

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Scenario:
    name: str
    overrides: tuple[str, ...] = ()
    max_concurrency: int = 64
    group: str = "main"
    latency_key: str = "body"


# --------------------------------------------------------------------------- one run


@dataclass
class RunOutcome:
    wall_s: float
    transcript: dict[str, Any]
    records: list[CallRecord]
    t0: float  # time.time() at the start, the clock of the simulator's records
    cpu_s: float = 0.0  # the event-loop thread's CPU time over run_generation
    gc_s: float = 0.0  # of which in garbage collections (bench/cpu.py)
    groups: dict[str, int] = field(default_factory=dict)  # the recorder's parallel groups

    @property
    def shape(self) -> Shape:
        """What the run ran: its step paths (transcript order) and its parallel groups."""
        return Shape.of((s["path"] for s in self.transcript["steps"]), self.groups)

    @property
    def local_s(self) -> float:
        """The run's local phase (records), from its own timing."""
        return float(self.transcript["timing"]["phases_s"].get("records", 0.0))


# --------------------------------------------------------------------------- critical path


def paths_by_seed(outcome: RunOutcome) -> dict[int | None, str]:
    """Chat step path by the API seed it sent (every step sends its own derived seed)."""
    return {
        s["params"]["seed"]: s["path"] for s in outcome.transcript["steps"] if s["type"] == "chat"
    }


def step_latencies(outcome: RunOutcome) -> dict[str, float]:
    """Latency per step path of the calls (a chat step's summed over its re-asks; the image
    call's under its path, ``image``); actions make no call and have none.

    With simulator records, the simulated (server-side) latencies, matched to steps by the
    API seed each step sends; without (a real endpoint, prompt only), the client-measured
    ``latency_ms`` of the chat steps.
    """
    latency: dict[str, float] = {}
    if not outcome.records:
        for step in outcome.transcript["steps"]:
            if step["type"] == "chat":
                path = step["path"]
                latency[path] = latency.get(path, 0.0) + step["latency_ms"] / 1000
        return latency
    by_seed = paths_by_seed(outcome)
    for record in outcome.records:
        path = floor.IMAGE if record.kind == "image" else by_seed[record.seed]
        latency[path] = latency.get(path, 0.0) + record.latency_s
    return latency


def critical_path(scenario: Scenario, outcome: RunOutcome) -> tuple[float, float]:
    """(critical path, sum of all call latencies) in seconds: the run's shape costed with
    its calls' latencies (bench/shape.py; the image and title calls go together, so the
    slower of the two is on the path)."""
    latency = step_latencies(outcome)
    return outcome.shape.run_cost(latency, scenario.max_concurrency), sum(latency.values())
