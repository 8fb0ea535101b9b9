"""The black-box scoring flow of one run, as code on the engine's typed steps:
:class:`ScoringRun`.

Shape (``pipeline`` is the root; paths are the transcript's)::

    pipeline                                    merge all_messages
      blackbox_scoring                          merge none: nothing reaches the conversation
        profile_abstraction                     stateless; hints (when abstraction is on)
        ideas                                   parallel
          idea_A, idea_B, ...                   stateless; one card each, own seed/direction
        judges                                  parallel
          <judge id> ...                        stateless; recoverable (status, not failure)
        round_0 .. round_G                      with evolution only (below)
        select                                  code: quorum, median, novelty, selector
      final_prompt_from_selected_idea           draft (+ ToT enclave unless refinement none)
      dalle_prompt_creation                     the final prompt (+ ToT with per_stage)

With ``prompt.scoring.evolution``, ``round_0`` holds round 0's ``table``, ``selector`` (LLM
selector only) and ``survivors``; every later ``round_<r>`` holds its ``variants`` (parallel),
``dedupe``, ``judges`` (parallel), ``table`` and, but for the last round, its survivors. The
final ``select`` picks from the last round's table.

Each step hands its typed value back (:class:`~image_project.engine.scope.Scope`), and every
value goes to the run's :class:`~.results.ScoringLog` as it arrives, so :meth:`ScoringRun.record`
shows a failed or interrupted run as far as it got.

Isolation (FR7): every scoring step is stateless and the scoring block merges ``none``, so no
scoring prompt or answer is in the conversation afterwards; the final stages read only the
selected card, never the scores.

Context guidance (``context.enabled``; :class:`~image_project.stages.standard.Guidance`):
the scoring run's first stage is its generators, so with ``injection_location`` ``prompt``
(or ``both``) the guidance ends every ``idea_*`` and ``variant_*`` prompt, and with
``system`` (or ``both``) it ends their system prompts and the run's conversation's (which
the final stages read). The hints, the judges and the selector never get it: a judge scores
the cards against the person's profile, never against the guidance as if it were a like.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from image_project.config.models import EffectiveJudge, ScoringConfig
from image_project.engine.budget import TokenBudget
from image_project.engine.nodes import ChatStep
from image_project.engine.outcome import Answer
from image_project.engine.output import ReaskPolicy
from image_project.engine.scope import Scope
from image_project.errors import EmptyResponseError, ModelOutputError, locate
from image_project.record.scoring import (
    IdeaCard,
    ScoreRow,
    ScoringRecord,
    Survivor,
    named_protocol,
)
from image_project.seeding import derive_seed
from image_project.stages.scoring.cards import CARD_OUTPUT, card_ids, directions_for
from image_project.stages.scoring.hints import ProfileHints, hints_output
from image_project.stages.scoring.novelty import NoveltyState
from image_project.stages.scoring.panel import Panel, score_table
from image_project.stages.scoring.prompts import (
    HINTS_SYSTEM,
    IDEA_SYSTEM,
    final_from_card,
    hints_prompt,
    idea_prompt,
)
from image_project.stages.scoring.results import Judged, RoundResult, ScoringLog, ScoringOutcome
from image_project.stages.scoring.rounds import Rounds
from image_project.stages.scoring.selection import select
from image_project.stages.standard import NO_GUIDANCE, Brief, Guidance, run_stage, stage_prompt

logger = logging.getLogger("image_project.scoring")


def describe_ensemble(
    scoring: ScoringConfig, judges: Sequence[EffectiveJudge], novelty: NoveltyState
) -> str:
    """The run log's one line about the scoring setup, with the judges' effective models."""
    described = ", ".join(
        f"{j.id}(model={j.model}, t={j.temperature:g}, rubric={j.rubric.label}, "
        f"profile={j.profile}, weight={j.weight:g}"
        + (f", protocol={p})" if (p := named_protocol(j.protocol)) else ")")
        for j in judges
    )
    if novelty.used:
        state = f"on, window={novelty.window}"
    elif novelty.enabled:
        state = "off (no history)" if novelty.warning else "off"
    else:
        state = "off (window 0)" if scoring.novelty.enabled else "off"
    return (
        f"black-box scoring: num_ideas={scoring.num_ideas} "
        f"exploration_rate={scoring.exploration_rate:g} "
        f"generator_temperature={scoring.generator_temperature:g} "
        f"max_reasks={scoring.max_reasks} judges=[{described}] "
        f"min_ok_judges={scoring.effective_min_ok_judges} aggregation={scoring.aggregation}"
        + (f" trim={scoring.trim}" if scoring.aggregation == "trimmed_mean" else "")
        + (f" normalise={scoring.normalise}" if scoring.normalise != "none" else "")
        + f" novelty={state}"
        + _describe_evolution(scoring)
    )


def _describe_evolution(scoring: ScoringConfig) -> str:
    evo = scoring.evolution
    if not evo.enabled:
        return ""
    q = evo.quota
    return (
        f" evolution=on(generations={evo.generations} survivors={evo.survivors} "
        f"variants_per_survivor={evo.variants_per_survivor} keep_parents={evo.keep_parents} "
        f"quota=performance:{q.performance},diversity:{q.diversity},potential:{q.potential} "
        f"selector={evo.selector} near_duplicate_distance={evo.near_duplicate_distance:g})"
    )


@dataclass(frozen=True)
class ScoringSetup:
    """Everything a scoring run is decided by, each resolved once for the run: the brief,
    the seed, the settings, the judges and the selector with their models, the likes the
    hints must not copy, the novelty history, and the final stages' refinement and
    temperature."""

    brief: Brief
    run_seed: int
    scoring: ScoringConfig
    judges: tuple[EffectiveJudge, ...]
    selector_model: str
    likes: tuple[str, ...]
    novelty: NoveltyState
    refinement: str
    temperature: float
    guidance: Guidance = NO_GUIDANCE
    """The context guidance for the generators (ideas, variants); never for a judge."""
    selector_backend: str | None = None
    """The LLM selector's backend (None: the main one)."""


class ScoringRun:
    """One run's scoring flow and its record (see the module docstring)."""

    def __init__(self, setup: ScoringSetup) -> None:
        self.setup = setup
        s = setup.scoring
        self.first = directions_for(setup.run_seed, card_ids(s.num_ideas))
        self.log = ScoringLog(s, setup.judges, setup.novelty, self.first)
        self.reask = ReaskPolicy(max=s.max_reasks, style="restate")
        self._dropped: dict[str, tuple[str, Exception]] = {}
        """Each dropped card's step path and error, in the order they failed."""

    def record(self) -> ScoringRecord:
        """The scoring record from whatever the run got to."""
        return self.log.record()

    async def run(self, scope: Scope) -> str:
        """The whole prompt pipeline of a scoring run, as ``scope``'s next child: the scoring
        block, then the final stages from the selected card; the last one's output, the
        final prompt."""
        setup = self.setup
        final_prompt = ""
        async with scope.scope("pipeline", merge="all_messages") as pipeline:
            async with pipeline.scope("blackbox_scoring") as scoring:
                card = await self._score(scoring)
            for stage, prompt, refine in (
                (
                    "final_prompt_from_selected_idea",
                    final_from_card(setup.brief, card),
                    setup.refinement != "none",
                ),
                (
                    "dalle_prompt_creation",
                    stage_prompt("dalle_prompt_creation", setup.brief),
                    setup.refinement == "per_stage",
                ),
            ):
                final_prompt = await run_stage(
                    pipeline,
                    stage,
                    prompt,
                    brief=setup.brief,
                    refine=refine,
                    run_seed=setup.run_seed,
                    temperature=setup.temperature,
                )
        return final_prompt

    # -- the scoring block --------------------------------------------------------------

    async def _score(self, scope: Scope) -> IdeaCard:
        """Hints, cards, judges (and rounds); the selected card."""
        setup, log = self.setup, self.log
        hints = None
        if setup.scoring.generator_profile_abstraction:
            hints = (await scope.ask(self._hints_step())).value
        first = log.rounds[0]
        await scope.gather(
            "ideas",
            [self._idea_step(c.id, c.direction, c.seed, hints) for c in self.first],
            each=_CardSink(log, first, tuple(c.id for c in self.first)),
        )
        ids = self._card_quorum()
        panel = Panel(
            setup.judges,
            setup.brief,
            setup.novelty.summary,
            hints,
            setup.run_seed,
            setup.scoring.max_reasks,
        )
        await panel.judge(scope, ids, log.cards, 0, first.add_result)
        if setup.scoring.evolution.enabled:
            table = await self._rounds(scope, panel, hints)
        else:
            table = None
        outcome = await scope.act("select", lambda: self._select(table))
        return outcome.card

    def _card_quorum(self) -> tuple[str, ...]:
        """The ids of the cards that passed their gates, in order (round 0's judged ids), or
        :class:`ModelOutputError` when fewer than the quorum remain
        (``prompt.scoring.min_ok_cards``; with rounds, at least ``evolution.survivors``)."""
        s, log = self.setup.scoring, self.log
        first = log.rounds[0]
        kept = tuple(c.id for c in self.first if c.id in log.cards)
        need = s.effective_min_ok_cards
        if s.evolution.enabled:
            need = max(need, s.evolution.survivors)
        if first.invalid:
            logger.warning(
                "%d card(s) dropped as invalid: %s", len(first.invalid), ", ".join(first.invalid)
            )
        if len(kept) < need:
            card_id, (path, exc) = next(iter(self._dropped.items()))
            others = [i for i in first.invalid if i != card_id]
            error = ModelOutputError(
                exc.reason if isinstance(exc, ModelOutputError) else "invalid_output",
                f"{exc.detail if isinstance(exc, ModelOutputError) else exc}; only {len(kept)} "
                f"of {len(self.first)} card(s) passed their gates, at least {need} required "
                "(prompt.scoring.min_ok_cards)"
                + (f"; also dropped: {', '.join(others)}" if others else ""),
                output=exc.output if isinstance(exc, ModelOutputError) else "",
            )
            locate(error, path=path, name=path.rsplit("/", 1)[-1], node_type="chat")
            raise error
        first.judged = Judged(kept, {})
        return kept

    def _hints_step(self) -> ChatStep[ProfileHints]:
        setup = self.setup
        return ChatStep(
            name="profile_abstraction",
            prompt=hints_prompt(setup.brief),
            temperature=0.0,
            seed=derive_seed(setup.run_seed, "step", "profile_abstraction"),
            max_output_tokens=TokenBudget("hints"),
            output=hints_output(setup.likes),
            reask=self.reask,
            stateless=True,
            system_prompt=HINTS_SYSTEM,
            merge="none",
        )

    def _idea_step(
        self, card_id: str, direction: str, seed: int, hints: ProfileHints | None
    ) -> ChatStep[IdeaCard | None]:
        setup = self.setup
        return ChatStep(
            name=f"idea_{card_id}",
            prompt=setup.guidance.in_prompt(idea_prompt(direction, setup.brief, hints)),
            temperature=setup.scoring.generator_temperature,
            seed=seed,
            max_output_tokens=TokenBudget("card"),
            output=CARD_OUTPUT.then(_kept),
            reask=self.reask,
            stateless=True,
            system_prompt=setup.guidance.in_system(IDEA_SYSTEM),
            merge="none",
            on_failure=functools.partial(_invalid_card, self._dropped, card_id),
            meta={"role": "idea", "card_id": card_id, "direction": direction},
        )

    def _select(self, table: tuple[ScoreRow, ...] | None) -> ScoringOutcome:
        """The final selection from ``table`` (the last round's), or from round 0's judges
        when there are no rounds (the quorum is checked here then)."""
        setup, log = self.setup, self.log
        if table is None:
            first = log.rounds[0]
            ids = first.judged.ids if first.judged else tuple(c.id for c in self.first)
            table = score_table(ids, first.judges, log.cards, setup.scoring, setup.novelty.summary)
        selection = select(
            list(table), exploration_rate=setup.scoring.exploration_rate, run_seed=setup.run_seed
        )
        logger.info(
            "Selected candidate: id=%s, score=%s, selection_mode=%s",
            selection.selected_id,
            selection.selected_score,
            selection.mode,
        )
        log.outcome = ScoringOutcome(table, selection, log.cards[selection.selected_id])
        return log.outcome

    # -- rounds -------------------------------------------------------------------------

    async def _rounds(
        self, scope: Scope, panel: Panel, hints: ProfileHints | None
    ) -> tuple[ScoreRow, ...]:
        """Round 0's table and survivors, then every later round; the last round's table."""
        setup, log = self.setup, self.log
        rounds = Rounds(
            setup.scoring,
            setup.brief,
            hints,
            setup.run_seed,
            setup.selector_model,
            setup.guidance,
            setup.selector_backend,
        )
        current = log.rounds[0]
        async with scope.scope("round_0") as inner:
            await self._table(inner, current)
            current.choice = await rounds.survivors(inner, 0, current.table, log.cards)
        for r in range(1, rounds.generations + 1):
            previous = current
            assert previous.choice is not None
            survivors = previous.choice.survivors
            current = log.start_round(rounds.plan(r, survivors, log.known_candidates()))
            async with scope.scope(f"round_{r}") as inner:
                await self._round(inner, rounds, panel, current, survivors)
        return current.table

    async def _round(
        self,
        scope: Scope,
        rounds: Rounds,
        panel: Panel,
        current: RoundResult,
        survivors: Sequence[Survivor],
    ) -> None:
        """Round ``current.index`` > 0: variants, near-duplicates dropped, judges, table,
        and (but for the last round) survivors."""
        log, r = self.log, current.index
        variants = [c for c in current.planned if c.kind == "variant"]
        await scope.gather(
            "variants",
            [rounds.variant_step(c, log.cards[c.parent or ""], r) for c in variants],
            each=_VariantSink(log, current, tuple(c.id for c in variants)),
        )
        current.judged = await scope.act(
            "dedupe", functools.partial(rounds.dedupe, r, current.planned, survivors, log.cards)
        )
        await panel.judge(scope, current.judged.ids, log.cards, r, current.add_result)
        await self._table(scope, current)
        if r < rounds.generations:
            current.choice = await rounds.survivors(scope, r, current.table, log.cards)

    async def _table(self, scope: Scope, current: RoundResult) -> None:
        """The round's score table, as the ``table`` action."""
        setup = self.setup
        judged = current.judged or Judged((), {})

        def table() -> tuple[ScoreRow, ...]:
            rows = score_table(
                judged.ids, current.judges, self.log.cards, setup.scoring, setup.novelty.summary
            )
            best = max(rows, key=lambda row: (row.effective_score, row.aggregate))
            logger.info(
                "Round %d: %d candidate(s) judged, best %s %s (%s)",
                current.index,
                len(rows),
                setup.scoring.aggregation,
                best.aggregate,
                best.id,
            )
            return rows

        current.table = await scope.act("table", table)


def _kept(card: IdeaCard) -> IdeaCard | None:
    return card


def _invalid_card(
    dropped: dict[str, tuple[str, Exception]], card_id: str, exc: Exception
) -> IdeaCard | None:
    """A card whose answer stayed invalid (or was refused, or empty) is dropped (None), its
    error kept for the run's should too few cards remain; any other error (a transport
    failure) still fails the run."""
    if isinstance(exc, ModelOutputError | EmptyResponseError):
        path = exc.detail.split(": ", 1)[0] if isinstance(exc, ModelOutputError) else ""
        dropped[card_id] = (path if "/" in path else f"idea_{card_id}", exc)
        return None
    raise exc


@dataclass(frozen=True)
class _CardSink:
    """Puts each generated card into the run's log as its step answers, so a failed block
    still records the cards that arrived; a card whose answer stayed invalid goes into round
    0's ``invalid`` with its error (dropped, never judged)."""

    log: ScoringLog
    first: RoundResult
    ids: tuple[str, ...]

    def __call__(self, i: int, answer: Answer[IdeaCard | None]) -> None:
        card_id = self.ids[i]
        if answer.value is not None:
            self.log.cards[card_id] = answer.value
            return
        error = answer.event.error
        self.first.invalid[card_id] = error.message if error is not None else "no card"


@dataclass(frozen=True)
class _VariantSink:
    """Puts each variant's card into the run's log, or, for a variant whose answer stayed
    invalid, its error into its round (the variant is dropped, not fatal)."""

    log: ScoringLog
    current: RoundResult
    ids: tuple[str, ...]

    def __call__(self, i: int, answer: Answer[IdeaCard | None]) -> None:
        card_id = self.ids[i]
        if answer.value is not None:
            self.log.cards[card_id] = answer.value
            return
        error = answer.event.error
        why = error.message if error is not None else "no card"
        self.current.invalid[card_id] = why
        logger.warning(
            "Round %d: variant %s dropped as invalid: %s", self.current.index, card_id, why
        )
