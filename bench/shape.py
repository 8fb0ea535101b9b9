"""The shape of what a run actually ran, for bench/latency.py's critical path and
bench/floor.py's replay: :class:`Shape`.

A run's transcript lists its steps by path (``steps[].path``, in declared order), and the
engine announces every parallel group as it starts (``on_group_start(path, steps)``, kept by
:attr:`image_project.engine.DefaultStepRecorder.groups`), whether the group is a block of a
static tree (the standard pipeline) or built by code at run time (the scoring flow's ideas,
judges and an evolution round's variants). The two together are the run's structure:

* a step path is a leaf: a chat step costs its latency, an action or a step without a call
  costs nothing;
* every proper prefix of a step path is a block or a scope: a prefix that is a parallel
  group runs its children at once (it costs its slowest child or, under a limit of
  ``capacity`` calls at a time, at least its total work / ``capacity``); any other runs its
  children one after another (it costs their sum);
* children are in the order the transcript lists them (declared order).

At the top, the run's roots (``dislike_rewrite``, ``pipeline``, ``image``, ``title``) run one
after another, except the image and the title calls: the run starts them together once the
prompt is final (``image_project.run``, outside the engine, so they are no announced
group). :meth:`Shape.stages` gives the roots in that order, the image and title as one stage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["ALONGSIDE", "Shape"]

ALONGSIDE = frozenset({"image", "title"})
"""Root steps the run starts together (the image call and the title call)."""


@dataclass(frozen=True)
class Shape:
    """A run's structure: its steps (leaf paths, in order), each block's children (``""``
    is the root) and its parallel groups. Make one with :meth:`of`."""

    steps: tuple[str, ...]
    children: Mapping[str, tuple[str, ...]]
    groups: frozenset[str]

    @classmethod
    def of(cls, steps: Iterable[str], groups: Iterable[str]) -> Shape:
        """The shape of a run from its step paths (in the transcript's order) and the paths
        of its parallel groups (``DefaultStepRecorder.groups``)."""
        leaves = tuple(dict.fromkeys(steps))
        children: dict[str, dict[str, None]] = {"": {}}
        for step in leaves:
            parent = ""
            for part in step.split("/"):
                here = f"{parent}/{part}" if parent else part
                children.setdefault(parent, {})[here] = None
                parent = here
        shape = cls(leaves, {k: tuple(v) for k, v in children.items()}, frozenset(groups))
        inner = [s for s in leaves if s in shape.children]
        if inner:
            raise ValueError(f"step paths that are also blocks (steps under them): {inner}")
        return shape

    @property
    def roots(self) -> tuple[str, ...]:
        return self.children[""]

    def is_step(self, path: str) -> bool:
        """True for a step (a leaf), False for a block or scope with steps under it."""
        return path not in self.children

    def parallel(self, path: str) -> bool:
        return path in self.groups

    def stages(self) -> list[tuple[str, ...]]:
        """The roots, one stage after another; the image and title calls are one stage (at
        the position of the first of them), since the run starts them together."""
        out: list[tuple[str, ...]] = []
        together = tuple(r for r in self.roots if r in ALONGSIDE)
        for root in self.roots:
            if root not in ALONGSIDE:
                out.append((root,))
            elif root == together[0]:
                out.append(together)
        return out

    def work(self, path: str, latency: Mapping[str, float]) -> float:
        """The total latency of the calls at or under ``path``."""
        if self.is_step(path):
            return latency.get(path, 0.0)
        return sum(self.work(child, latency) for child in self.children[path])

    def cost(self, path: str, latency: Mapping[str, float], capacity: int | None = None) -> float:
        """The critical path of ``path``: a step costs its latency (0 for an action), a
        sequential block the sum of its children, a parallel group its slowest child.

        With ``capacity`` (``backend.max_concurrency``) a parallel group also takes at least
        its total work / capacity: no schedule runs more calls at once than the limiter
        allows."""
        if self.is_step(path):
            return latency.get(path, 0.0)
        kids = self.children[path]
        parts = [self.cost(child, latency, capacity) for child in kids]
        if not self.parallel(path):
            return sum(parts)
        bound = max(parts)
        if capacity is not None and len(parts) > capacity:
            bound = max(bound, self.work(path, latency) / capacity)
        return bound

    def run_cost(self, latency: Mapping[str, float], capacity: int | None = None) -> float:
        """The critical path of the whole run: its stages one after another, each the
        slowest of its roots (the image and title calls go together)."""
        return sum(
            max(self.cost(root, latency, capacity) for root in stage) for stage in self.stages()
        )
