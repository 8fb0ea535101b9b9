"""The ``pairwise`` judging protocol: comparisons in a seeded schedule, scores fitted from
the outcomes with Bradley-Terry.

A pairwise judge is asked, for every pair of the round's cards in both orientations (each
card once shown first), which of the two is better by its rubric (``{"better": <id>}``, the
id an enum of the two), the comparisons in a seeded order (:func:`pair_schedule`). Asking
both ways cancels the position a small model tends to pick (Qwen2.5-Coder 0.5B chose the card
shown first in 9 of 9 comparisons of one run): a judge that follows the position splits
every pair 1-1 and its cards tie. The
outcomes are fitted with the Bradley-Terry model by Hunter's MM iteration
(:func:`bradley_terry`), each pair given ``PRIOR`` of a win either way so that a card that
never won keeps a finite strength, and turned into 0-100 scores: the fitted probability that
the card beats a card of average strength (:func:`fitted_scores`). The degeneracy gate reads
those scores like any judge's; a judge that always picks the card shown first (or always
the second), or whose share of first-shown winners a binomial test sets apart from one half,
is degenerate too, the reason recorded in its error (:func:`position_bias`).

Cost: ``n (n - 1)`` calls per judge per round for ``n`` cards (3 cards: 6; 6 cards: 30),
each with two cards in its prompt and a one-id answer.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from image_project.engine.output import JsonOutput, literal_of
from image_project.seeding import rng_for

PRIOR = 0.5
"""Virtual wins each card of a pair gets against the other before the outcomes count."""
ITERATIONS = 200
POSITION_ALPHA = 0.05
"""The significance at which a pairwise judge's share of first-shown (or second-shown)
winners counts as following the position (:func:`position_bias`)."""
Outcome = tuple[str, str, str]
"""One comparison: (the card shown first, the card shown second, the winner)."""


def pair_schedule(run_seed: int, ids: Sequence[str], *labels: str | int) -> list[tuple[str, str]]:
    """Every pair of ``ids`` in both orientations, in a seeded order (the seed path
    ``"pairwise", *labels``: the judge's labels)."""
    pairs = list(itertools.permutations(ids, 2))
    rng_for(run_seed, "pairwise", *labels).shuffle(pairs)
    return pairs


@functools.lru_cache(maxsize=1024)
def _pair_model(first: str, second: str) -> type[BaseModel]:
    return create_model(
        "PairAnswer",
        __config__=ConfigDict(title="idea_comparison", strict=True, extra="forbid"),
        better=(literal_of([first, second]), ...),
    )


def pair_output(first: str, second: str) -> JsonOutput[str]:
    """A comparison's output: ``{"better": "<first>" | "<second>"}``; the value is the id."""

    def check(answer: Any) -> str:
        return str(answer.better)

    return JsonOutput(_pair_model(first, second), check=check, refusals=True)


def bradley_terry(ids: Sequence[str], outcomes: Sequence[Outcome]) -> dict[str, float]:
    """Each card's Bradley-Terry strength (geometric mean 1) fitted from ``outcomes`` by
    Hunter's MM iteration, every compared pair given :data:`PRIOR` wins each way."""
    wins = {(a, b): 0.0 for a in ids for b in ids if a != b}
    for first, second, winner in outcomes:
        loser = second if winner == first else first
        wins[winner, loser] += 1.0
    for pair in {frozenset((first, second)) for first, second, _ in outcomes}:
        a, b = sorted(pair)
        wins[a, b] += PRIOR
        wins[b, a] += PRIOR
    strength = dict.fromkeys(ids, 1.0)
    for _ in range(ITERATIONS):
        new = {}
        for i in ids:
            total = sum(wins[i, j] for j in ids if j != i)
            denominator = sum(
                (wins[i, j] + wins[j, i]) / (strength[i] + strength[j]) for j in ids if j != i
            )
            new[i] = total / denominator if denominator > 0 else strength[i]
        centre = math.exp(sum(math.log(v) for v in new.values() if v > 0) / len(new))
        strength = {i: v / centre for i, v in new.items()}
    return strength


def fitted_scores(ids: Sequence[str], outcomes: Sequence[Outcome]) -> dict[str, int]:
    """0-100 scores in ``ids`` order: the fitted probability (in percent) that each card
    beats a card of average strength."""
    strength = bradley_terry(ids, outcomes)
    return {i: round(100 * strength[i] / (strength[i] + 1.0)) for i in ids}


def binomial_two_sided(k: int, n: int) -> float:
    """The exact two-sided binomial p-value of ``k`` successes in ``n`` fair trials: the
    probability of an outcome at most as likely as ``k``."""
    pmf = [math.comb(n, i) / 2**n for i in range(n + 1)]
    return float(min(1.0, sum(p for p in pmf if p <= pmf[k] * (1 + 1e-9))))


def position_bias(outcomes: Sequence[Outcome]) -> str | None:
    """Why the outcomes follow the position shown rather than the cards, or None.

    The rule, with 2 or more comparisons: every winner the card shown first (or every one
    the second); or the share of first-shown winners so far from one half that the exact
    two-sided binomial test against a judge that ignores the position gives
    p < :data:`POSITION_ALPHA`. Each pair is asked both ways, so a judge that follows the
    cards picks the first-shown card in exactly half the comparisons whatever its
    preferences; only contradicted pairs move the share (3 cards, 6 comparisons: 6 of 6;
    4 cards, 12 comparisons: 10 or more of 12)."""
    n = len(outcomes)
    if n < 2:
        return None
    first = sum(1 for o in outcomes if o[2] == o[0])
    for wins, name in ((first, "first"), (n - first, "second")):
        if wins == n:
            return f"every comparison chose the card shown {name}"
    p = binomial_two_sided(first, n)
    if p < POSITION_ALPHA:
        name, wins = ("first", first) if 2 * first > n else ("second", n - first)
        return (
            f"the card shown {name} won {wins} of {n} comparisons (two-sided binomial "
            f"p={p:.3f} < {POSITION_ALPHA} against a judge that ignores the position)"
        )
    return None
