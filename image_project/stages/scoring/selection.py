"""The score table and the seeded epsilon-greedy selector. Pure code.

Per card: each ok judge's score, their ``median`` of the judges' own scores (the mean of
the middle two for an even count), the ``aggregate`` by ``prompt.scoring.aggregation``
(:mod:`.aggregation`; the product's default is the median after ``normalise: robust``, set
in the config model, not here) of the scores after ``prompt.scoring.normalise``
(``normalised``, each judge's score on the panel's common scale, recorded unless ``none``),
``spread`` (max - min of the judges' own scores), ``n_ok``.

Selector (SPEC "Black-box scoring", step 6): ``effective = max(0, aggregate - penalty)``;
candidates ordered by (-effective, -aggregate, id); ``roll = Random(derive_seed(seed,
"selection")).random()``; ``roll < exploration_rate`` explores (a pick weighted by effective
score among the top ``max(2, ceil(N / 4))``, drawn with the same generator's next number;
uniform when all those weights are 0), else exploits (the top). Everything is recorded.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from image_project.record.scoring import ScoreRow, SelectionDetail
from image_project.seeding import rng_for
from image_project.stages.scoring.aggregation import (
    Method,
    Normalisation,
    aggregate_panel,
    as_number,
)


def aggregate(
    ids: Sequence[str],
    judge_scores: Mapping[str, Mapping[str, int]],
    penalties: Mapping[str, float] | None = None,
    *,
    method: Method = "median",
    weights: Mapping[str, float] | None = None,
    trim: int = 0,
    normalise: Normalisation = "none",
) -> list[ScoreRow]:
    """One row per id in ``ids`` order from the ok judges' ``{judge_id: {id: score}}``: the
    median of their own scores, the ``aggregate`` by ``method`` (this function's defaults,
    ``median`` of ``none``, are the plain median, not the product's default) (:mod:`.aggregation`; ``weights`` by judge id,
    default 1) of the scores normalised by ``normalise`` (recorded per judge in the row's
    ``normalised`` unless ``none``), the spread and the effective score.

    Raises ``ValueError`` when there are no judges, a judge misses or adds an id, or the
    aggregation cannot be formed (weights summing to 0, a trim leaving no score).
    """
    if not judge_scores:
        raise ValueError("no ok judge results to aggregate")
    if not ids:
        raise ValueError("no candidates to aggregate")
    known = set(ids)
    for judge_id, scores in judge_scores.items():
        missing = [i for i in ids if i not in scores]
        unknown = sorted(set(scores) - known)
        if missing or unknown:
            raise ValueError(
                f"judge {judge_id!r} scores do not match the candidates: missing {missing}, "
                f"unknown {unknown} (of {len(ids)} candidates)"
            )
    penalties = penalties or {}
    common, aggregates = aggregate_panel(
        ids, judge_scores, method=method, normalise=normalise, weights=weights, trim=trim
    )
    rows = []
    for card_id in ids:
        per_judge = {j: scores[card_id] for j, scores in judge_scores.items()}
        values = list(per_judge.values())
        normalised = {j: scores[card_id] for j, scores in common.items()}
        value = aggregates[card_id]
        penalty = float(penalties.get(card_id, 0.0))
        rows.append(
            ScoreRow(
                id=card_id,
                judge_scores=per_judge,
                median=as_number(statistics.median(values)),
                aggregate=value,
                spread=max(values) - min(values),
                n_ok=len(values),
                normalised=None if normalise == "none" else normalised,
                novelty_penalty=penalty,
                effective_score=max(0.0, round(value - penalty, 3)),
            )
        )
    return rows


def explore_pool_size(n: int) -> int:
    return min(n, max(2, math.ceil(n / 4)))


@dataclass(frozen=True)
class Selection:
    selected_id: str
    selected_score: float
    mode: Literal["exploit", "explore"]
    exploration_rate: float
    exploration_roll: float
    ranking: tuple[str, ...]
    explore_pool: tuple[str, ...]
    explore_roll: float | None

    @property
    def detail(self) -> SelectionDetail:
        """The derived values behind the choice (the transcript's ``selection``)."""
        return SelectionDetail(
            ranking=self.ranking, explore_pool=self.explore_pool, explore_roll=self.explore_roll
        )


def select(rows: Sequence[ScoreRow], *, exploration_rate: float, run_seed: int) -> Selection:
    """The seeded epsilon-greedy choice (see the module docstring)."""
    if not rows:
        raise ValueError("cannot select from an empty candidate set")
    ids = [r.id for r in rows]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"duplicate candidate ids {dupes} among {len(ids)} candidates")
    if not 0.0 <= exploration_rate <= 1.0:
        raise ValueError(f"exploration_rate must be in [0, 1], got {exploration_rate}")
    ranked = sorted(rows, key=lambda r: (-r.effective_score, -r.aggregate, r.id))
    rng = rng_for(run_seed, "selection")
    roll = rng.random()
    pool = ranked[: explore_pool_size(len(ranked))]
    if roll < exploration_rate:
        weights = [r.effective_score for r in pool]
        total = sum(weights)
        pick = rng.random()
        if total <= 0:
            chosen = pool[min(int(pick * len(pool)), len(pool) - 1)]
        else:
            acc = 0.0
            chosen = pool[-1]
            for row, w in zip(pool, weights, strict=True):
                acc += w / total
                if pick < acc:
                    chosen = row
                    break
        mode: Literal["exploit", "explore"] = "explore"
        explore_roll: float | None = pick
    else:
        chosen, mode, explore_roll = ranked[0], "exploit", None
    return Selection(
        selected_id=chosen.id,
        selected_score=chosen.aggregate,
        mode=mode,
        exploration_rate=exploration_rate,
        exploration_roll=roll,
        ranking=tuple(r.id for r in ranked),
        explore_pool=tuple(r.id for r in pool),
        explore_roll=explore_roll,
    )
