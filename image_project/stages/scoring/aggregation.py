"""How the panel's scores of one card become one number. Pure code, in this one place.

``prompt.scoring.aggregation``:

``median``           the median of the ok judges' scores (the mean of the middle two for an
                     even count); weights are ignored. The default, taken of the scores after
                     ``normalise: robust`` (the product's defaults are the config model's,
                     :class:`image_project.config.ScoringConfig`; bench/decision.py chose them).
``weighted_median``  the score at which half the total weight is reached, going up from the
                     lowest; exactly half at a boundary averages the two scores there, so with
                     equal weights it is the plain median.
``mean``             the weighted mean (the plain mean with equal weights).
``trimmed_mean``     drop the ``trim`` lowest and ``trim`` highest scores, then the weighted
                     mean of the rest (``2 * trim`` must be smaller than the number of scores).

Ties are broken by (score, weight), never by the judges' order, so every method is invariant
under a permutation of the judges. Results are rounded to 3 decimals and are an ``int`` when
whole (``80``, not ``80.0``), as the first wave's medians were.

``prompt.scoring.normalise`` (:func:`normalise_scores`) first puts every judge on a common
scale within the round, so that a judge who scores everything 80..95 and one who uses 20..90
weigh alike in a mean and meet in a median:

``none``     the judges' own scores.
``zscores``  each judge's scores minus its mean over the round's cards, over its standard
             deviation (population; a judge who gave every card one score gets 0 for all).
``robust``   (the default) like ``zscores``, but each judge's spread ``s`` is shrunk
             towards the panel's median spread ``m`` before dividing: ``sqrt((K m^2 +
             (n - 1) s^2) / (K + n - 1))`` for ``n`` cards, ``K`` = :data:`SHRINK_CARDS`.
             A near-constant judge (80, 79, 81) is divided by about half the panel's
             spread, not its own, so its one-point differences stay small instead of
             becoming a full vote. With two cards every judge's own z-scores are +-1 (a
             majority vote) or 0 (a tie); here the spread is mostly the panel's, so the
             distances count, and a judge's two-card tie is no preference (0 for both), not
             a degenerate answer. A judge who gave every card one score gets 0 for all.
``ranks``    each judge's ranks of the round's cards (1 = lowest, ties averaged), z-scored
             the same way: only the order a judge gives counts, not its distances.

A judge who gave every card one score states no preference; after a normalisation (not with
``none``) it is left out of the aggregate of that round (:func:`aggregate_panel`; its
normalised scores are still recorded), so with two cards one judge's honest tie neither
votes for the middle nor pulls a median to a tie the card ids then break. With three or more
cards such an answer is degenerate and never reaches the aggregate.

The standardised value ``z`` is put back on the panel's scale as ``M + S * z``, ``M`` the
mean of the judges' means and ``S`` the mean of their standard deviations (those above 0) in
the round, and rounded to 3 decimals, so aggregates stay in score points next to the novelty
penalty, and the recorded normalised scores reproduce the aggregate exactly.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Literal, TypeAlias

Method: TypeAlias = Literal["median", "weighted_median", "mean", "trimmed_mean"]
AGGREGATIONS: tuple[Method, ...] = ("median", "weighted_median", "mean", "trimmed_mean")
Normalisation: TypeAlias = Literal["none", "ranks", "zscores", "robust"]
NORMALISATIONS: tuple[Normalisation, ...] = ("none", "ranks", "zscores", "robust")
SHRINK_CARDS = 4
"""How many cards' worth of weight the panel's median spread has in ``robust``'s spread
(fixed by reasoning, not fitted to a bench: half the weight of a judge's own spread at
five cards, so a judge's own spread dominates from about ten cards on)."""


def as_number(x: float) -> int | float:
    """``x`` rounded to 3 decimals, as an ``int`` when whole."""
    rounded = round(x, 3)
    return int(rounded) if float(rounded).is_integer() else rounded


def aggregate_scores(
    scores: Sequence[float],
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


def _fractions(pairs: Sequence[tuple[float, float]]) -> list[tuple[Fraction, Fraction]]:
    """The pairs as exact fractions (a weight as the decimal it was written as: 0.1 is 1/10),
    so sums and comparisons are exact and no float rounding can make the result depend on
    the judges' order or on a weight's scale."""
    return [(Fraction(repr(score)), Fraction(repr(weight))) for score, weight in pairs]


def _total(pairs: Sequence[tuple[Fraction, Fraction]]) -> Fraction:
    total = sum((weight for _, weight in pairs), Fraction(0))
    if total <= 0:
        raise ValueError("the judges' weights sum to 0; no weighted score can be formed")
    return total


def _weighted_mean(pairs: Sequence[tuple[float, float]]) -> float:
    exact = _fractions(pairs)
    total = _total(exact)
    return float(sum((score * weight for score, weight in exact), Fraction(0)) / total)


def _weighted_median(pairs: Sequence[tuple[float, float]]) -> float:
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


def _ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, lowest first, ties given the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def _standardised(values: Sequence[float], panel_spread: float | None = None) -> list[float]:
    """``(v - mean) / sd`` (population sd); all 0 when the sd is 0. With ``panel_spread``
    (``robust``), the sd is first shrunk towards it (module docstring)."""
    mean = statistics.fmean(values)
    sd = statistics.pstdev(values)
    if sd == 0:
        return [0.0] * len(values)
    if panel_spread is not None:
        n = len(values)
        sd = math.sqrt((SHRINK_CARDS * panel_spread**2 + (n - 1) * sd**2) / (SHRINK_CARDS + n - 1))
    return [(v - mean) / sd for v in values]


def normalise_scores(
    ids: Sequence[str], judge_scores: Mapping[str, Mapping[str, int]], how: Normalisation
) -> dict[str, dict[str, int | float]]:
    """Every judge's scores of ``ids`` on the panel's common scale (see the module
    docstring): ``{judge: {id: score}}``, the scores unchanged for ``none``. Raises
    ``ValueError`` for an unknown ``how`` or a judge that misses an id."""
    if how not in NORMALISATIONS:
        raise ValueError(f"unknown normalisation {how!r}; one of {', '.join(NORMALISATIONS)}")
    raw = {j: [float(scores[i]) for i in ids] for j, scores in judge_scores.items()}
    if how == "none" or not raw:
        return {j: {i: scores[i] for i in ids} for j, scores in judge_scores.items()}
    means = [statistics.fmean(v) for v in raw.values()]
    spreads = [statistics.pstdev(v) for v in raw.values()]
    centre = statistics.fmean(means)
    positive = [s for s in spreads if s > 0]
    scale = statistics.fmean(positive) if positive else 0.0
    panel_spread = statistics.median(spreads) if how == "robust" else None
    out: dict[str, dict[str, int | float]] = {}
    for judge, values in raw.items():
        z = _standardised(_ranks(values) if how == "ranks" else values, panel_spread)
        out[judge] = {i: as_number(centre + scale * v) for i, v in zip(ids, z, strict=True)}
    return out


def aggregate_panel(
    ids: Sequence[str],
    judge_scores: Mapping[str, Mapping[str, int]],
    *,
    method: Method = "median",
    normalise: Normalisation = "none",
    weights: Mapping[str, float] | None = None,
    trim: int = 0,
) -> tuple[dict[str, dict[str, int | float]], dict[str, int | float]]:
    """Every judge's scores of ``ids`` on the common scale (:func:`normalise_scores`) and
    each card's aggregate by ``method`` of them (``weights`` by judge id, default 1): the
    judges who gave every card one score are left out of the aggregate after a
    normalisation (module docstring), unless that leaves too few scores (none, or none for a
    trim). Raises ``ValueError`` as :func:`aggregate_scores` does."""
    common = normalise_scores(ids, judge_scores, normalise)
    voting = list(judge_scores)
    if normalise != "none":
        varied = [j for j, scores in judge_scores.items() if len({scores[i] for i in ids}) > 1]
        if len(varied) > 2 * trim:
            voting = varied
    w = [(weights or {}).get(j, 1.0) for j in voting]
    values = {
        i: aggregate_scores([common[j][i] for j in voting], w, method=method, trim=trim)
        for i in ids
    }
    return common, values
