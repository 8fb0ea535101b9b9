"""Krippendorff's alpha computed from its definition (Krippendorff 2011, "Computing
Krippendorff's Alpha-Reliability", University of Pennsylvania, sections C and D).

The ``krippendorff`` package on PyPI is GPL-3.0; this project is MIT, so alpha is written
here from the published formulas and tested against the paper's reference values.

``alpha = 1 - D_o / D_e`` where, over the *pairable* values only (values in units that hold
at least two values; a unit coded by one observer says nothing about agreement):

* ``D_o = 1/n * sum_u 1/(m_u - 1) * sum_{i != j in u} delta(v_i, v_j)`` is the observed
  disagreement (``m_u`` values in unit ``u``, ``n`` pairable values in all);
* ``D_e = 1/(n (n - 1)) * sum_{i != j} delta(v_i, v_j)`` over every ordered pair of pairable
  values is the disagreement expected by chance.

``delta`` is the metric: ``interval`` = ``(a - b)^2``, ``nominal`` = ``0 if a == b else 1``.
Missing data are simply absent values: a unit may hold any number of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal

AlphaMetric = Literal["interval", "nominal"]


def _sum_sq_differences(values: Sequence[float]) -> float:
    """``sum_{i != j} (v_i - v_j)^2`` over ordered pairs, = ``2 n sum (v - mean)^2``."""
    n = len(values)
    mean = sum(values) / n
    return 2.0 * n * sum((v - mean) ** 2 for v in values)


def _sum_mismatches(values: Sequence[float]) -> float:
    """``sum_{i != j} [v_i != v_j]`` over ordered pairs: ``n^2 - sum_c n_c^2``."""
    n = len(values)
    return float(n * n - sum(c * c for c in Counter(values).values()))


def krippendorff_alpha(
    units: Iterable[Sequence[float]], metric: AlphaMetric = "interval"
) -> float | None:
    """Alpha over ``units``, each the values the observers gave one unit (missing values
    left out). ``None`` when it is undefined: fewer than two pairable values, or no
    variation at all among them (``D_e = 0``)."""
    if metric not in ("interval", "nominal"):
        raise ValueError(f"metric: got {metric!r}, must be 'interval' or 'nominal'")
    disagree = _sum_sq_differences if metric == "interval" else _sum_mismatches
    pairable = [list(u) for u in units if len(u) >= 2]
    n = sum(len(u) for u in pairable)
    if n < 2:
        return None
    observed = sum(disagree(u) / (len(u) - 1) for u in pairable) / n
    expected = disagree([v for u in pairable for v in u]) / (n * (n - 1))
    if expected == 0:
        return None
    return 1.0 - observed / expected
