"""The panel's aggregations (``median``, ``weighted_median``, ``mean``, ``trimmed_mean``) by
worked example, their errors, and how the score table and the selector use the aggregate.

(The properties every method keeps: ``tests/property/test_aggregation_properties.py``.)"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from image_project.record.scoring import ScoreRow
from image_project.stages.scoring.aggregation import (
    AGGREGATIONS,
    Method,
    aggregate_scores,
    as_number,
)
from image_project.stages.scoring.selection import aggregate, select

WEIGHTED: tuple[Method, ...] = ("weighted_median", "mean", "trimmed_mean")


def agg(
    scores: Sequence[int],
    weights: Sequence[float] | None = None,
    *,
    method: Method,
    trim: int = 0,
) -> int | float:
    return aggregate_scores(scores, weights, method=method, trim=trim)


def assert_number(value: int | float, expected: int | float) -> None:
    """``value == expected`` and of the same type (an ``int`` when whole, else a float)."""
    assert value == expected
    assert type(value) is type(expected), (value, type(value).__name__)


# -- as_number ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (80, 80),
        (80.0, 80),
        (65.5, 65.5),
        (77.33333, 77.333),
        (1.6666, 1.667),
        (2 / 3, 0.667),
        (79.9996, 80),
        (0.0004, 0),
    ],
)
def test_as_number_rounds_to_three_decimals_and_is_int_when_whole(
    x: float, expected: int | float
) -> None:
    assert_number(as_number(x), expected)


# -- median ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([70], 70),
        ([50, 90, 70], 70),
        ([60, 71], 65.5),
        ([10, 20, 30, 99], 25),
        ([0, 100, 100, 0, 100], 100),
        ([13, 0, 100, 14], 13.5),
    ],
)
def test_median_odd_and_even_counts(scores: list[int], expected: int | float) -> None:
    assert_number(agg(scores, method="median"), expected)


def test_median_is_the_default_method() -> None:
    assert_number(aggregate_scores([60, 71]), 65.5)


@pytest.mark.parametrize("weights", [[100.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0], None])
def test_median_ignores_the_weights_even_all_zero(weights: list[float] | None) -> None:
    assert_number(agg([10, 20, 90], weights, method="median"), 20)


# -- weighted_median ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "weights", "expected"),
    [
        # equal weights: the plain median, odd and even
        ([10, 20, 90], [1, 1, 1], 20),
        ([10, 20, 30, 99], [1, 1, 1, 1], 25),
        ([60, 71], [2.5, 2.5], 65.5),
        # half of 5 is 2.5: reached by the lowest score alone, or only at the highest
        ([10, 20, 90], [3, 1, 1], 10),
        ([10, 20, 90], [1, 1, 3], 90),
        ([90, 20, 10], [3, 1, 1], 90),
        # exactly half at a boundary: the mean of the two scores there
        ([10, 20, 90], [1, 1, 2], 55),
        ([10, 20, 90, 40], [1, 1, 1, 1], 30),
        # a zero weight is skipped, also as the upper score of a boundary
        ([10, 30, 90], [1, 0, 1], 50),
        ([10, 20, 50, 90], [1, 1, 0, 2], 55),
        ([10, 20, 90], [0, 0, 1], 90),
        ([10, 20, 90], [0, 5, 0], 20),
        # float weights that sum to exactly half only up to rounding (0.1 + 0.2 != 0.3)
        ([10, 20, 30], [0.1, 0.2, 0.3], 25),
        ([70, 80], [0.1, 0.2], 80),
        # a non-whole result keeps its .5, a whole one is an int
        ([61, 70], [1, 1], 65.5),
        ([62, 70], [1, 1], 66),
    ],
)
def test_weighted_median_examples(
    scores: list[int], weights: list[float], expected: int | float
) -> None:
    assert_number(agg(scores, weights, method="weighted_median"), expected)


def test_weighted_median_without_weights_is_the_median() -> None:
    assert_number(agg([10, 20, 30, 99], method="weighted_median"), 25)
    assert_number(agg([50, 90, 70], method="weighted_median"), 70)


def test_weighted_median_ties_do_not_depend_on_the_judges_order() -> None:
    # the two 50s carry different weights; which one comes first must not matter
    assert_number(agg([50, 50, 80], [1, 2, 3], method="weighted_median"), 65)
    assert_number(agg([50, 80, 50], [2, 3, 1], method="weighted_median"), 65)
    assert_number(agg([80, 50, 50], [3, 1, 2], method="weighted_median"), 65)


# -- mean --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "weights", "expected"),
    [
        ([10, 20, 90], None, 40),
        ([70], None, 70),
        ([70, 80, 81], None, 77),
        ([70, 80, 82], None, 77.333),
        ([60, 71], None, 65.5),
        ([1, 2], [1, 2], 1.667),
        ([0, 1, 1], None, 0.667),
        ([10, 20, 30], [1, 2, 3], 23.333),
        ([10, 20, 90], [1, 1, 0], 15),
        ([10, 20, 90], [0, 0, 7.5], 90),
        ([50, 100], [0.25, 0.75], 87.5),
        ([40, 80], [3, 1], 50),
    ],
)
def test_mean_examples(
    scores: list[int], weights: list[float] | None, expected: int | float
) -> None:
    assert_number(agg(scores, weights, method="mean"), expected)


# -- trimmed_mean ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "weights", "trim", "expected"),
    [
        # trim 0 is the (weighted) mean
        ([10, 20, 90], None, 0, 40),
        ([10, 20, 30], [1, 2, 3], 0, 23.333),
        # trim 1: the lowest and the highest go
        ([10, 90, 50], None, 1, 50),
        ([100, 50, 10, 70, 60], None, 1, 60),
        ([10, 20, 30, 40], None, 1, 25),
        ([0, 70, 80, 82, 100], None, 1, 77.333),
        ([10, 50, 60, 70, 100], [5, 1, 1, 2, 5], 1, 62.5),
        # trim 2
        ([10, 50, 60, 70, 100], None, 2, 60),
        ([0, 10, 50, 61, 90, 100], None, 2, 55.5),
        ([0, 10, 50, 61, 90, 100], [9, 9, 1, 3, 9, 9], 2, 58.25),
        ([0, 10, 50, 61, 90, 100], [1, 1, 0, 3, 1, 1], 2, 61),
        # the lowest of tied scores by weight is dropped at the bottom, the heaviest at the top
        ([50, 50, 80, 90], [1, 3, 1, 1], 1, 57.5),
        ([50, 80, 50, 90], [3, 1, 1, 1], 1, 57.5),
        ([10, 40, 60, 60], [1, 1, 4, 1], 1, 50),
        ([10, 10, 60, 90], [4, 1, 1, 1], 1, 20),
        # a weight-0 judge still takes a place in the trimming order (docs/panel.md, Weights)
        ([20, 70, 80, 90], [0, 1, 1, 1], 1, 75),
        ([70, 80, 90], [1, 1, 1], 1, 80),
    ],
)
def test_trimmed_mean_examples(
    scores: list[int], weights: list[float] | None, trim: int, expected: int | float
) -> None:
    assert_number(agg(scores, weights, method="trimmed_mean", trim=trim), expected)


def test_trim_is_ignored_by_the_other_methods() -> None:
    scores = [0, 10, 50, 61, 90, 100]
    for method in ("median", "weighted_median", "mean"):
        assert agg(scores, method=method, trim=2) == agg(scores, method=method, trim=0)


def test_every_method_is_listed() -> None:
    assert AGGREGATIONS == ("median", "weighted_median", "mean", "trimmed_mean")


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", AGGREGATIONS)
def test_no_scores_is_an_error(method: Method) -> None:
    with pytest.raises(ValueError, match="no scores"):
        agg([], method=method)
    with pytest.raises(ValueError, match="no scores"):
        agg([], [], method=method)


@pytest.mark.parametrize("method", AGGREGATIONS)
@pytest.mark.parametrize("weights", [[1.0], [1.0, 1.0, 1.0, 1.0], []])
def test_weights_of_another_length_are_an_error(method: Method, weights: list[float]) -> None:
    with pytest.raises(ValueError, match=rf"3 scores but {len(weights)} weights"):
        agg([10, 20, 30], weights, method=method, trim=1)


@pytest.mark.parametrize("method", AGGREGATIONS)
@pytest.mark.parametrize("bad", [-1.0, -1e-9, float("nan"), float("inf"), float("-inf")])
def test_negative_or_non_finite_weight_is_an_error(method: Method, bad: float) -> None:
    with pytest.raises(ValueError, match="finite and >= 0"):
        agg([10, 20, 30], [1.0, bad, 1.0], method=method, trim=1)


@pytest.mark.parametrize(
    ("count", "trim"),
    [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (1, 5), (3, -1)],
)
def test_trim_that_leaves_no_score_is_an_error(count: int, trim: int) -> None:
    with pytest.raises(ValueError, match=rf"trim {trim} leaves no score of {count}"):
        agg(list(range(count)), method="trimmed_mean", trim=trim)


def test_largest_trim_that_leaves_a_score() -> None:
    assert_number(agg([1, 5, 9], method="trimmed_mean", trim=1), 5)
    assert_number(agg([1, 5, 8, 9], method="trimmed_mean", trim=1), 6.5)
    assert_number(agg([0, 1, 5, 9, 100], method="trimmed_mean", trim=2), 5)


@pytest.mark.parametrize("method", WEIGHTED)
def test_weights_summing_to_zero_are_an_error_where_used(method: Method) -> None:
    with pytest.raises(ValueError, match="sum to 0"):
        agg([10, 20, 30], [0.0, 0.0, 0.0], method=method)
    with pytest.raises(ValueError, match="sum to 0"):
        agg([10, 20, 30], [0.0, 0.0, 0.0], method=method, trim=1)


def test_trimmed_mean_whose_kept_weights_sum_to_zero_is_an_error() -> None:
    # the only weighted judges are the lowest and the highest, both trimmed away
    with pytest.raises(ValueError, match="sum to 0"):
        agg([10, 50, 90], [1.0, 0.0, 1.0], method="trimmed_mean", trim=1)
    assert_number(agg([10, 50, 90], [1.0, 0.0, 1.0], method="mean"), 50)


def test_unknown_method_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown aggregation 'mode'"):
        aggregate_scores([1, 2], method=cast(Any, "mode"))


# -- the score table ---------------------------------------------------------------------

# j3 weighs 5: its scores decide the weighted median whenever the two others disagree with it
PANEL = {
    "j1": {"A": 90, "B": 60, "C": 71},
    "j2": {"A": 90, "B": 60, "C": 70},
    "j3": {"A": 10, "B": 60, "C": 82},
}
WEIGHTS = {"j1": 1.0, "j2": 1.0, "j3": 5.0}


def by_id(rows: Sequence[ScoreRow]) -> dict[str, ScoreRow]:
    return {r.id: r for r in rows}


def test_median_rows_keep_the_median_as_the_aggregate() -> None:
    rows = aggregate(["A", "B", "C"], PANEL, weights=WEIGHTS)
    assert [r.id for r in rows] == ["A", "B", "C"]
    for row in rows:
        assert row.aggregate == row.median
        assert row.effective_score == row.aggregate
    assert [(r.median, r.spread, r.n_ok) for r in rows] == [(90, 80, 3), (60, 0, 3), (71, 12, 3)]


def test_weighted_rows_keep_the_median_next_to_the_aggregate() -> None:
    rows = by_id(aggregate(["A", "B", "C"], PANEL, method="weighted_median", weights=WEIGHTS))
    assert (rows["A"].median, rows["A"].aggregate) == (90, 10)
    assert (rows["B"].median, rows["B"].aggregate) == (60, 60)
    assert (rows["C"].median, rows["C"].aggregate) == (71, 82)
    assert dict(rows["A"].judge_scores) == {"j1": 90, "j2": 90, "j3": 10}
    assert (rows["A"].spread, rows["A"].n_ok) == (80, 3)

    mean = by_id(aggregate(["A", "B", "C"], PANEL, method="mean", weights=WEIGHTS))
    assert (mean["A"].median, mean["A"].aggregate) == (90, 32.857)
    assert_number(mean["C"].aggregate, 78.714)

    trimmed = by_id(
        aggregate(["A", "B", "C"], PANEL, method="trimmed_mean", weights=WEIGHTS, trim=1)
    )
    # the lowest and the highest score go (j3's 10 for A, j3's 82 for C): the middle remains
    assert (trimmed["A"].median, trimmed["A"].aggregate) == (90, 90)
    assert (trimmed["C"].median, trimmed["C"].aggregate) == (71, 71)


def test_median_of_even_panel_is_kept_as_a_float_next_to_an_int_aggregate() -> None:
    rows = aggregate(
        ["A"],
        {"a": {"A": 60}, "b": {"A": 71}},
        method="weighted_median",
        weights={"a": 3.0, "b": 1.0},
    )
    assert_number(rows[0].median, 65.5)
    assert_number(rows[0].aggregate, 60)


def test_weights_default_to_one_per_judge() -> None:
    without = aggregate(["A", "B", "C"], PANEL, method="mean")
    partial = aggregate(["A", "B", "C"], PANEL, method="mean", weights={"j1": 1.0})
    assert [r.aggregate for r in without] == [r.aggregate for r in partial] == [63.333, 60, 74.333]
    # a weight for a judge that did not answer changes nothing
    extra = aggregate(["A", "B", "C"], PANEL, method="mean", weights={"gone": 9.0})
    assert [r.aggregate for r in extra] == [63.333, 60, 74.333]


def test_effective_score_subtracts_the_penalty_from_the_aggregate() -> None:
    rows = by_id(
        aggregate(
            ["A", "B", "C"],
            PANEL,
            {"A": 4.0, "B": 0.5, "C": 100.0},
            method="weighted_median",
            weights=WEIGHTS,
        )
    )
    assert (rows["A"].aggregate, rows["A"].novelty_penalty, rows["A"].effective_score) == (
        10,
        4.0,
        6.0,
    )
    assert (rows["B"].aggregate, rows["B"].effective_score) == (60, 59.5)
    # never below 0
    assert (rows["C"].aggregate, rows["C"].effective_score) == (82, 0.0)
    # the median plays no part in the effective score
    assert rows["A"].median - rows["A"].novelty_penalty != rows["A"].effective_score


def test_effective_score_of_a_fractional_aggregate_is_rounded() -> None:
    (row,) = aggregate(
        ["A"], {"a": {"A": 70}, "b": {"A": 80}, "c": {"A": 82}}, {"A": 0.1}, method="mean"
    )
    assert row.aggregate == 77.333
    assert row.effective_score == 77.233
    assert row.novelty_penalty == 0.1


def test_missing_penalty_is_zero() -> None:
    rows = by_id(aggregate(["A", "B", "C"], PANEL, {"A": 5.0}, method="mean", weights=WEIGHTS))
    assert rows["B"].novelty_penalty == 0.0
    assert rows["B"].effective_score == rows["B"].aggregate == 60


def test_score_row_rejects_an_effective_score_off_the_aggregate() -> None:
    with pytest.raises(ValueError, match="effective_score"):
        ScoreRow(
            id="A",
            judge_scores={"j": 90},
            median=90,
            aggregate=10,
            spread=0,
            n_ok=1,
            novelty_penalty=0.0,
            effective_score=90.0,
        )


def test_table_errors_from_the_aggregation_propagate() -> None:
    with pytest.raises(ValueError, match="sum to 0"):
        aggregate(["A"], {"a": {"A": 1}, "b": {"A": 2}}, method="mean", weights={"a": 0, "b": 0})
    with pytest.raises(ValueError, match="trim 1 leaves no score of 2"):
        aggregate(["A"], {"a": {"A": 1}, "b": {"A": 2}}, method="trimmed_mean", trim=1)
    # the median does not use the weights
    (row,) = aggregate(["A"], {"a": {"A": 1}, "b": {"A": 2}}, weights={"a": 0, "b": 0})
    assert row.aggregate == 1.5


# -- the selector follows the configured aggregate ---------------------------------------


@pytest.mark.parametrize(
    ("method", "ranking"),
    [
        ("median", ("A", "C", "B")),
        ("weighted_median", ("C", "B", "A")),
        ("mean", ("C", "B", "A")),
        ("trimmed_mean", ("A", "C", "B")),
    ],
)
def test_select_ranks_by_the_configured_aggregate(method: Method, ranking: tuple[str, ...]) -> None:
    rows = aggregate(["A", "B", "C"], PANEL, method=method, weights=WEIGHTS, trim=1)
    selection = select(rows, exploration_rate=0.0, run_seed=7)
    assert selection.mode == "exploit"
    assert selection.ranking == ranking
    assert selection.selected_id == ranking[0]
    chosen = by_id(rows)[ranking[0]]
    assert selection.selected_score == chosen.aggregate


def test_median_and_weighted_median_pick_different_cards() -> None:
    ids = ["A", "B"]
    panel = {judge: {i: scores[i] for i in ids} for judge, scores in PANEL.items()}
    by_median = select(aggregate(ids, panel, weights=WEIGHTS), exploration_rate=0.0, run_seed=1)
    by_weight = select(
        aggregate(ids, panel, method="weighted_median", weights=WEIGHTS),
        exploration_rate=0.0,
        run_seed=1,
    )
    assert (by_median.selected_id, by_median.selected_score) == ("A", 90)
    assert (by_weight.selected_id, by_weight.selected_score) == ("B", 60)


def test_select_breaks_effective_ties_by_the_aggregate_then_the_id() -> None:
    # A and B reach the same effective score, A through a larger aggregate and penalty
    panel = {"a": {"A": 70, "B": 65, "C": 65}, "b": {"A": 70, "B": 65, "C": 65}}
    rows = aggregate(["C", "B", "A"], panel, {"A": 5.0}, method="mean")
    assert [r.effective_score for r in rows] == [65, 65, 65]
    selection = select(rows, exploration_rate=0.0, run_seed=3)
    assert selection.ranking == ("A", "B", "C")


# -- the worked examples of docs/aggregation.md --------------------------------------------

AGGREGATION_MD = Path(__file__).resolve().parents[3] / "docs" / "aggregation.md"


def _worked_examples() -> list[list[str]]:
    """The rows of the table under "**Worked examples**" in docs/aggregation.md, as cells."""
    text = AGGREGATION_MD.read_text(encoding="utf-8")
    after = text.split("**Worked examples**", 1)[1]
    lines = itertools.dropwhile(lambda line: not line.startswith("|"), after.splitlines())
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines))
    table = [[cell.strip() for cell in line.strip("|").split("|")] for line in rows[2:]]
    if not table:
        raise AssertionError("no worked-examples table found in docs/aggregation.md")
    return table


@pytest.mark.parametrize("cells", _worked_examples(), ids=lambda cells: " / ".join(cells[:2]))
def test_the_worked_examples_of_the_docs_are_what_the_code_computes(cells: list[str]) -> None:
    scores = [int(s) for s in cells[0].split(",")]
    weights = [float(w) for w in cells[1].split(",")]
    methods: tuple[Method, ...] = ("median", "weighted_median", "mean")
    for method, cell in zip(methods, cells[2:5], strict=True):
        assert agg(scores, weights, method=method) == float(cell), (method, cell)
    trimmed = cells[5]
    if "leaves none" in trimmed:
        with pytest.raises(ValueError):
            agg(scores, weights, method="trimmed_mean", trim=1)
        return
    claims = re.findall(r"([\d.]+) \(`trim: (\d+)`\)", trimmed)
    assert claims, trimmed
    for value, trim in claims:
        assert agg(scores, weights, method="trimmed_mean", trim=int(trim)) == float(value)
