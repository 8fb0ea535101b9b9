"""The client CPU of a timed segment: the event-loop thread's CPU time and the garbage
collections that ran on it.

``time.thread_time`` counts what the thread ran, whoever caused it. A full (generation 2)
collection walks every tracked object of the process, so the segment that happens to
trigger it pays for garbage the whole process made before; in a bench process that has
imported the SDK, the project and pydantic, one costs 50-70 ms, more than a whole standard
run's calls. :func:`settle` therefore freezes the process's start-up objects (as
:mod:`image_project.cli.launch` does for the command line) and collects before every timed
segment, so that each client starts from the same collector state and pays for its own
garbage; :class:`CpuMeter` reports the collector's share of the segment separately.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

__all__ = ["CpuMeter", "freeze_startup", "settle"]

_frozen = False


def freeze_startup() -> None:
    """Move every object made so far (imports, pydantic schemas, the SDK's types) out of the
    collector's reach, once per process, as the command line does at start-up."""
    global _frozen
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True


def settle() -> None:
    """Collect what earlier work left, so that the next timed segment does not pay for it."""
    gc.collect()


class CpuMeter:
    """``with CpuMeter() as m: ...`` then ``m.cpu_s`` (the thread's CPU over the block),
    ``m.gc_s`` (of which in collections on this thread) and ``m.collections`` (by
    generation)."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.gc_s = 0.0
        self.collections = [0, 0, 0]
        self._thread = threading.get_ident()
        self._gc_t0 = 0.0
        self._c0 = 0.0

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._gc_t0 = time.thread_time()
        else:
            self.gc_s += time.thread_time() - self._gc_t0
            self.collections[info["generation"]] += 1

    def __enter__(self) -> CpuMeter:
        gc.callbacks.append(self._on_gc)
        self._c0 = time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu_s = time.thread_time() - self._c0
        gc.callbacks.remove(self._on_gc)
