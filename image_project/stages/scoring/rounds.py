"""The rounds of multi-round selection (``prompt.scoring.evolution``): a round's survivors
(by code, or proposed by the LLM selector with a recorded fallback to the code choice), the
variants bred from them, and the near-duplicates dropped before judging.

The pure parts (ids, directives, distances, the code choice) are :mod:`.evolution`'s; this
module turns them into the steps of a round and reads their answers. A variant's generator
sees its parent card, the concepts, the generator-safe taste and its directive, never a
score, a rank or a selector's words; the selector sees the scores but is never a generator.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from image_project.config.models import ScoringConfig, SurvivorCategory
from image_project.engine.budget import TokenBudget
from image_project.engine.nodes import ChatStep
from image_project.engine.outcome import Answer
from image_project.engine.output import ReaskPolicy
from image_project.engine.scope import Scope
from image_project.errors import (
    EmptyResponseError,
    ModelOutputError,
    StepFailedError,
    preview,
)
from image_project.record.scoring import (
    IdeaCard,
    RoundCandidate,
    ScoreRow,
    SelectorRecord,
    Survivor,
)
from image_project.seeding import derive_seed
from image_project.stages.scoring.cards import CARD_OUTPUT
from image_project.stages.scoring.evolution import (
    SelectorAnswer,
    card_mentions,
    code_survivors,
    directive_for,
    drop_near_duplicates,
    selector_output,
    variant_ids,
)
from image_project.stages.scoring.hints import ProfileHints
from image_project.stages.scoring.prompts import (
    SELECTOR_SYSTEM,
    VARIANT_SYSTEM,
    selector_prompt,
    variant_prompt,
)
from image_project.stages.scoring.results import Choice, Judged
from image_project.stages.standard import NO_GUIDANCE, Brief, Guidance

logger = logging.getLogger("image_project.scoring")


@dataclass(frozen=True)
class SelectorVerdict:
    """What the LLM selector's step hands back: its proposal, or why it has none."""

    answer: SelectorAnswer | None
    error: str | None = None


def _kept(card: IdeaCard) -> IdeaCard | None:
    return card


def _invalid_variant(exc: Exception) -> IdeaCard | None:
    """A variant whose answer stayed invalid (or was refused, or empty) is dropped (None);
    any other error (a transport failure) still fails the run."""
    if isinstance(exc, ModelOutputError | EmptyResponseError):
        return None
    raise exc


def _proposed(answer: SelectorAnswer) -> SelectorVerdict:
    return SelectorVerdict(answer)


def _no_proposal(exc: Exception) -> SelectorVerdict:
    return SelectorVerdict(None, preview(str(exc), 300))


@dataclass(frozen=True)
class Rounds:
    """What every round of one run needs: the settings, the brief, the hints and the
    selector's model (resolved once for the run)."""

    scoring: ScoringConfig
    brief: Brief
    hints: ProfileHints | None
    run_seed: int
    selector_model: str
    guidance: Guidance = NO_GUIDANCE
    """The context guidance for the variant generators (never for the judges or selector)."""
    selector_backend: str | None = None
    """The selector's backend (None: the main one; ``backends:`` in the config)."""

    @property
    def generations(self) -> int:
        return self.scoring.evolution.generations

    @property
    def label(self) -> str:
        return self.scoring.aggregation

    # -- variants -----------------------------------------------------------------------

    def plan(
        self, r: int, survivors: Sequence[Survivor], known: Mapping[str, RoundCandidate]
    ) -> tuple[RoundCandidate, ...]:
        """Round ``r``'s candidates: the kept parents (when ``keep_parents``), then
        ``variants_per_survivor`` variants of every survivor, each with its id, derived seed
        and directive."""
        evo = self.scoring.evolution
        ids = variant_ids(self.scoring.num_ideas, evo.survivors, evo.variants_per_survivor, r)
        planned: list[RoundCandidate] = []
        if evo.keep_parents:
            planned += [
                known[s.id].model_copy(update={"kind": "parent", "card": None, "dropped": None})
                for s in survivors
            ]
        for i, survivor in enumerate(survivors):
            for v in range(evo.variants_per_survivor):
                card_id = ids[i * evo.variants_per_survivor + v]
                planned.append(
                    RoundCandidate(
                        id=card_id,
                        kind="variant",
                        parent=survivor.id,
                        directive=directive_for(self.run_seed, r, card_id),
                        seed=derive_seed(self.run_seed, "step", "variant", r, card_id),
                    )
                )
        return tuple(planned)

    def variant_step(
        self, variant: RoundCandidate, parent: IdeaCard, r: int
    ) -> ChatStep[IdeaCard | None]:
        """A variant's generator: its card, or None when its answer stayed invalid after the
        re-asks (the variant is then dropped and recorded, not fatal)."""
        return ChatStep(
            name=f"variant_{variant.id}",
            prompt=self.guidance.in_prompt(
                variant_prompt(parent, variant.directive, self.brief, self.hints)
            ),
            temperature=self.scoring.generator_temperature,
            seed=variant.seed,
            max_output_tokens=TokenBudget("card"),
            output=CARD_OUTPUT.then(_kept),
            reask=ReaskPolicy(max=self.scoring.max_reasks, style="restate"),
            stateless=True,
            system_prompt=self.guidance.in_system(VARIANT_SYSTEM),
            merge="none",
            on_failure=_invalid_variant,
            meta={
                "role": "variant",
                "card_id": variant.id,
                "parent": variant.parent,
                "round": r,
                "directive": variant.directive,
            },
        )

    def dedupe(
        self,
        r: int,
        planned: Sequence[RoundCandidate],
        survivors: Sequence[Survivor],
        cards: Mapping[str, IdeaCard],
    ) -> Judged:
        """What round ``r`` sends to the judges: the parents (when kept), then every variant
        that has a card (an invalid one was dropped) and is not a near-duplicate; raises when
        nothing is left to judge."""
        evo = self.scoring.evolution
        parents = [s.id for s in survivors]
        variants = [c.id for c in planned if c.kind == "variant" and c.id in cards]
        kept = drop_near_duplicates(parents, variants, cards, evo.near_duplicate_distance)
        for card_id, why in kept.dropped.items():
            logger.info(
                "Round %d: variant %s dropped before judging: distance %.2f to %s < %g",
                r,
                card_id,
                why.distance,
                why.of,
                why.threshold,
            )
        judged = (*(parents if evo.keep_parents else ()), *kept.ids)
        if not judged:
            raise StepFailedError(
                f"round {r}: every variant was invalid (its answer failed validation after "
                f"the re-asks) or a near-duplicate of its parent or another variant "
                f"(prompt.scoring.evolution.near_duplicate_distance "
                f"{evo.near_duplicate_distance:g}), and the parents are not kept "
                f"(keep_parents: false), so nothing is left to judge"
            )
        return Judged(ids=judged, dropped=dict(kept.dropped))

    # -- survivors ----------------------------------------------------------------------

    def slots(self, table: Sequence[ScoreRow]) -> tuple[SurvivorCategory, ...]:
        evo = self.scoring.evolution
        return evo.quota.categories(min(evo.survivors, len(table)))

    def selector_step(
        self, r: int, table: Sequence[ScoreRow], cards: Mapping[str, IdeaCard]
    ) -> ChatStep[SelectorVerdict]:
        ids = [row.id for row in table]
        slots = self.slots(table)
        mentions = {row.id: card_mentions(row, cards[row.id]) for row in table}
        return ChatStep(
            name="selector",
            prompt=selector_prompt(r, self.generations, self.label, table, cards, slots),
            temperature=0.0,
            model=self.selector_model,
            backend=self.selector_backend,
            seed=derive_seed(self.run_seed, "step", "selector", r),
            max_output_tokens=TokenBudget("selector", items=len(slots)),
            output=selector_output(ids, slots, mentions).then(_proposed),
            reask=ReaskPolicy(max=self.scoring.max_reasks, style="restate"),
            stateless=True,
            system_prompt=SELECTOR_SYSTEM,
            merge="none",
            allow_empty_response=True,
            on_failure=_no_proposal,
            meta={"role": "selector", "round": r, "slots": list(slots)},
        )

    async def survivors(
        self, scope: Scope, r: int, table: tuple[ScoreRow, ...], cards: Mapping[str, IdeaCard]
    ) -> Choice:
        """Round ``r``'s survivors, in ``scope``: the LLM selector's proposal when it is on
        and valid, else (and always with ``selector: code``) the code choice."""
        proposal = None
        if self.scoring.evolution.selector == "llm":
            proposal = await scope.ask(self.selector_step(r, table, cards))
        return await scope.act("survivors", lambda: self._choose(r, table, cards, proposal))

    def _choose(
        self,
        r: int,
        table: tuple[ScoreRow, ...],
        cards: Mapping[str, IdeaCard],
        proposal: Answer[SelectorVerdict] | None,
    ) -> Choice:
        code = code_survivors(table, cards, self.slots(table), label=self.label)
        choice = Choice(code, SelectorRecord(kind="code", status="ok"))
        if proposal is not None:
            choice = self._llm_choice(r, code, proposal)
        logger.info(
            "Round %d survivors (%s): %s",
            r,
            choice.selector.kind,
            "; ".join(f"{s.id} {s.category}: {s.reason}" for s in choice.survivors),
        )
        return choice

    def _llm_choice(
        self, r: int, code: tuple[Survivor, ...], proposal: Answer[SelectorVerdict]
    ) -> Choice:
        answers = proposal.event.answers
        answer = proposal.value.answer
        model, path = self.selector_model, proposal.event.path
        llm = SelectorRecord(kind="llm", status="ok", attempts=answers, model=model, path=path)
        if answer is not None:
            survivors = tuple(
                Survivor(id=p.id, category=p.category, reason=p.reason, proposed_by="llm")
                for p in answer.selections
            )
            return Choice(survivors, llm.model_copy(update={"summary": answer.summary}))
        warning = (
            f"round {r}: the LLM selector's proposal was still invalid after {answers} "
            f"answer(s), so the code choice is used instead: {proposal.value.error}"
        )
        logger.warning("SELECTOR FALLBACK: %s", warning)
        return Choice(code, llm.model_copy(update={"status": "fallback", "warning": warning}))
