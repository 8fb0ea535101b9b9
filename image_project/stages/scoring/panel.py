"""The judge panel of one round: each judge's step, its seeded presentation order, its
verdict (scores, or the status it failed with) and the round's score table.

Every judge is a stateless, recoverable step: a judge that fails (a transport error after the
retries, a refusal, an answer still invalid after the re-asks) ends as a :class:`Verdict` with
that status instead of failing the run, and :func:`score_table` applies the quorum rule
(``prompt.scoring.min_ok_judges``) before aggregating the judges that answered well, with
the novelty penalty. Round 0 keeps the first wave's seed labels and meta, so a one-round run
sends and records exactly what it did before rounds existed.

A judge's protocol (:mod:`.protocols`, found by the judge's ``protocol``) decides its calls,
their prompts' answer form, schemas, gates and token limits, and how its answers become its
one result; all of a round's calls run in its one ``judges`` block, and :meth:`Panel.result`
records what the protocol made of a judge's answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from image_project.config.models import EffectiveJudge, ScoringConfig
from image_project.engine.nodes import ChatStep
from image_project.engine.outcome import Answer
from image_project.engine.output import ReaskPolicy
from image_project.engine.scope import Scope
from image_project.errors import ModelOutputError, preview
from image_project.record.scoring import IdeaCard, JudgeResult, ScoreRow, named_protocol
from image_project.seeding import derive_seed, rng_for
from image_project.stages.scoring.cards import card_text
from image_project.stages.scoring.hints import ProfileHints
from image_project.stages.scoring.judges import (
    degenerate_reask_sampling,
    degenerate_reask_skip,
    require_quorum,
    status_of,
)
from image_project.stages.scoring.novelty import NoveltySummary, novelty_penalty
from image_project.stages.scoring.prompts import judge_prompt
from image_project.stages.scoring.protocols import protocol_of
from image_project.stages.scoring.protocols.base import Call, Labels, Verdict
from image_project.stages.scoring.rubrics import judge_system_prompt
from image_project.stages.scoring.selection import aggregate
from image_project.stages.standard import Brief

_log = logging.getLogger("image_project.scoring")


def _failed(exc: Exception) -> Verdict:
    output = exc.output_preview if isinstance(exc, ModelOutputError) else None
    return Verdict(status_of(exc), None, preview(str(exc), 300), output or None)


def _labels(judge: EffectiveJudge, round_index: int) -> Labels:
    """A judge's seed labels in round ``round_index``: its id in round 0 (the seed path of a
    run without rounds), else the round and its id."""
    return (judge.id,) if round_index == 0 else (round_index, judge.id)


def judge_orders(
    run_seed: int, judges: Sequence[EffectiveJudge], ids: Sequence[str], round_index: int
) -> dict[str, tuple[str, ...]]:
    """Each judge's own seeded presentation order of ``ids`` in round ``round_index``.
    Round 0 keeps the single-round seed path (``judge_order``, judge id), so a run without
    rounds presents the cards exactly as before rounds existed."""
    out: dict[str, tuple[str, ...]] = {}
    for judge in judges:
        order = list(ids)
        rng_for(run_seed, "judge_order", *_labels(judge, round_index)).shuffle(order)
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

    def calls(
        self, judge: EffectiveJudge, order: tuple[str, ...], round_index: int
    ) -> tuple[Call, ...]:
        """A judge's calls for cards shown in ``order`` in round ``round_index``, as its
        protocol makes them."""
        return protocol_of(judge.protocol).calls(order, self.run_seed, _labels(judge, round_index))

    def steps(
        self,
        judge: EffectiveJudge,
        order: tuple[str, ...],
        cards: Mapping[str, IdeaCard],
        round_index: int,
    ) -> list[ChatStep[Verdict]]:
        """A judge's steps for cards shown in ``order``: one per call of its protocol."""
        return [
            self.step(judge, call, cards, round_index)
            for call in self.calls(judge, order, round_index)
        ]

    def step(
        self,
        judge: EffectiveJudge,
        call: Call,
        cards: Mapping[str, IdeaCard],
        round_index: int,
    ) -> ChatStep[Verdict]:
        """One judge's step for ``call`` (its ``part``, such as the card of a ``pointwise``
        call or the pair of a ``pairwise`` one, names the step and adds to its seed)."""
        protocol = protocol_of(judge.protocol)
        labels = _labels(judge, round_index)
        extra: dict[str, object] = {} if round_index == 0 else {"round": round_index}
        named = named_protocol(protocol.name)
        if named is not None:
            extra["protocol"] = named
        seed = derive_seed(self.run_seed, "step", "judge", *labels, *call.part)
        return ChatStep(
            name=".".join((judge.id, "-".join(call.part))) if call.part else judge.id,
            prompt=judge_prompt(
                call.shown,
                cards,
                self.brief,
                self.history,
                judge.profile,
                self.hints,
                protocol=protocol.name,
            ),
            temperature=judge.temperature,
            model=judge.model,
            backend=judge.backend,
            seed=seed,
            max_output_tokens=protocol.budget(call.shown),
            output=protocol.output(call.shown),
            reask=ReaskPolicy(
                max=self.max_reasks,
                style="restate",
                skip=degenerate_reask_skip,
                resample=degenerate_reask_sampling(seed, judge.temperature),
            ),
            stateless=True,
            system_prompt=judge_system_prompt(judge.rubric, protocol.name),
            merge="none",
            allow_empty_response=True,
            on_failure=_failed,
            top_logprobs=protocol.top_logprobs,
            meta={
                "role": "judge",
                "judge_id": judge.id,
                "order": list(call.shown),
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
        """The record of one judge's answers (one per call of its protocol, in order), as
        its protocol combines them (``attempts``: the answers its steps received, ``path``:
        its first step's)."""
        protocol = protocol_of(judge.protocol)
        verdict = protocol.combine(order, self.calls(judge, order, round_index), answers)
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
            path=answers[0].event.path,
            scores=verdict.scores,
            error=verdict.error,
            output_preview=verdict.output_preview,
            protocol=protocol.name,
            rationales=verdict.rationales,
            comparisons=verdict.comparisons,
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
