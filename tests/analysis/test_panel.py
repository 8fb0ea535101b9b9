"""The judge-panel figures on hand-made records whose answers are known."""

from __future__ import annotations

import io

import pytest

from image_project.analysis.panel import panel_stats
from image_project.analysis.table import format_panel_table, stats_command
from tests.support.records import judge, run


def test_status_counts_and_ok_only_distributions() -> None:
    records = [
        run(1, [judge("a", {"A": 10, "B": 20, "C": 30}), judge("b", None, status="refused")]),
        run(2, [judge("a", None, status="parse_error"), judge("b", {"A": 50, "B": 50, "C": 80})]),
        run(3, [judge("a", None, status="error"), judge("b", None, status="refused")]),
        run(4, scoring=False),
        run(5, [judge("a", {"A": 40, "B": 40, "C": 40})], failed=True),
    ]
    stats = panel_stats(records)
    assert (stats.runs, stats.scoring_runs, stats.failed_runs) == (5, 4, 1)
    a, b = stats.judges
    assert (a.judge, b.judge) == ("a", "b")
    assert (a.counts.ok, a.counts.parse_error, a.counts.refused, a.counts.error) == (2, 1, 0, 1)
    assert (b.counts.ok, b.counts.parse_error, b.counts.refused, b.counts.error) == (1, 0, 2, 0)
    assert a.counts.total == 4 and b.counts.total == 3
    assert a.scores is not None and b.scores is not None
    assert sorted(a.scores.scores) == [10, 20, 30, 40, 40, 40]
    assert (a.scores.mean, a.scores.median, a.scores.minimum, a.scores.maximum) == (
        30.0,
        35.0,
        10,
        40,
    )
    assert b.scores.scores == (50, 50, 80) and b.scores.mean == 60.0


def test_a_judge_that_favours_the_first_card_shows_position_bias() -> None:
    # Each run shows the cards to "eager" in a different order; it always gives the first
    # one 90 and the others 40. "fair" sees the same orders and scores the cards themselves.
    quality = {"A": 70, "B": 50, "C": 30}
    orders = [("A", "B", "C"), ("B", "C", "A"), ("C", "A", "B")]
    records = []
    for n, order in enumerate(orders):
        eager = {card: 90 if i == 0 else 40 for i, card in enumerate(order)}
        records.append(
            run(n, [judge("eager", eager, order=order), judge("fair", quality, order=order)])
        )
    eager_stats, fair_stats = panel_stats(records).judges
    assert [(p.position, p.n, p.mean) for p in eager_stats.positions] == [
        (1, 3, 90.0),
        (2, 3, 40.0),
        (3, 3, 40.0),
    ]
    assert eager_stats.position_bias == pytest.approx(90 - 170 / 3)
    # Against the other judge's score for the same card: +40 when first, -10 otherwise.
    assert [(p.offset, p.n_offset) for p in eager_stats.positions] == [
        (40.0, 3),
        (-10.0, 3),
        (-10.0, 3),
    ]
    # Rotating orders: every card is seen once at each position, so the fair judge's
    # position means are all its overall mean.
    assert [p.mean for p in fair_stats.positions] == [50.0, 50.0, 50.0]
    assert fair_stats.position_bias == 0.0
    assert [p.offset for p in fair_stats.positions] == [-40.0, 10.0, 10.0]


def test_judges_that_agree_have_tau_one_and_reversed_judges_minus_one() -> None:
    records = [
        run(
            n,
            [
                judge("a", {"A": 10 + n, "B": 50, "C": 90}),
                judge("b", {"A": 1, "B": 2, "C": 3 + n}),
                judge("c", {"A": 90, "B": 50, "C": 10}),
            ],
        )
        for n in range(3)
    ]
    stats = panel_stats(records)
    taus = {(p.judge_a, p.judge_b): (p.tau, p.runs, p.undefined) for p in stats.pairs}
    assert taus == {
        ("a", "b"): (1.0, 3, 0),
        ("a", "c"): (-1.0, 3, 0),
        ("b", "c"): (-1.0, 3, 0),
    }


def test_tau_uses_common_cards_and_skips_undefined_runs() -> None:
    records = [
        # Only A and B scored by both: concordant -> 1.
        run(1, [judge("a", {"A": 1, "B": 2, "C": 3}), judge("b", {"A": 5, "B": 9})]),
        # Reversed on all three -> -1.
        run(2, [judge("a", {"A": 1, "B": 2, "C": 3}), judge("b", {"A": 3, "B": 2, "C": 1})]),
        # b gives every card the same score: tau undefined for this run.
        run(3, [judge("a", {"A": 1, "B": 2, "C": 3}), judge("b", {"A": 7, "B": 7, "C": 7})]),
        # b refused: the run does not count for the pair.
        run(4, [judge("a", {"A": 1, "B": 2, "C": 3}), judge("b", None, status="refused")]),
    ]
    (pair,) = panel_stats(records).pairs
    assert (pair.tau, pair.runs, pair.undefined, pair.per_run) == (0.0, 2, 1, (1.0, -1.0))


def test_panel_alpha_is_one_for_identical_judges_and_counts_units() -> None:
    same = {"A": 10, "B": 60, "C": 90}
    records = [run(n, [judge("a", same), judge("b", same), judge("c", same)]) for n in range(2)]
    agreement = panel_stats(records).agreement
    assert (agreement.alpha, agreement.units, agreement.values) == (1.0, 6, 18)


def test_panel_alpha_handles_missing_judges_as_missing_data() -> None:
    # The reference data of Krippendorff (2011) as one run: 12 cards, 4 judges, gaps = the
    # judge did not score that card. The panel's alpha is the published interval value.
    rows = {
        "j1": [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        "j2": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        "j3": [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        "j4": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    }
    cards = [f"c{i:02d}" for i in range(12)]
    judges = [
        judge(j, {c: v for c, v in zip(cards, values, strict=True) if v is not None}, order=cards)
        for j, values in rows.items()
    ]
    agreement = panel_stats([run(1, judges, cards=cards)]).agreement
    assert agreement.alpha is not None and round(agreement.alpha, 3) == 0.849
    assert agreement.units == 11


def test_no_scoring_runs_give_an_empty_panel_and_a_clear_table() -> None:
    stats = panel_stats([run(1, scoring=False), run(2, scoring=False, failed=True)])
    assert stats.judges == () and stats.pairs == () and stats.agreement.alpha is None
    text = format_panel_table(stats)
    assert "over 2 runs (0 with scoring, 1 failed)" in text
    assert "no run in this set had scoring on" in text


def test_the_table_shows_counts_positions_pairs_and_alpha() -> None:
    records = [
        run(1, [judge("strict", {"A": 10, "B": 20, "C": 30}), judge("warm", {"A": 11, "B": 21})]),
        run(2, [judge("strict", None, status="refused"), judge("warm", {"A": 5, "B": 6, "C": 7})]),
    ]
    out = io.StringIO()
    assert stats_command(records, out) == 0
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if line.startswith("judge ") and "refused" in line)
    assert header.split() == [
        "judge",
        "model",
        "ok",
        "parse_error",
        "degenerate",
        "refused",
        "error",
        "scores",
        "mean",
        "median",
        "sd",
        "min",
        "max",
        "bias#1",
        "monotone",
    ]
    strict = next(line for line in lines if line.startswith("strict "))
    assert strict.split()[:8] == ["strict", "m-1", "1", "0", "0", "1", "0", "3"]
    # Position #1: strict's 10 for A, 1 below warm's 11; #3: C, which only strict scored.
    assert any(
        line.split() == ["strict", "10.0", "(-1.0)", "20.0", "(-1.0)", "30.0"] for line in lines
    )
    pair = next(line for line in lines if line.startswith("strict ~ warm"))
    assert pair.split()[3:] == ["1.000", "1", "0"]
    assert any("Krippendorff's alpha (interval) = " in line for line in lines)


def test_stats_command_without_runs_says_so() -> None:
    out = io.StringIO()
    assert stats_command([], out) == 1
    assert out.getvalue() == "No runs to summarise.\n"


def test_answers_monotone_in_the_order_shown_are_counted_per_judge() -> None:
    """The answers a small real model got through the degeneracy gate: 75, 85, 90 and
    75, 60, 50 in the order shown. Counted (a signal in ``runs stats`` and the review's
    panel page), not rejected; two cards, or a non-monotone answer, do not count."""
    records = [
        run(1, [judge("j", {"C": 75, "A": 85, "B": 90}), judge("k", {"A": 40, "B": 90})]),
        run(2, [judge("j", {"B": 75, "C": 60, "A": 50}), judge("k", {"A": 1, "B": 2})]),
        run(3, [judge("j", {"A": 70, "B": 90, "C": 80})]),
    ]
    stats = {j.judge: j for j in panel_stats(records).judges}
    m = stats["j"].monotone
    assert (m.rising, m.falling, m.answers, m.cell()) == (1, 1, 3, "2/3")
    assert stats["k"].monotone.cell() == "-"
    out = io.StringIO()
    stats_command(records, out)
    row = next(line for line in out.getvalue().splitlines() if line.startswith("j "))
    assert row.split()[-1] == "2/3"
