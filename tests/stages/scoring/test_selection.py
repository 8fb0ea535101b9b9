"""Aggregation (median of the ok judges, spread, novelty penalty) and the seeded
epsilon-greedy selector."""

from __future__ import annotations

import random

import pytest

from image_project.record.scoring import ScoreRow
from image_project.seeding import derive_seed
from image_project.stages.scoring.cards import card_ids
from image_project.stages.scoring.selection import aggregate, select

# -- aggregate -------------------------------------------------------------------------


def test_odd_judge_count_uses_middle_value() -> None:
    rows = aggregate(
        ["A", "B"],
        {"j1": {"A": 50, "B": 10}, "j2": {"A": 90, "B": 20}, "j3": {"A": 70, "B": 15}},
    )
    assert [r.id for r in rows] == ["A", "B"]
    a, b = rows
    assert a.median == 70
    assert isinstance(a.median, int)
    assert a.spread == 40
    assert a.n_ok == 3
    assert dict(a.judge_scores) == {"j1": 50, "j2": 90, "j3": 70}
    assert b.median == 15
    assert b.spread == 10
    assert dict(b.judge_scores) == {"j1": 10, "j2": 20, "j3": 15}


def test_even_judge_count_uses_mean_of_middle_two() -> None:
    rows = aggregate(["A"], {"j1": {"A": 60}, "j2": {"A": 71}})
    assert rows[0].median == 65.5
    assert rows[0].spread == 11
    assert rows[0].n_ok == 2


def test_even_judge_count_integral_mean_is_int() -> None:
    rows = aggregate(["A"], {"j1": {"A": 10}, "j2": {"A": 20}, "j3": {"A": 30}, "j4": {"A": 99}})
    assert rows[0].median == 25
    assert isinstance(rows[0].median, int)
    assert rows[0].spread == 89


def test_single_judge() -> None:
    (row,) = aggregate(["A"], {"only": {"A": 42}})
    assert (row.median, row.spread, row.n_ok) == (42, 0, 1)


def test_rows_follow_ids_order() -> None:
    rows = aggregate(["C", "A", "B"], {"j": {"A": 1, "B": 2, "C": 3}})
    assert [r.id for r in rows] == ["C", "A", "B"]
    assert [r.median for r in rows] == [3, 1, 2]


@pytest.mark.parametrize(
    ("median_scores", "penalty", "effective"),
    [
        ((10, 10), 25.0, 0.0),
        ((80, 80), 8.0, 72.0),
        ((60, 71), 14.0, 51.5),
        ((50, 50), 0.0, 50.0),
    ],
)
def test_novelty_penalty_applied_with_floor_zero(
    median_scores: tuple[int, int], penalty: float, effective: float
) -> None:
    s1, s2 = median_scores
    (row,) = aggregate(["A"], {"j1": {"A": s1}, "j2": {"A": s2}}, {"A": penalty})
    assert row.novelty_penalty == penalty
    assert row.effective_score == effective
    assert row.model_dump()["effective_score"] == effective


def test_penalties_default_to_zero_for_unlisted_ids() -> None:
    rows = aggregate(["A", "B"], {"j": {"A": 40, "B": 60}}, {"B": 5.0})
    assert [r.novelty_penalty for r in rows] == [0.0, 5.0]
    assert [r.effective_score for r in rows] == [40.0, 55.0]


def test_row_model_dump() -> None:
    (row,) = aggregate(["A"], {"j1": {"A": 60}, "j2": {"A": 71}}, {"A": 3.5})
    assert row.model_dump() == {
        "id": "A",
        "judge_scores": {"j1": 60, "j2": 71},
        "median": 65.5,
        "aggregate": 65.5,
        "spread": 11,
        "n_ok": 2,
        "novelty_penalty": 3.5,
        "effective_score": 62.0,
    }


def test_judge_missing_an_id_is_named() -> None:
    with pytest.raises(ValueError, match=r"judge 'j2' .*missing \['B'\]"):
        aggregate(["A", "B"], {"j1": {"A": 1, "B": 2}, "j2": {"A": 1}})


def test_judge_with_unknown_id_is_named() -> None:
    with pytest.raises(ValueError, match=r"judge 'j1' .*unknown \['Z'\]"):
        aggregate(["A"], {"j1": {"A": 1, "Z": 2}})


def test_no_judges_raises() -> None:
    with pytest.raises(ValueError, match="no ok judge results"):
        aggregate(["A"], {})


def test_no_ids_raises() -> None:
    with pytest.raises(ValueError, match="no candidates"):
        aggregate([], {"j": {}})


# -- select ----------------------------------------------------------------------------


def _row(card_id: str, median: float, penalty: float = 0.0) -> ScoreRow:
    """A row as :func:`aggregate` builds it (``effective_score`` is a field it computes)."""
    return ScoreRow(
        id=card_id,
        judge_scores={"j": int(median)},
        median=median,
        aggregate=median,
        spread=0,
        n_ok=1,
        novelty_penalty=penalty,
        effective_score=max(0.0, round(median - penalty, 3)),
    )


def test_row_helper_matches_aggregate() -> None:
    (row,) = aggregate(["A"], {"j": {"A": 80}}, {"A": 8.0})
    assert _row("A", 80, penalty=8.0) == row


def _rows(n: int) -> list[ScoreRow]:
    """``n`` rows with distinct scores, best last (so ranking reverses the input)."""
    return [_row(card_id, 10 + i) for i, card_id in enumerate(card_ids(n))]


@pytest.mark.parametrize("rate", [0.0, 0.3, 1.0])
def test_select_is_deterministic(rate: float) -> None:
    rows = _rows(9)
    assert select(rows, exploration_rate=rate, run_seed=77) == select(
        rows, exploration_rate=rate, run_seed=77
    )


@pytest.mark.parametrize("seed", range(20))
def test_rate_zero_always_exploits_the_top(seed: int) -> None:
    rows = [_row("A", 50), _row("B", 90, penalty=30), _row("C", 70), _row("D", 65)]
    sel = select(rows, exploration_rate=0.0, run_seed=seed)
    assert sel.mode == "exploit"
    assert sel.selected_id == "C"
    assert sel.selected_score == 70
    assert sel.ranking == ("C", "D", "B", "A")
    assert sel.explore_roll is None
    assert sel.exploration_rate == 0.0


def test_exploit_tie_broken_by_median_then_id() -> None:
    rows = [
        _row("D", 70),  # effective 70, median 70
        _row("C", 70),  # effective 70, median 70
        _row("B", 80, penalty=10),  # effective 70, median 80 -> wins the tie
        _row("A", 60),
    ]
    sel = select(rows, exploration_rate=0.0, run_seed=1)
    assert sel.ranking == ("B", "C", "D", "A")
    assert sel.selected_id == "B"
    assert sel.selected_score == 80


def test_exploit_tie_broken_by_id() -> None:
    rows = [_row("C", 70), _row("B", 70), _row("A", 20)]
    sel = select(rows, exploration_rate=0.0, run_seed=3)
    assert sel.selected_id == "B"
    assert sel.ranking == ("B", "C", "A")


def test_effective_floor_in_ranking() -> None:
    # both floored to 0 effective; higher median wins
    rows = [_row("A", 5, penalty=25), _row("B", 20, penalty=25)]
    sel = select(rows, exploration_rate=0.0, run_seed=0)
    assert sel.ranking == ("B", "A")


@pytest.mark.parametrize(("n", "pool_size"), [(1, 1), (2, 2), (6, 2), (8, 2), (9, 3), (24, 6)])
def test_explore_pool_size(n: int, pool_size: int) -> None:
    rows = _rows(n)
    sel = select(rows, exploration_rate=1.0, run_seed=5)
    assert sel.mode == "explore"
    ranked = tuple(r.id for r in reversed(rows))
    assert sel.ranking == ranked
    assert sel.explore_pool == ranked[:pool_size]
    assert sel.selected_id in sel.explore_pool
    assert sel.explore_roll is not None


def test_explore_across_seeds_stays_in_pool_and_varies() -> None:
    rows = _rows(24)
    picks = set()
    pool = None
    for seed in range(200):
        sel = select(rows, exploration_rate=1.0, run_seed=seed)
        assert sel.mode == "explore"
        pool = sel.explore_pool
        assert sel.selected_id in pool
        picks.add(sel.selected_id)
    assert pool == ("X", "W", "V", "U", "T", "S")
    assert len(picks) > 1
    assert picks <= set(pool)


def test_explore_weighted_by_effective_score() -> None:
    rows = [_row("A", 0), _row("B", 90), _row("C", 0), _row("D", 0)]
    for seed in range(100):
        sel = select(rows, exploration_rate=1.0, run_seed=seed)
        assert sel.explore_pool == ("B", "A")
        assert sel.mode == "explore"
        assert sel.selected_id == "B"


def test_explore_with_all_zero_weights_is_uniform_in_pool() -> None:
    rows = [_row("A", 10, penalty=20), _row("B", 5, penalty=20), _row("C", 0), _row("D", 0)]
    picks = set()
    for seed in range(100):
        sel = select(rows, exploration_rate=1.0, run_seed=seed)
        assert sel.explore_pool == ("A", "B")
        assert sel.explore_roll is not None
        assert sel.selected_id == sel.explore_pool[int(sel.explore_roll * 2)]
        picks.add(sel.selected_id)
    assert picks == {"A", "B"}


@pytest.mark.parametrize("seed", [0, 1, 42, 123456])
def test_rolls_come_from_the_derived_selection_seed(seed: int) -> None:
    rng = random.Random(derive_seed(seed, "selection"))
    expected_roll = rng.random()
    expected_pick = rng.random()
    explore = select(_rows(6), exploration_rate=1.0, run_seed=seed)
    assert explore.exploration_roll == expected_roll
    assert explore.explore_roll == expected_pick
    exploit = select(_rows(6), exploration_rate=0.0, run_seed=seed)
    assert exploit.exploration_roll == expected_roll


def test_mode_follows_roll_versus_rate() -> None:
    rows = _rows(6)
    for seed in range(50):
        roll = random.Random(derive_seed(seed, "selection")).random()
        sel = select(rows, exploration_rate=0.5, run_seed=seed)
        assert sel.mode == ("explore" if roll < 0.5 else "exploit")
        if sel.mode == "exploit":
            assert sel.selected_id == "F"


def test_weighted_pick_matches_the_second_roll() -> None:
    rows = [_row("A", 30), _row("B", 10), _row("C", 0), _row("D", 0)]
    for seed in range(50):
        sel = select(rows, exploration_rate=1.0, run_seed=seed)
        assert sel.explore_roll is not None
        assert sel.selected_id == ("A" if sel.explore_roll < 0.75 else "B")


def test_selection_detail() -> None:
    explore = select(_rows(9), exploration_rate=1.0, run_seed=5)
    assert explore.detail.model_dump(mode="json") == {
        "ranking": list(explore.ranking),
        "explore_pool": ["I", "H", "G"],
        "explore_roll": explore.explore_roll,
    }
    assert explore.explore_roll is not None
    exploit = select(_rows(2), exploration_rate=0.0, run_seed=5)
    assert exploit.detail.model_dump(mode="json") == {
        "ranking": ["B", "A"],
        "explore_pool": ["B", "A"],
        "explore_roll": None,
    }


def test_duplicate_ids_raise() -> None:
    with pytest.raises(ValueError, match=r"duplicate candidate ids \['A'\]"):
        select([_row("A", 1), _row("B", 2), _row("A", 3)], exploration_rate=0.0, run_seed=1)


def test_empty_rows_raise() -> None:
    with pytest.raises(ValueError, match="empty candidate set"):
        select([], exploration_rate=0.0, run_seed=1)


@pytest.mark.parametrize("rate", [-0.1, 1.5])
def test_rate_out_of_range_raises(rate: float) -> None:
    with pytest.raises(ValueError, match="exploration_rate must be in"):
        select(_rows(2), exploration_rate=rate, run_seed=1)


def test_a_row_written_before_aggregations_reads_its_median_as_the_aggregate() -> None:
    row = ScoreRow.model_validate(
        {
            "id": "A",
            "judge_scores": {"j1": 60, "j2": 71},
            "median": 65.5,
            "spread": 11,
            "n_ok": 2,
            "novelty_penalty": 3.5,
            "effective_score": 62.0,
        }
    )
    assert row.aggregate == 65.5


def test_the_worked_example_of_the_docs_explores_and_picks_f() -> None:
    """docs/aggregation.md, "The selector": seed 7, rate 0.15, effective scores A 85, F 80, D 79,
    B 77, C 73, E 69: roll 0.0444 explores, the pool is A and F, pick 0.6505 lands in F's
    [0.515, 1), so F is selected with its aggregate 80; a rate under the roll exploits A."""
    scores = {"A": 85, "B": 77, "C": 73, "D": 79, "E": 69, "F": 80}
    rows = [_row(card_id, score) for card_id, score in scores.items()]
    sel = select(rows, exploration_rate=0.15, run_seed=7)
    assert sel.ranking == ("A", "F", "D", "B", "C", "E")
    assert sel.exploration_roll == pytest.approx(0.0444, abs=5e-5)
    assert sel.mode == "explore"
    assert sel.explore_pool == ("A", "F")
    assert sel.explore_roll == pytest.approx(0.6505, abs=5e-5)
    assert (sel.selected_id, sel.selected_score) == ("F", 80)
    assert select(rows, exploration_rate=0.04, run_seed=7).selected_id == "A"
