"""Evidence that can fail: the README's Evidence claims, re-measured on every full check in
bench/quality.py's simulated world (the real run_generation and selection code), each with a
paired test at its own confidence level, not against a tuned threshold.

* A median of 3 judges whose errors are independent (judge correlation 0) has lower regret
  than one judge: paired over the same run seeds (the same cards, and the same noise for the
  judge both configurations share), one-sided paired t test at 99%.
* Showing each judge its own shuffled order removes the first-position advantage that one
  shared order gives: the share of judges whose first-shown card wins is lower with the
  product's shuffled orders than with the simulated shared order, paired over the same run
  seeds, one-sided paired t test at 95%.
* Novelty lowers the share of runs whose chosen card carries a liked motif: the same
  histories of consecutive runs with novelty off and on (window 25, the product default),
  paired by history, one-sided paired t test at 95%.

Seeded (the bench's seed 2026): the same code gives the same p values every time. The
sizes are what the three claims need at those levels in the default world, not tuned to
pass: the README's full bench reports the same effects with intervals.
"""

from __future__ import annotations

import argparse

import anyio
from scipy import stats

from tests.support.quality_bench import LIKES, quality

RUN_SEEDS = 300
HISTORIES = 12
RUNS_PER_HISTORY = 30


def _args() -> argparse.Namespace:
    return quality.parse_args(
        [
            *("--silent", "--seeds", str(RUN_SEEDS), "--judge-corr", "0"),
            *("--variety-seeds", str(HISTORIES), "--variety-runs", str(RUNS_PER_HISTORY)),
        ]
    )


def _paired(a: list[float | None], b: list[float | None]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def test_a_panel_beats_one_judge_and_shuffled_orders_remove_the_first_position_advantage() -> None:
    """One test for both panel claims, so that the runs they share are made once (pytest-xdist
    would give two tests each its own copy of a module fixture). Both are checked and every
    failing claim is reported."""
    args = _args()
    params = quality.world_params(args)
    configurations = (
        quality.Panel("one judge", 1, "median"),
        quality.Panel("median of 3", 3, "median"),
        quality.Panel("median of 3, shared order (sim)", 3, "median", shared_order=True),
    )

    async def measure() -> dict[str, quality.PanelResult]:
        return {p.name: await quality.panel_runs(args, LIKES, p, params) for p in configurations}

    panels = anyio.run(measure)
    failures = []
    med3, one = _paired(panels["median of 3"].regrets, panels["one judge"].regrets)
    regret = stats.ttest_rel(med3, one, alternative="less")
    if not regret.pvalue < 0.01:
        failures.append(
            f"median of 3 (judge correlation 0) no longer beats one judge at 99%: mean regret "
            f"{_mean(med3):.2f} vs {_mean(one):.2f} over {len(med3)} paired runs, "
            f"p = {regret.pvalue:.3g}"
        )
    shuffled, shared = _paired(
        panels["median of 3"].firsts, panels["median of 3, shared order (sim)"].firsts
    )
    first = stats.ttest_rel(shuffled, shared, alternative="less")
    if not first.pvalue < 0.05:
        failures.append(
            "shuffled orders no longer remove the first-position advantage at 95%: first-shown "
            f"win share {_mean(shuffled):.3f} shuffled vs {_mean(shared):.3f} with one shared "
            f"order over {len(shuffled)} paired runs, p = {first.pvalue:.3g}"
        )
    assert not failures, "\n".join(failures)


def test_novelty_lowers_the_share_of_chosen_cards_with_a_liked_motif() -> None:
    args = _args()
    params = quality.world_params(args)
    greedy, novelty = quality.STRATEGIES[0], quality.STRATEGIES[2]
    assert (greedy.novelty, novelty.novelty, novelty.exploration) == (False, True, False)

    async def measure(strategy: quality.Strategy) -> list[float]:
        return [
            (await quality._history(args, params, LIKES, strategy, h)).liked
            for h in range(HISTORIES)
        ]

    off, on = anyio.run(measure, greedy), anyio.run(measure, novelty)
    test = stats.ttest_rel(on, off, alternative="less")
    assert test.pvalue < 0.05, (
        "novelty no longer lowers the liked-motif share at 95%: "
        f"{sum(on) / len(on):.3f} with novelty vs {sum(off) / len(off):.3f} without over "
        f"{len(on)} paired histories, p = {test.pvalue:.3g}"
    )
