"""The judge panel of one round: each judge's step, its seeded presentation order, its
verdict (scores, or the status it failed with) and the round's score table.

Every judge is a stateless, recoverable step: a judge that fails (a transport error after the
retries, a refusal, an answer still invalid after the re-asks) ends as a :class:`Verdict` with
that status instead of failing the run, and :func:`score_table` applies the quorum rule
(``prompt.scoring.min_ok_judges``) before aggregating the judges that answered well, with
the novelty penalty. Round 0 keeps the first wave's seed labels and meta, so a one-round run
sends and records exactly what it did before rounds existed.

A judge's ``protocol`` decides its steps: one (``list``, ``reasoned``, ``logprobs``), one per
card (``pointwise``) or one per pair of cards (``pairwise``, :mod:`.pairwise`); all of a
round's steps run in its one ``judges`` block, and :meth:`Panel.result` turns a judge's
answers into its one result (the gates that need all of them applied there).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from image_project.config import EffectiveJudge, ScoringConfig
from image_project.engine import Answer, ChatStep, JsonOutput, ReaskPolicy, Scope
from image_project.engine.budget import TokenBudget
from image_project.errors import ModelOutputError, preview
from image_project.record.scoring import IdeaCard, JudgeResult, JudgeStatus, ScoreRow
from image_project.seeding import derive_seed, rng_for
from image_project.stages.scoring.cards import card_text
from image_project.stages.scoring.hints import ProfileHints
from image_project.stages.scoring.judges import (
    ReasonedScores,
    degeneracy,
    degenerate_reask_sampling,
    degenerate_reask_skip,
    judge_output,
    reasoned_output,
    require_quorum,
    status_of,
)
from image_project.stages.scoring.logprobs import TOP_LOGPROBS, expected_scores
from image_project.stages.scoring.novelty import NoveltySummary, novelty_penalty
from image_project.stages.scoring.pairwise import (
    Outcome,
    fitted_scores,
    pair_output,
    pair_schedule,
    position_bias,
)
from image_project.stages.scoring.prompts import judge_prompt
from image_project.stages.scoring.rubrics import judge_system_prompt
from image_project.stages.scoring.selection import aggregate
from image_project.stages.standard import Brief

__all__ = ["Panel", "Verdict", "judge_orders", "score_table"]

_log = logging.getLogger("image_project.scoring")


@dataclass(frozen=True)
class Verdict:
    """What one judge's step hands back: ``ok`` with its scores (by id, in its order), or the
    status it failed with, the error and a preview of its last answer; a ``reasoned`` judge's
    ``rationales``, a ``pairwise`` comparison's ``winner``, a ``logprobs`` judge's fallback
    ``warning``."""

    status: JudgeStatus
    scores: dict[str, int] | None = None
    error: str | None = None
    output_preview: str | None = None
    rationales: dict[str, str] | None = None
    winner: str | None = None
    warning: str | None = None


def _scored(scores: dict[str, int]) -> Verdict:
    return Verdict("ok", scores)


def _reasoned(answer: ReasonedScores) -> Verdict:
    return Verdict("ok", answer.scores, rationales=answer.rationales)


def _won(winner: str) -> Verdict:
    return Verdict("ok", winner=winner)


def _pairwise(
    order: tuple[str, ...], pairs: Sequence[tuple[str, str]], verdicts: Sequence[Verdict]
) -> tuple[Verdict, tuple[Outcome, ...]]:
    """One verdict from a ``pairwise`` judge's comparisons (``pairs``, as shown): the first
    failed comparison's status, else the Bradley-Terry scores through the position-bias and
    degeneracy gates (not re-asked: each comparison was its own call); and the outcomes."""
    outcomes = tuple(
        (a, b, v.winner) for (a, b), v in zip(pairs, verdicts, strict=True) if v.winner
    )
    failed = next((v for v in verdicts if v.status != "ok"), None)
    if failed is not None:
        return failed, outcomes
    scores = fitted_scores(order, outcomes)
    why = position_bias(outcomes) or degeneracy(list(scores.values()))
    if why is not None:
        error = f"gate:judge_degenerate: {why} (across the comparisons; not re-asked)"
        return Verdict("degenerate", None, error, preview(json.dumps(scores), 300)), outcomes
    return Verdict("ok", scores), outcomes


def _weighted(verdict: Verdict, answer: Answer[Verdict]) -> Verdict:
    """A ``logprobs`` judge's verdict with its scores weighted by their digit tokens'
    probabilities (:func:`expected_scores`), through the degeneracy gate; or, where the
    endpoint gave no log-probabilities, the sampled scores through the gate, with a warning.
    The sampled answer is not gated before (an all-equal answer whose digits were uncertain
    can still tell the cards apart), so a degenerate one is not re-asked."""
    assert verdict.scores is not None
    weighted = expected_scores(answer.event.response or "", answer.event.logprobs, verdict.scores)
    if isinstance(weighted, str):
        why = degeneracy(list(verdict.scores.values()))
        if why is not None:
            error = f"gate:judge_degenerate: {why} (the sampled scores; logprobs: {weighted})"
            return Verdict("degenerate", None, error, preview(json.dumps(verdict.scores), 300))
        return replace(verdict, warning=f"logprobs: {weighted}")
    why = degeneracy(list(weighted.scores.values()))
    if why is not None:
        error = f"gate:judge_degenerate: {why} (the probability-weighted scores)"
        return Verdict("degenerate", None, error, preview(json.dumps(weighted.scores), 300))
    warning = None
    if weighted.kept:
        warning = f"logprobs: no usable digit alternatives for {', '.join(weighted.kept)}; sampled"
    return replace(verdict, scores=weighted.scores, warning=warning)


def _pointwise(order: tuple[str, ...], verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict from a ``pointwise`` judge's per-card verdicts (in ``order``): the first
    failed card's status and error, else the scores, through the degeneracy gate across
    every card (not re-asked: each card was its own call)."""
    failed = next((v for v in verdicts if v.status != "ok"), None)
    if failed is not None:
        return failed
    scores = {
        card_id: (v.scores or {})[card_id] for card_id, v in zip(order, verdicts, strict=True)
    }
    why = degeneracy(list(scores.values()))
    if why is not None:
        error = f"gate:judge_degenerate: {why} (across the per-card answers; not re-asked)"
        return Verdict("degenerate", None, error, preview(json.dumps(scores), 300))
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

    def steps(
        self,
        judge: EffectiveJudge,
        order: tuple[str, ...],
        cards: Mapping[str, IdeaCard],
        round_index: int,
    ) -> list[ChatStep[Verdict]]:
        """A judge's steps for cards shown in ``order``: one, or one per card for a
        ``pointwise`` judge."""
        if judge.protocol == "pointwise":
            return [self.step(judge, (c,), cards, round_index, (c,)) for c in order]
        if judge.protocol == "pairwise":
            return [
                self.step(judge, pair, cards, round_index, pair)
                for pair in self.pairs(judge, order, round_index)
            ]
        return [self.step(judge, order, cards, round_index)]

    def pairs(
        self, judge: EffectiveJudge, order: tuple[str, ...], round_index: int
    ) -> list[tuple[str, str]]:
        """A ``pairwise`` judge's comparisons in round ``round_index``, as shown."""
        labels: tuple[str | int, ...] = (judge.id,) if round_index == 0 else (round_index, judge.id)
        return pair_schedule(self.run_seed, order, *labels)

    def step(
        self,
        judge: EffectiveJudge,
        order: tuple[str, ...],
        cards: Mapping[str, IdeaCard],
        round_index: int,
        part: tuple[str, ...] = (),
    ) -> ChatStep[Verdict]:
        """One judge's step for cards shown in ``order`` (``part``: the card of a
        ``pointwise`` call or the pair of a ``pairwise`` one, which name the step and add to
        its seed)."""
        labels: tuple[str | int, ...] = (judge.id,) if round_index == 0 else (round_index, judge.id)
        extra: dict[str, object] = {} if round_index == 0 else {"round": round_index}
        if judge.protocol != "list":
            extra["protocol"] = judge.protocol
        seed = derive_seed(self.run_seed, "step", "judge", *labels, *part)
        output: JsonOutput[Verdict]
        if judge.protocol == "pairwise":
            output = pair_output(*order).then(_won)
            budget = TokenBudget("judge")
        elif judge.protocol == "reasoned":
            output = reasoned_output(order).then(_reasoned)
            budget = TokenBudget("judge_reasoned", items=len(order))
        else:
            gate = judge.protocol != "logprobs"  # its weighted scores are gated instead
            output = judge_output(order, gate=gate).then(_scored)
            budget = TokenBudget("judge", items=len(order))
        return ChatStep(
            name=".".join((judge.id, "-".join(part))) if part else judge.id,
            prompt=judge_prompt(
                order,
                cards,
                self.brief,
                self.history,
                judge.profile,
                self.hints,
                protocol=judge.protocol,
            ),
            temperature=judge.temperature,
            model=judge.model,
            backend=judge.backend,
            seed=seed,
            max_output_tokens=budget,
            output=output,
            reask=ReaskPolicy(
                max=self.max_reasks,
                style="restate",
                skip=degenerate_reask_skip,
                resample=degenerate_reask_sampling(seed, judge.temperature),
            ),
            stateless=True,
            system_prompt=judge_system_prompt(judge.rubric, judge.protocol),
            merge="none",
            allow_empty_response=True,
            on_failure=_failed,
            top_logprobs=TOP_LOGPROBS if judge.protocol == "logprobs" else None,
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
        steps: list[ChatStep[Verdict]] = []
        owner: list[int] = []
        for index, judge in enumerate(self.judges):
            own = self.steps(judge, orders[judge.id], cards, round_index)
            steps += own
            owner += [index] * len(own)
        waiting = [owner.count(i) for i in range(len(self.judges))]
        got: dict[int, dict[int, Answer[Verdict]]] = {i: {} for i in range(len(self.judges))}

        def answers_of(index: int) -> list[Answer[Verdict]]:
            return [got[index][k] for k in sorted(got[index])]

        def arrived(i: int, answer: Answer[Verdict]) -> None:
            index = owner[i]
            got[index][i] = answer
            if len(got[index]) == waiting[index]:
                judge = self.judges[index]
                each(self.result(judge, orders[judge.id], answers_of(index), round_index))

        await scope.gather("judges", steps, each=arrived)
        results = tuple(
            self.result(j, orders[j.id], answers_of(i), round_index)
            for i, j in enumerate(self.judges)
        )
        for r in results:
            if r.warning:
                _log.warning("judge %r (%s): %s", r.id, r.path, r.warning)
        return results

    def result(
        self,
        judge: EffectiveJudge,
        order: tuple[str, ...],
        answers: Sequence[Answer[Verdict]],
        round_index: int,
    ) -> JudgeResult:
        """The record of one judge's answers (one, or one per card or pair for a
        ``pointwise`` or ``pairwise`` judge; ``attempts``: the answers its steps received,
        ``path``: its first step's)."""
        outcomes: tuple[Outcome, ...] | None = None
        if judge.protocol == "pointwise":
            verdict = _pointwise(order, [a.value for a in answers])
        elif judge.protocol == "pairwise":
            pairs = self.pairs(judge, order, round_index)
            verdict, outcomes = _pairwise(order, pairs, [a.value for a in answers])
        else:
            verdict = answers[0].value
        answer = answers[0]
        if judge.protocol == "logprobs" and verdict.scores is not None:
            verdict = _weighted(verdict, answer)
        return JudgeResult(
            id=judge.id,
            model=judge.model,
            temperature=judge.temperature,
            rubric=judge.rubric.label,
            profile=judge.profile,
            weight=judge.weight,
            status=verdict.status,
            attempts=sum(max(1, a.event.answers) for a in answers),
            order=order,
            path=answer.event.path,
            scores=verdict.scores,
            error=verdict.error,
            output_preview=verdict.output_preview,
            protocol=judge.protocol,
            rationales=verdict.rationales,
            comparisons=outcomes,
            warning=verdict.warning,
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
