"""Kendall's tau-b between two judges' scores of the same cards, from its definition.

For n items, over every pair of items: C concordant pairs (both judges order them the same
way), D discordant ones, T_x pairs tied by the first judge, T_y by the second (a pair tied by
both counts in each). With n0 = n(n-1)/2,

    tau_b = (C - D) / sqrt((n0 - T_x) (n0 - T_y)),

which is scipy.stats.kendalltau's default (tests/analysis/test_tau.py compares the two, and
checks published values). A few dozen cards make the O(n^2) loop instant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Tau-b of the paired values ``x`` and ``y``; None when it is undefined (fewer than two
    items, or every pair tied in one of them)."""
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length: {len(x)} and {len(y)}")
    concordant = discordant = tied_x = tied_y = 0
    for (x1, y1), (x2, y2) in combinations(zip(x, y, strict=True), 2):
        dx, dy = x1 - x2, y1 - y2
        if dx == 0:
            tied_x += 1
        if dy == 0:
            tied_y += 1
        if dx * dy > 0:
            concordant += 1
        elif dx * dy < 0:
            discordant += 1
    pairs = len(x) * (len(x) - 1) // 2
    denominator = (pairs - tied_x) * (pairs - tied_y)
    if denominator == 0:
        return None
    return (concordant - discordant) / math.sqrt(denominator)
