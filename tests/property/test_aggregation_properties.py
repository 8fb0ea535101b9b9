"""Property tests of the panel's aggregations (``image_project.stages.scoring.aggregation``).

The contract under test: for any panel of 1..16 judges' scores (0..100) and weights in the
config's range (0..1000), every method

* does not depend on the judges' order (scores and weights permuted together);
* lies between the lowest and the highest score, and is that score when all agree;
* is a number rounded to 3 decimals, an ``int`` exactly when whole;
* is unchanged when every weight is multiplied by the same positive number;

and moreover ``weighted_median`` with equal weights is the plain median and ``mean`` with
equal weights is ``statistics.mean``; ``trimmed_mean`` with trim 0 is ``mean`` and otherwise
lies between the lowest and the highest KEPT score; raising one judge's score never lowers
``median``, ``weighted_median`` or ``mean``; a judge of weight 0 changes neither
``weighted_median`` nor ``mean``. A panel whose weights cannot form the number (they sum to
0 where used) raises ``ValueError``, never anything else.

Two documented limits of floating point shape the strategies: the properties that compare
two computations exactly (scaling, monotonicity) use weights with at most two decimals (what
a config holds) and scale by powers of two, which are exact; an arbitrary scale or equal
non-integer weights may move a 3-decimal result by one unit at a rounding tie, and that is
the tolerance those properties allow.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from image_project.config.models import MAX_JUDGES
from image_project.stages.scoring.aggregation import AGGREGATIONS, Method, aggregate_scores
from image_project.stages.scoring.judges import SCORE_MAX, SCORE_MIN

WEIGHTED: tuple[Method, ...] = ("weighted_median", "mean", "trimmed_mean")
MONOTONE: tuple[Method, ...] = ("median", "weighted_median", "mean")
ONE_UNIT = 0.001 + 1e-9
"""One unit of the 3rd decimal (and a hair for the float subtraction)."""

Panel = tuple[list[int], list[float], int]

scores_st = st.lists(st.integers(SCORE_MIN, SCORE_MAX), min_size=1, max_size=MAX_JUDGES)
any_weight = st.floats(0.0, 1000.0)
"""Any weight a config accepts (``judges[].weight``: 0..1000)."""
grid_weight = st.integers(0, 100_000).map(lambda k: k / 100)
"""A weight with at most two decimals: what a config realistically holds."""
power_of_two = st.integers(-10, 10).map(lambda k: 2.0**k)


@st.composite
def panels(
    draw: st.DrawFn,
    weights: st.SearchStrategy[float] = any_weight,
    *,
    positive_total: bool = True,
    scores: st.SearchStrategy[list[int]] = scores_st,
) -> Panel:
    """Scores, one weight per score (some weight positive unless ``positive_total`` is
    false) and a trim that leaves at least one score."""
    values = draw(scores)
    ws = draw(st.lists(weights, min_size=len(values), max_size=len(values)))
    if positive_total and not any(ws):
        ws[draw(st.integers(0, len(ws) - 1))] = draw(st.sampled_from([0.01, 1.0, 2.5, 1000.0]))
    trim = draw(st.integers(0, (len(values) - 1) // 2))
    return values, ws, trim


def outcome(
    scores: Sequence[int], weights: Sequence[float], method: Method, trim: int = 0
) -> int | float | str:
    """The aggregate, or ``"ValueError"`` when it cannot be formed (any other exception
    fails the test)."""
    try:
        return aggregate_scores(scores, weights, method=method, trim=trim)
    except ValueError as exc:
        assert type(exc) is ValueError
        return "ValueError"


def kept_weight(scores: Sequence[int], weights: Sequence[float], trim: int) -> float:
    """The weight left by ``trimmed_mean``: ties are broken by (score, weight)."""
    pairs = sorted(zip(scores, weights, strict=True))
    return math.fsum(w for _, w in pairs[trim : len(pairs) - trim])


def kept_scores(scores: Sequence[int], trim: int) -> list[int]:
    ordered = sorted(scores)
    return ordered[trim : len(ordered) - trim]


def median(scores: Sequence[int]) -> int | float:
    return aggregate_scores(scores, method="median")


# -- every method ------------------------------------------------------------------------


@pytest.mark.parametrize("method", AGGREGATIONS)
@given(panel=panels(positive_total=False), data=st.data())
@example(panel=([50, 50, 80, 90], [1.0, 3.0, 1.0, 1.0], 1), data=None)  # ties by weight
@example(panel=([10, 50, 90], [1.0, 0.0, 1.0], 1), data=None)  # trimmed weight is 0
def test_permuting_the_judges_changes_nothing(
    method: Method, panel: Panel, data: st.DataObject | None
) -> None:
    scores, weights, trim = panel
    expected = outcome(scores, weights, method, trim)
    orders = [list(reversed(range(len(scores))))]
    if data is not None:
        orders.append(data.draw(st.permutations(range(len(scores))), label="order"))
    for order in orders:
        permuted = outcome([scores[i] for i in order], [weights[i] for i in order], method, trim)
        assert permuted == expected
        assert type(permuted) is type(expected)


@pytest.mark.parametrize("method", AGGREGATIONS)
@given(panel=panels())
def test_result_lies_between_the_lowest_and_the_highest_score(method: Method, panel: Panel) -> None:
    scores, weights, trim = panel
    result = outcome(scores, weights, method, trim)
    if result == "ValueError":
        # only a trimmed mean whose kept judges all weigh 0
        assert method == "trimmed_mean" and kept_weight(scores, weights, trim) == 0
        return
    assert isinstance(result, int | float)
    assert min(scores) <= result <= max(scores)


@pytest.mark.parametrize("method", AGGREGATIONS)
@given(
    score=st.integers(SCORE_MIN, SCORE_MAX),
    panel=panels(scores=st.lists(st.just(0), min_size=1, max_size=MAX_JUDGES)),
)
def test_agreeing_judges_give_their_score(method: Method, score: int, panel: Panel) -> None:
    _, weights, trim = panel
    scores = [score] * len(weights)
    if method == "trimmed_mean" and kept_weight(scores, weights, trim) == 0:
        return
    result = aggregate_scores(scores, weights, method=method, trim=trim)
    assert result == score
    assert type(result) is int


@pytest.mark.parametrize("method", AGGREGATIONS)
@given(panel=panels(positive_total=False))
def test_result_is_rounded_to_three_decimals_and_an_int_when_whole(
    method: Method, panel: Panel
) -> None:
    scores, weights, trim = panel
    result = outcome(scores, weights, method, trim)
    if result == "ValueError":
        return
    assert isinstance(result, int | float)
    if isinstance(result, float):
        assert not result.is_integer()
        assert round(result, 3) == result
        assert math.isfinite(result)


@pytest.mark.parametrize("method", WEIGHTED)
@given(panel=panels(positive_total=False))
def test_weights_that_cannot_form_the_number_raise_value_error(
    method: Method, panel: Panel
) -> None:
    scores, weights, trim = panel
    used = kept_weight(scores, weights, trim) if method == "trimmed_mean" else sum(weights)
    result = outcome(scores, weights, method, trim)
    assert (result == "ValueError") == (used == 0)


@pytest.mark.parametrize("method", AGGREGATIONS)
@given(panel=panels(grid_weight), scale=power_of_two)
def test_scaling_every_weight_by_a_power_of_two_changes_nothing(
    method: Method, panel: Panel, scale: float
) -> None:
    scores, weights, trim = panel
    scaled = [w * scale for w in weights]
    assert outcome(scores, scaled, method, trim) == outcome(scores, weights, method, trim)


@pytest.mark.parametrize("method", AGGREGATIONS)
@given(panel=panels(grid_weight), scale=st.floats(1e-3, 1e3))
def test_scaling_every_weight_by_any_positive_number_changes_at_most_the_last_decimal(
    method: Method, panel: Panel, scale: float
) -> None:
    scores, weights, trim = panel
    expected = outcome(scores, weights, method, trim)
    result = outcome(scores, [w * scale for w in weights], method, trim)
    if method in ("median", "weighted_median") or expected == "ValueError":
        # the weighted median only compares sums of weights: its tolerance absorbs the scale
        assert result == expected
    else:
        assert isinstance(result, int | float) and isinstance(expected, int | float)
        assert abs(result - expected) <= ONE_UNIT


# -- weighted_median ---------------------------------------------------------------------


@given(scores=scores_st, weight=st.floats(1e-3, 1e3))
@example(scores=[10, 20, 30], weight=0.1)
@example(scores=[0, 1, 1], weight=1 / 3)
def test_weighted_median_with_equal_weights_is_the_median(scores: list[int], weight: float) -> None:
    result = aggregate_scores(scores, [weight] * len(scores), method="weighted_median")
    assert result == median(scores)
    assert type(result) is type(median(scores))
    assert aggregate_scores(scores, None, method="weighted_median") == median(scores)


@given(panel=panels(grid_weight), zeros=st.lists(st.integers(SCORE_MIN, SCORE_MAX), max_size=8))
def test_a_judge_of_weight_zero_changes_neither_weighted_median_nor_mean(
    panel: Panel, zeros: list[int]
) -> None:
    scores, weights, _ = panel
    more_scores = scores + zeros
    more_weights = weights + [0.0] * len(zeros)
    for method in ("weighted_median", "mean"):
        assert aggregate_scores(more_scores, more_weights, method=method) == aggregate_scores(
            scores, weights, method=method
        )


# -- mean --------------------------------------------------------------------------------


@given(scores=scores_st, weight=st.integers(1, 1000))
def test_mean_with_equal_whole_weights_is_the_statistics_mean(
    scores: list[int], weight: int
) -> None:
    expected = aggregate_scores(scores, method="mean")
    assert round(statistics.mean(scores), 3) == expected
    assert aggregate_scores(scores, [float(weight)] * len(scores), method="mean") == expected


@given(scores=scores_st, weight=st.floats(1e-3, 1e3))
@example(scores=[0] * 14 + [2, 77], weight=53.592454027512304)  # 4.9375: a rounding tie
def test_mean_with_any_equal_weights_is_the_statistics_mean_to_the_last_decimal(
    scores: list[int], weight: float
) -> None:
    result = aggregate_scores(scores, [weight] * len(scores), method="mean")
    assert abs(result - statistics.mean(scores)) <= 0.0005 + 1e-9


# -- trimmed_mean ------------------------------------------------------------------------


@given(panel=panels(positive_total=False))
def test_trimmed_mean_with_trim_zero_is_the_mean(panel: Panel) -> None:
    scores, weights, _ = panel
    assert outcome(scores, weights, "trimmed_mean", 0) == outcome(scores, weights, "mean")


@given(panel=panels(st.floats(1e-3, 1000.0)))
@example(panel=([0, 10, 50, 61, 90, 100], [9.0, 9.0, 1.0, 3.0, 9.0, 9.0], 2))
def test_trimmed_mean_lies_between_the_kept_scores(panel: Panel) -> None:
    scores, weights, trim = panel
    kept = kept_scores(scores, trim)
    result = aggregate_scores(scores, weights, method="trimmed_mean", trim=trim)
    assert min(kept) <= result <= max(kept)


@given(panel=panels(positive_total=False))
def test_trimmed_mean_with_too_large_a_trim_raises(panel: Panel) -> None:
    scores, weights, _ = panel
    too_large = (len(scores) + 1) // 2
    assert outcome(scores, weights, "trimmed_mean", too_large) == "ValueError"


# -- monotonicity ------------------------------------------------------------------------


@pytest.mark.parametrize("method", MONOTONE)
@given(panel=panels(grid_weight), data=st.data())
@example(panel=([0, 0, 2], [1.0, 1.0, 1.0], 0), data=None)
def test_raising_one_score_never_lowers_the_result(
    method: Method, panel: Panel, data: st.DataObject | None
) -> None:
    scores, weights, _ = panel
    if data is None:
        index, raise_by = 0, 1
    else:
        index = data.draw(st.integers(0, len(scores) - 1), label="judge")
        raise_by = data.draw(st.integers(1, SCORE_MAX - SCORE_MIN), label="by")
    raised = list(scores)
    raised[index] = min(SCORE_MAX, raised[index] + raise_by)
    before = aggregate_scores(scores, weights, method=method)
    after = aggregate_scores(raised, weights, method=method)
    assert after >= before
