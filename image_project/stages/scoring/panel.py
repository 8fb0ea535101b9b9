"""The judge panel of one round: each judge's step, its seeded presentation order, its
verdict (scores, or the status it failed with) and the round's score table.

Every judge is a stateless, recoverable step: a judge that fails (a transport error after the
retries, a refusal, an answer still invalid after the re-asks) ends as a :class:`Verdict` with
that status instead of failing the run, and :func:`score_table` applies the quorum rule
(``prompt.scoring.min_ok_judges``) before aggregating the judges that answered well, with
the novelty penalty. Round 0 keeps the first wave's seed labels and meta, so a one-round run
sends and records exactly what it did before rounds existed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from image_project.config import EffectiveJudge, ScoringConfig
from image_project.engine import Answer, ChatStep, ReaskPolicy, Scope
from image_project.engine.budget import TokenBudget
from image_project.errors import ModelOutputError, preview
from image_project.record.scoring import IdeaCard, JudgeResult, JudgeStatus, ScoreRow
from image_project.seeding import derive_seed, rng_for
from image_project.stages.scoring.cards import card_text
from image_project.stages.scoring.hints import ProfileHints
from image_project.stages.scoring.judges import (
    degenerate_reask_sampling,
    degenerate_reask_skip,
    judge_output,
    require_quorum,
    status_of,
)
from image_project.stages.scoring.novelty import NoveltySummary, novelty_penalty
from image_project.stages.scoring.prompts import judge_prompt
from image_project.stages.scoring.rubrics import judge_system_prompt
from image_project.stages.scoring.selection import aggregate
from image_project.stages.standard import Brief

__all__ = ["Panel", "Verdict", "judge_orders", "score_table"]


@dataclass(frozen=True)
class Verdict:
    """What one judge's step hands back: ``ok`` with its scores (by id, in its order), or the
    status it failed with, the error and a preview of its last answer."""

    status: JudgeStatus
    scores: dict[str, int] | None = None
    error: str | None = None
    output_preview: str | None = None


def _scored(scores: dict[str, int]) -> Verdict:
    return Verdict("ok", scores)


def _failed(exc: Exception) -> Verdict:
    output = exc.output_preview if isinstance(exc, ModelOutputError) else None
    return Verdict(status_of(exc), None, preview(str(exc), 300), output or None)


def judge_orders(
    run_seed: int, judges: Sequence[EffectiveJudge], ids: Sequence[str], round_index: int
) -> dict[str, tuple[str, ...]]:
    """Each judge's own seeded presentation order of ``ids`` in round ``round_index``.
    Round 0 keeps the single-round seed path (``judge_order``, judge id), so a run without
    rounds presents the cards exactly as before rounds existed."""
    out: dict[str, tuple[str, ...]] = {}
    for judge in judges:
        path = (judge.id,) if round_index == 0 else (round_index, judge.id)
        order = list(ids)
        rng_for(run_seed, "judge_order", *path).shuffle(order)
        out[judge.id] = tuple(order)
    return out


@dataclass(frozen=True)
class Panel:
    """The run's judges and what every one of their prompts needs."""

    judges: tuple[EffectiveJudge, ...]
    brief: Brief
    history: NoveltySummary | None
    hints: ProfileHints | None
    run_seed: int
    max_reasks: int

    def step(
        self,
        judge: EffectiveJudge,
        order: tuple[str, ...],
        cards: Mapping[str, IdeaCard],
        round_index: int,
    ) -> ChatStep[Verdict]:
        """One judge's step for cards shown in ``order``."""
        labels: tuple[str | int, ...] = (judge.id,) if round_index == 0 else (round_index, judge.id)
        extra: dict[str, object] = {} if round_index == 0 else {"round": round_index}
        seed = derive_seed(self.run_seed, "step", "judge", *labels)
        return ChatStep(
            name=judge.id,
            prompt=judge_prompt(order, cards, self.brief, self.history, judge.profile, self.hints),
            temperature=judge.temperature,
            model=judge.model,
            backend=judge.backend,
            seed=seed,
            max_output_tokens=TokenBudget("judge", items=len(order)),
            output=judge_output(order).then(_scored),
            reask=ReaskPolicy(
                max=self.max_reasks,
                style="restate",
                skip=degenerate_reask_skip,
                resample=degenerate_reask_sampling(seed, judge.temperature),
            ),
            stateless=True,
            system_prompt=judge_system_prompt(judge.rubric),
            merge="none",
            allow_empty_response=True,
            on_failure=_failed,
            meta={
                "role": "judge",
                "judge_id": judge.id,
                "order": list(order),
                "rubric": judge.rubric.label,
                "profile": judge.profile,
                **extra,
            },
        )

    async def judge(
        self,
        scope: Scope,
        ids: Sequence[str],
        cards: Mapping[str, IdeaCard],
        round_index: int,
        each: Callable[[JudgeResult], None],
    ) -> tuple[JudgeResult, ...]:
        """Run every judge of one round at once (the ``judges`` block of ``scope``), each
        shown ``ids`` in its own order; ``each`` gets every result as it arrives."""
        orders = judge_orders(self.run_seed, self.judges, ids, round_index)
        steps = [self.step(j, orders[j.id], cards, round_index) for j in self.judges]

        def arrived(i: int, answer: Answer[Verdict]) -> None:
            each(self.result(self.judges[i], orders[self.judges[i].id], answer))

        answers = await scope.gather("judges", steps, each=arrived)
        return tuple(
            self.result(j, orders[j.id], a) for j, a in zip(self.judges, answers, strict=True)
        )

    @staticmethod
    def result(
        judge: EffectiveJudge, order: tuple[str, ...], answer: Answer[Verdict]
    ) -> JudgeResult:
        """The record of one judge's answer (``attempts``: the answers its step received)."""
        verdict = answer.value
        return JudgeResult(
            id=judge.id,
            model=judge.model,
            temperature=judge.temperature,
            rubric=judge.rubric.label,
            profile=judge.profile,
            weight=judge.weight,
            status=verdict.status,
            attempts=max(1, answer.event.answers),
            order=order,
            path=answer.event.path,
            scores=verdict.scores,
            error=verdict.error,
            output_preview=verdict.output_preview,
        )


def score_table(
    ids: Sequence[str],
    results: Sequence[JudgeResult],
    cards: Mapping[str, IdeaCard],
    scoring: ScoringConfig,
    history: NoveltySummary | None,
) -> tuple[ScoreRow, ...]:
    """The score table of one round: the quorum (raises ``invalid_judge_output`` below it),
    then every card's aggregate of the judges that answered well and its novelty penalty."""
    ok = require_quorum(results, scoring.effective_min_ok_judges)
    penalties: dict[str, float] = {}
    if history is not None:
        for card_id in ids:
            penalties[card_id] = novelty_penalty(
                card_text(cards[card_id]),
                history,
                scoring.novelty.penalty_per_share,
                scoring.novelty.max_penalty,
            )[0]
    return tuple(
        aggregate(
            ids,
            {r.id: r.scores or {} for r in ok},
            penalties,
            method=scoring.aggregation,
            weights={r.id: r.weight for r in ok},
            trim=scoring.trim,
            normalise=scoring.normalise,
        )
    )
