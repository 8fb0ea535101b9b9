"""How the panel's scores of one card become one number. Pure code, in this one place.

``prompt.scoring.aggregation``:

``median``           the median of the ok judges' scores (the mean of the middle two for an
                     even count); weights are ignored. The product's default contract.
``weighted_median``  the score at which half the total weight is reached, going up from the
                     lowest; exactly half at a boundary averages the two scores there, so with
                     equal weights it is the plain median.
``mean``             the weighted mean (the plain mean with equal weights).
``trimmed_mean``     drop the ``trim`` lowest and ``trim`` highest scores, then the weighted
                     mean of the rest (``2 * trim`` must be smaller than the number of scores).

Ties are broken by (score, weight), never by the judges' order, so every method is invariant
under a permutation of the judges. Results are rounded to 3 decimals and are an ``int`` when
whole (``80``, not ``80.0``), as the first wave's medians were.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from fractions import Fraction
from typing import Literal, TypeAlias

__all__ = ["AGGREGATIONS", "Method", "aggregate_scores", "as_number"]

Method: TypeAlias = Literal["median", "weighted_median", "mean", "trimmed_mean"]
AGGREGATIONS: tuple[Method, ...] = ("median", "weighted_median", "mean", "trimmed_mean")


def as_number(x: float) -> int | float:
    """``x`` rounded to 3 decimals, as an ``int`` when whole."""
    rounded = round(x, 3)
    return int(rounded) if float(rounded).is_integer() else rounded


def aggregate_scores(
    scores: Sequence[int],
    weights: Sequence[float] | None = None,
    *,
    method: Method = "median",
    trim: int = 0,
) -> int | float:
    """One number from the ok judges' ``scores`` (and their ``weights``; default all 1).

    Raises ``ValueError`` for no scores, a weight list of another length, a negative weight,
    a trim that leaves no score, or weights that sum to 0 where they are used.
    """
    if not scores:
        raise ValueError("no scores to aggregate")
    w = [1.0] * len(scores) if weights is None else [float(x) for x in weights]
    if len(w) != len(scores):
        raise ValueError(f"{len(scores)} scores but {len(w)} weights")
    if any(x < 0 or not math.isfinite(x) for x in w):
        raise ValueError(f"weights must be finite and >= 0, got {w}")
    pairs = sorted(zip(scores, w, strict=True))
    if method == "median":
        return as_number(statistics.median(scores))
    if method == "weighted_median":
        return as_number(_weighted_median(pairs))
    if method == "mean":
        return as_number(_weighted_mean(pairs))
    if method == "trimmed_mean":
        if trim < 0 or 2 * trim >= len(pairs):
            raise ValueError(f"trim {trim} leaves no score of {len(pairs)} (2*trim must be <)")
        return as_number(_weighted_mean(pairs[trim : len(pairs) - trim]))
    raise ValueError(f"unknown aggregation {method!r}; one of {', '.join(AGGREGATIONS)}")


def _fractions(pairs: Sequence[tuple[int, float]]) -> list[tuple[Fraction, Fraction]]:
    """The pairs as exact fractions (a weight as the decimal it was written as: 0.1 is 1/10),
    so sums and comparisons are exact and no float rounding can make the result depend on
    the judges' order or on a weight's scale."""
    return [(Fraction(score), Fraction(repr(weight))) for score, weight in pairs]


def _total(pairs: Sequence[tuple[Fraction, Fraction]]) -> Fraction:
    total = sum((weight for _, weight in pairs), Fraction(0))
    if total <= 0:
        raise ValueError("the judges' weights sum to 0; no weighted score can be formed")
    return total


def _weighted_mean(pairs: Sequence[tuple[int, float]]) -> float:
    exact = _fractions(pairs)
    total = _total(exact)
    return float(sum((score * weight for score, weight in exact), Fraction(0)) / total)


def _weighted_median(pairs: Sequence[tuple[int, float]]) -> float:
    exact = _fractions(pairs)
    half = _total(exact) / 2
    cumulative = Fraction(0)
    for index, (score, weight) in enumerate(exact):
        cumulative += weight
        if cumulative == half:
            later = [s for s, w in exact[index + 1 :] if w > 0]
            return float((score + later[0]) / 2) if later else float(score)
        if cumulative > half:
            return float(score)
    return float(exact[-1][0])
