"""The black-box scoring flow as a step tree, and its transcript record.

Shape (``pipeline`` is the root; paths are the transcript's)::

    pipeline                                    merge all_messages
      blackbox_scoring                          merge none: nothing reaches the conversation
        profile_abstraction                     stateless; hints (when abstraction is on)
        ideas                                   parallel
          idea_A, idea_B, ...                   stateless; one card each, own seed/direction
        judges                                  parallel
          <judge id> ...                        stateless; recoverable (status, not failure)
        select                                  code: quorum, median, novelty, selector
      final_prompt_from_selected_idea           draft (+ ToT enclave unless refinement none)
      dalle_prompt_creation                     capture dalle_prompt (+ ToT with per_stage)

Isolation (FR7): every scoring step is stateless and the scoring block merges ``none``, so no
scoring prompt or answer is in the conversation afterwards; the final stages read only the
selected card (``ScoringOutcome.card`` of the ``select`` step's capture), never the scores.

The cards, judges, score table and selection are recorded by :meth:`ScoringPlan.record` as a
typed :class:`~image_project.record.scoring.ScoringRecord`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import JsonValue

from image_project.artifacts import read_recent_prompts
from image_project.config import EffectiveJudge, ProfileView, ScoringConfig, SurvivorCategory
from image_project.engine import (
    ActionStep,
    Block,
    ChatStep,
    Context,
    Deferred,
    Node,
    PromptFn,
    ReaskPolicy,
)
from image_project.errors import ImageProjectError, ModelOutputError, StepFailedError, preview
from image_project.record.events import ChatEvent
from image_project.record.scoring import (
    CandidateRecord,
    EvolutionRecord,
    IdeaCard,
    JudgeResult,
    JudgeStatus,
    NoveltyRecord,
    RoundCandidate,
    RoundRecord,
    ScoreRow,
    ScoringRecord,
    SelectorRecord,
    Survivor,
)
from image_project.seeding import derive_seed, rng_for
from image_project.stages.scoring.cards import CARD_OUTPUT, card_ids, card_text, directions_for
from image_project.stages.scoring.evolution import (
    Kept,
    SelectorAnswer,
    code_survivors,
    directive_for,
    drop_near_duplicates,
    selector_output,
    variant_ids,
)
from image_project.stages.scoring.hints import ProfileHints, hints_output, render_hints
from image_project.stages.scoring.judges import judge_output, require_quorum, status_of
from image_project.stages.scoring.novelty import NoveltySummary, novelty_penalty, recent_motifs
from image_project.stages.scoring.rubrics import judge_system_prompt
from image_project.stages.scoring.selection import Selection, aggregate, select
from image_project.stages.standard import Brief, concept_lines, stage_block, stage_prompt

__all__ = [
    "HINTS_KEY",
    "OUTCOME_KEY",
    "NoveltyState",
    "ScoringOutcome",
    "ScoringPlan",
    "describe_ensemble",
    "load_novelty",
    "scoring_pipeline",
]

logger = logging.getLogger("image_project.scoring")

HINTS_KEY = "generator_profile_hints"
OUTCOME_KEY = "scoring_outcome"
"""The select step's capture: a :class:`ScoringOutcome`."""
_CARD_KEY = "idea_card"
_JUDGE_KEY = "judge_results"


# --------------------------------------------------------------------------- novelty input


@dataclass(frozen=True)
class NoveltyState:
    """What novelty this run uses: ``used`` only when history was read; ``warning`` says why
    it was not when it should have been."""

    enabled: bool
    window: int
    summary: NoveltySummary | None = None
    warning: str | None = None

    @property
    def used(self) -> bool:
        return self.summary is not None

    def to_record(self) -> NoveltyRecord:
        return NoveltyRecord(
            enabled=self.enabled,
            used=self.used,
            window=self.window,
            rows=self.summary.rows if self.summary else 0,
            motifs=self.summary.motifs if self.summary else (),
            warning=self.warning,
        )


def load_novelty(enabled: bool, window: int, history_path: Path) -> NoveltyState:
    """Read the recent prompts for novelty.

    The one documented warn-and-continue of the scoring stage: a missing, empty or unreadable
    history logs a WARNING naming the path and the exception and turns novelty off for this
    run (recorded in ``warning``). ``enabled: false`` or ``window: 0`` turn it off quietly.
    """
    if not enabled or window <= 0:
        return NoveltyState(enabled=enabled and window > 0, window=window)
    try:
        prompts = read_recent_prompts(history_path, window)
        if not prompts:
            raise ValueError("the history has no final_image_prompt rows yet")
    except (OSError, ValueError, ImageProjectError) as exc:
        warning = (
            f"Novelty enabled but history unavailable; disabling novelty for this run: "
            f"{history_path} {type(exc).__name__}: {exc}"
        )
        logger.warning("%s", warning)
        return NoveltyState(enabled=True, window=window, warning=warning)
    return NoveltyState(enabled=True, window=window, summary=recent_motifs(prompts))


def describe_ensemble(
    scoring: ScoringConfig, judges: Sequence[EffectiveJudge], novelty: NoveltyState
) -> str:
    """The run log's one line about the scoring setup, with the judges' effective models."""
    described = ", ".join(
        f"{j.id}(model={j.model}, t={j.temperature:g}, rubric={j.rubric.label}, "
        f"profile={j.profile}, weight={j.weight:g})"
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


# --------------------------------------------------------------------------- prompts

_HINTS_SYSTEM = (
    "You turn a person's art taste profile into broad, generator-safe hints for artists who "
    "will never see the profile. Reply with one JSON object only: adjectives (3 to 8 broad "
    "adjectives for the look and feel the person enjoys) and avoid (up to 6 general "
    "constraints drawn from the dislikes, such as 'no gore'). Rules, checked by code: no "
    "colour names at all; no named subjects, places, motifs or artists; never three "
    "consecutive words copied from the likes."
)

_IDEA_SYSTEM = (
    "You are one of several independent art directors, each pitching ONE idea for an artwork. "
    "You never see the other pitches, so commit to your own direction. Reply with one JSON "
    "object only: hook (a one-sentence pitch); narrative (a short paragraph); options with "
    "composition (2-4 genuinely different layouts), palette (2-4 distinct palettes), medium "
    "(1-3) and mood (1-3), distinct choices rather than synonyms; avoid (0-4 things the image "
    "must not show)."
)


def _hints_prompt(brief: Brief) -> str:
    return (
        "Summarise this taste as broad hints, in a register such as: quiet, intimate, "
        "weathered, luminous, tactile, airy, contemplative, handmade, nocturnal, serene.\n\n"
        f"<do_not_copy>\n{brief.preferences}\n</do_not_copy>"
    )


def _taste(ctx: Context, brief: Brief, use_hints: bool) -> str:
    """What a generator is told of the person: the generator-safe hints, or the dislikes."""
    if use_hints:
        hints = ctx.outputs[HINTS_KEY]
        assert isinstance(hints, ProfileHints)
        return f"What the viewer enjoys, in broad strokes:\n{render_hints(hints)}"
    dislikes = "; ".join(brief.dislikes) or "nothing in particular"
    return f"Never depict:\n<do_not_copy>\n{dislikes}\n</do_not_copy>"


def _idea_prompt(candidate: CandidateRecord, brief: Brief, use_hints: bool) -> PromptFn:
    def render(ctx: Context) -> str:
        taste = _taste(ctx, brief, use_hints)
        return (
            f"Concepts to blend:\n{concept_lines(brief.concepts)}\n\n"
            f"Your direction, which sets your pitch apart from the others: "
            f"{candidate.direction}.\n\n{taste}"
        )

    return render


_VARIANT_SYSTEM = (
    "You are an art director reworking ONE existing idea card for an artwork into a new "
    "variant. Follow the directive: change what it names decisively, keep the rest of the "
    "idea recognisable. Reply with one JSON object only, in the same form as the card: hook "
    "(a one-sentence pitch); narrative (a short paragraph); options with composition (2-4 "
    "genuinely different layouts), palette (2-4 distinct palettes), medium (1-3) and mood "
    "(1-3); avoid (0-4 things the image must not show)."
)


def _variant_prompt(parent_id: str, directive: str, brief: Brief, use_hints: bool) -> PromptFn:
    """A variant generator sees the parent card, the concepts, the generator-safe taste and
    its directive: never a score, a rank, a judge's or a selector's words (isolation)."""

    def render(ctx: Context) -> str:
        parent = ctx.outputs[_card_key(parent_id)]
        assert isinstance(parent, IdeaCard)
        return (
            f"Concepts to blend:\n{concept_lines(brief.concepts)}\n\n"
            f"The idea card to rework:\n{_card_summary(parent)}\n\n"
            f"Directive: {directive}.\n\n{_taste(ctx, brief, use_hints)}"
        )

    return render


def _card_key(card_id: str) -> str:
    return f"{_CARD_KEY}.{card_id}"


def _card_line(card_id: str, card: IdeaCard) -> str:
    return json.dumps({"id": card_id, **card.model_dump()}, ensure_ascii=False)


def _profile_view(view: ProfileView, brief: Brief, ctx: Context) -> str:
    """What a judge is shown of the person: the whole profile (``raw``, the first wave's
    view), only the dislikes, or the generator-safe hints."""
    if view == "dislikes_only":
        dislikes = "\n".join(f"- {d}" for d in brief.dislikes) or "- (none given)"
        return f"The viewer's dislikes (never acceptable; the likes are not shown):\n{dislikes}\n"
    if view == "hints":
        hints = ctx.outputs[HINTS_KEY]
        assert isinstance(hints, ProfileHints)
        return (
            "The viewer's taste in broad strokes (the profile itself is not shown):\n"
            f"{render_hints(hints)}\n"
        )
    return f"The viewer's profile (authoritative):\n{brief.preferences}\n"


def _judge_prompt(
    order: Sequence[str], brief: Brief, novelty: NoveltyState, view: ProfileView
) -> PromptFn:
    def render(ctx: Context) -> str:
        shown = "\n".join(_card_line(card_id, ctx.outputs[_card_key(card_id)]) for card_id in order)
        history = ""
        if novelty.summary is not None:
            history = (
                f"\nRecent history: {novelty.summary.describe()} Prefer cards that do not "
                "lean on these.\n"
            )
        return (
            f"Concepts:\n{concept_lines(brief.concepts)}\n\n"
            f"{_profile_view(view, brief, ctx)}"
            f"{history}\n"
            f"Idea cards, one JSON object per line:\n{shown}\n\n"
            f"Score every card id exactly once ({', '.join(order)}), integers 0-100. "
            'Output ONLY {"scores": [{"id": ..., "score": ...}, ...]}.'
        )

    return render


def _card_summary(card: IdeaCard) -> str:
    o = card.options
    lines = [
        f"Hook: {card.hook}",
        f"Narrative: {card.narrative}",
        f"Composition options: {' | '.join(o.composition)}",
        f"Palette options: {' | '.join(o.palette)}",
        f"Medium: {' | '.join(o.medium)}",
        f"Mood: {' | '.join(o.mood)}",
    ]
    if card.avoid:
        lines.append(f"Avoid: {'; '.join(card.avoid)}")
    return "\n".join(lines)


def _final_from_card(brief: Brief) -> PromptFn:
    def render(ctx: Context) -> str:
        outcome = ctx.outputs[OUTCOME_KEY]
        assert isinstance(outcome, ScoringOutcome)
        return (
            "We are creating one artwork for the person whose preferences follow. Treat the "
            "preferences as authoritative: lean into the likes and never depict the "
            "dislikes.\n\n"
            f"Preferences:\n{brief.preferences}\n\n"
            f"The concepts it blends:\n{concept_lines(brief.concepts)}\n\n"
            f"The chosen idea, to develop rather than replace:\n{_card_summary(outcome.card)}\n\n"
            "Pick ONE option from each list (composition, palette, medium, mood) and write a "
            "concise, detailed description of the final image for an image-generation model: "
            "most important details first, the story shown through visual details and "
            "symbolism, style, medium and palette stated explicitly, one coherent scene."
        )

    return render


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class ScoringOutcome:
    """What the select step decided: the score table, the selection and the selected card
    (the only part of scoring that later steps read)."""

    table: tuple[ScoreRow, ...]
    selection: Selection
    card: IdeaCard


@dataclass(frozen=True)
class _JudgeFailure:
    status: JudgeStatus
    error: str
    output_preview: str | None


@dataclass(frozen=True)
class ScoringPlan:
    """The scoring tree of one run and what is needed to record it."""

    tree: Block
    scoring: ScoringConfig
    candidates: tuple[CandidateRecord, ...]
    judges: tuple[EffectiveJudge, ...]
    orders: Mapping[str, tuple[str, ...]]
    judge_paths: Mapping[str, str]
    novelty: NoveltyState
    min_ok_judges: int
    rounds: _Rounds | None = None

    def outcome(self, ctx: Context) -> ScoringOutcome | None:
        """The select step's decision, once it has run."""
        value = ctx.outputs.get(OUTCOME_KEY)
        return value if isinstance(value, ScoringOutcome) else None

    def record(self, ctx: Context) -> ScoringRecord:
        """The scoring record from whatever the run got to."""
        s = self.scoring
        outcome = self.outcome(ctx)
        selection = outcome.selection if outcome else None
        candidates = tuple(
            c.model_copy(update={"card": self._card(ctx, c.id)}) for c in self.candidates
        )
        judges = tuple(self.judge_results(ctx))
        evolution = None
        if self.rounds is not None:
            evolution = self.rounds.record(ctx)
            last = evolution.rounds[-1]
            if last.index > 0:
                candidates = self.rounds.final_candidates(ctx)
                judges = last.judges
        return ScoringRecord(
            aggregation=s.aggregation,
            config_snapshot={
                **s.model_dump(
                    mode="json",
                    exclude={"judges"} if s.evolution.enabled else {"judges", "evolution"},
                ),
                "judges": [_judge_snapshot(j) for j in self.judges],
                "min_ok_judges": self.min_ok_judges,
            },
            candidates=candidates,
            judges=judges,
            evolution=evolution,
            score_table=outcome.table if outcome else (),
            selected_id=selection.selected_id if selection else None,
            selected_score=selection.selected_score if selection else None,
            exploration_rate=s.exploration_rate,
            exploration_roll=selection.exploration_roll if selection else None,
            selection_mode=selection.mode if selection else None,
            selection=selection.detail if selection else None,
            novelty=self.novelty.to_record(),
        )

    @staticmethod
    def _card(ctx: Context, card_id: str) -> IdeaCard | None:
        card = ctx.outputs.get(_card_key(card_id))
        return card if isinstance(card, IdeaCard) else None

    def judge_results(self, ctx: Context) -> list[JudgeResult]:
        """The structured result of each judge that ran, in ensemble order (none before the
        judges' block has finished, e.g. when an idea card failed). ``attempts`` is the
        number of answers the judge's step received (at least 1)."""
        return _judge_results(ctx, self.judges, self.orders, self.judge_paths)


def _judge_snapshot(judge: EffectiveJudge) -> dict[str, JsonValue]:
    """A judge as configured, every fallback applied (a custom rubric's text included)."""
    rubric: dict[str, JsonValue] = {"name": judge.rubric.name, "source": judge.rubric.source}
    if judge.rubric.source != "builtin":
        rubric.update(text=judge.rubric.text, path=judge.rubric.path)
    return {
        "id": judge.id,
        "model": judge.model,
        "temperature": judge.temperature,
        "rubric": rubric,
        "weight": judge.weight,
        "profile": judge.profile,
    }


def _judge_failure(exc: Exception) -> _JudgeFailure:
    output = exc.output_preview if isinstance(exc, ModelOutputError) else None
    return _JudgeFailure(status_of(exc), preview(str(exc), 300), output or None)


def _judge_step(
    judge: EffectiveJudge,
    order: tuple[str, ...],
    brief: Brief,
    novelty: NoveltyState,
    *,
    run_seed: int,
    max_reasks: int,
    round_index: int = 0,
) -> ChatStep:
    """One judge's step; round 0 (the only round without evolution) keeps the first wave's
    seed labels, capture keys and meta, so a one-round run is recorded as before."""
    labels: tuple[str | int, ...] = (judge.id,) if round_index == 0 else (round_index, judge.id)
    meta: dict[str, object] = {} if round_index == 0 else {"round": round_index}
    return ChatStep(
        name=judge.id,
        prompt=_judge_prompt(order, brief, novelty, judge.profile),
        temperature=judge.temperature,
        model=judge.model,
        seed=derive_seed(run_seed, "step", "judge", *labels),
        output=judge_output(order),
        reask=ReaskPolicy(max=max_reasks, style="restate"),
        stateless=True,
        system_prompt=judge_system_prompt(judge.rubric),
        merge="none",
        allow_empty_response=True,
        on_failure=_judge_failure,
        capture_key=_judge_key(round_index, judge.id),
        meta={
            "role": "judge",
            "judge_id": judge.id,
            "order": list(order),
            "rubric": judge.rubric.label,
            "profile": judge.profile,
            **meta,
        },
    )


def _judge_key(round_index: int, judge_id: str) -> str:
    if round_index == 0:
        return f"{_JUDGE_KEY}.{judge_id}"
    return f"{_JUDGE_KEY}.r{round_index}.{judge_id}"


def _judge_results(
    ctx: Context,
    judges: Sequence[EffectiveJudge],
    orders: Mapping[str, tuple[str, ...]],
    paths: Mapping[str, str],
    round_index: int = 0,
) -> list[JudgeResult]:
    """The structured result of each judge of one round that ran, in ensemble order."""
    answers = {e.path: e.answers for e in ctx.steps if isinstance(e, ChatEvent) and e.path}
    results = []
    for judge in judges:
        key = _judge_key(round_index, judge.id)
        if key not in ctx.outputs:
            continue
        value = ctx.outputs[key]
        failure = value if isinstance(value, _JudgeFailure) else None
        path = paths[judge.id]
        results.append(
            JudgeResult(
                id=judge.id,
                model=judge.model,
                temperature=judge.temperature,
                rubric=judge.rubric.label,
                profile=judge.profile,
                weight=judge.weight,
                status=failure.status if failure else "ok",
                attempts=max(1, answers.get(path, 0)),
                order=orders[judge.id],
                path=path,
                scores=None if failure else value,
                error=failure.error if failure else None,
                output_preview=failure.output_preview if failure else None,
            )
        )
    return results


# --------------------------------------------------------------------------- rounds

_SELECTOR_SYSTEM = (
    "You choose which candidates of one round of an evolutionary search for an artwork idea "
    "carry forward; variants of each will be bred in the next round. Categories: performance "
    "(strong scores, proven), diversity (a clearly different approach worth exploring), "
    "potential (promising, with room to improve). Reply with one JSON object only: "
    '{"selections": [{"id": ..., "category": ..., "reason": ...}], "summary": ...}, one '
    "selection per slot you are given, each id at most once, a one-sentence reason each."
)


@dataclass(frozen=True)
class _Judged:
    """What a round sends to the judges (kept parents, then kept variants) and the variants
    dropped as near-duplicates before judging."""

    ids: tuple[str, ...]
    dropped: Mapping[str, object]


@dataclass(frozen=True)
class _Choice:
    """A round's survivors and who chose them."""

    survivors: tuple[Survivor, ...]
    selector: SelectorRecord


@dataclass(frozen=True)
class _SelectorFailure:
    error: str


def _plan_key(r: int) -> str:
    return f"evolution.plan.{r}"


def _judged_key(r: int) -> str:
    return f"evolution.judged.{r}"


def _table_key(r: int) -> str:
    return f"evolution.table.{r}"


def _survivors_key(r: int) -> str:
    return f"evolution.survivors.{r}"


def _selector_key(r: int) -> str:
    return f"evolution.selector.{r}"


def _judge_panel(
    judges: Sequence[EffectiveJudge],
    orders: Mapping[str, tuple[str, ...]],
    brief: Brief,
    novelty: NoveltyState,
    *,
    run_seed: int,
    max_reasks: int,
    round_index: int = 0,
) -> Block:
    """The judges of one round, in parallel, each shown the round's cards in its own order
    (``orders``, from :func:`_judge_orders`)."""
    return Block(
        name="judges",
        merge="none",
        parallel=True,
        nodes=[
            _judge_step(
                judge,
                orders[judge.id],
                brief,
                novelty,
                run_seed=run_seed,
                max_reasks=max_reasks,
                round_index=round_index,
            )
            for judge in judges
        ],
    )


def _judge_orders(
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
class _Rounds:
    """Multi-round selection (``prompt.scoring.evolution``): builds each later round when the
    run reaches it (the survivors decide its shape) and records every round."""

    brief: Brief
    run_seed: int
    scoring: ScoringConfig
    judges: tuple[EffectiveJudge, ...]
    novelty: NoveltyState
    first: tuple[CandidateRecord, ...]
    selector_model: str | None

    @property
    def generations(self) -> int:
        return self.scoring.evolution.generations

    @property
    def label(self) -> str:
        return self.scoring.aggregation

    # -- the tree -----------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        """Round 0's table and survivors (its cards and judges are the ordinary ones), then
        one deferred block per later round."""
        first: list[Node] = [
            ActionStep(name="table", fn=self._table_fn(0), capture_key=_table_key(0))
        ]
        first += self._survivor_nodes(0)
        nodes: list[Node] = [Block(name="round_0", merge="none", nodes=first)]
        for r in range(1, self.generations + 1):
            nodes.append(Deferred(name=f"round_{r}", build=self._round_builder(r)))
        return nodes

    def _round_builder(self, r: int) -> Callable[[Context], Node]:
        return lambda ctx: self._build_round(ctx, r)

    def _table_fn(self, r: int) -> Callable[[Context], tuple[ScoreRow, ...]]:
        return lambda ctx: self._table(ctx, r)

    def _survivor_nodes(self, r: int) -> list[Node]:
        nodes: list[Node] = []
        if self.scoring.evolution.selector == "llm":
            nodes.append(Deferred(name="selector", build=lambda ctx: self._selector_step(ctx, r)))
        nodes.append(
            ActionStep(
                name="survivors", fn=lambda ctx: self._choose(ctx, r), capture_key=_survivors_key(r)
            )
        )
        return nodes

    def _build_round(self, ctx: Context, r: int) -> Block:
        evo = self.scoring.evolution
        survivors = self.survivors(ctx, r - 1)
        known = {c.id: c for c in self.all_candidates(ctx)}
        ids = variant_ids(self.scoring.num_ideas, evo.survivors, evo.variants_per_survivor, r)
        planned: list[RoundCandidate] = []
        if evo.keep_parents:
            planned += [
                known[s.id].model_copy(update={"kind": "parent", "card": None, "dropped": None})
                for s in survivors
            ]
        steps: list[Node] = []
        for i, survivor in enumerate(survivors):
            for v in range(evo.variants_per_survivor):
                card_id = ids[i * evo.variants_per_survivor + v]
                variant = RoundCandidate(
                    id=card_id,
                    kind="variant",
                    parent=survivor.id,
                    directive=directive_for(self.run_seed, r, card_id),
                    seed=derive_seed(self.run_seed, "step", "variant", r, card_id),
                )
                planned.append(variant)
                steps.append(self._variant_step(variant, r))
        ctx.outputs[_plan_key(r)] = tuple(planned)
        nodes: list[Node] = [
            Block(name="variants", merge="none", parallel=True, nodes=steps),
            ActionStep(name="dedupe", fn=lambda c: self._dedupe(c, r), capture_key=_judged_key(r)),
            Deferred(name="judges", build=lambda c: self._judges_block(c, r)),
            ActionStep(name="table", fn=self._table_fn(r), capture_key=_table_key(r)),
        ]
        if r < self.generations:
            nodes += self._survivor_nodes(r)
        return Block(name=f"round_{r}", merge="none", nodes=nodes)

    def _variant_step(self, variant: RoundCandidate, r: int) -> ChatStep:
        assert variant.parent is not None
        return ChatStep(
            name=f"variant_{variant.id}",
            prompt=_variant_prompt(
                variant.parent,
                variant.directive,
                self.brief,
                self.scoring.generator_profile_abstraction,
            ),
            temperature=self.scoring.generator_temperature,
            seed=variant.seed,
            output=CARD_OUTPUT,
            reask=ReaskPolicy(max=self.scoring.max_reasks, style="restate"),
            stateless=True,
            system_prompt=_VARIANT_SYSTEM,
            merge="none",
            capture_key=_card_key(variant.id),
            meta={
                "role": "variant",
                "card_id": variant.id,
                "parent": variant.parent,
                "round": r,
                "directive": variant.directive,
            },
        )

    def _dedupe(self, ctx: Context, r: int) -> _Judged:
        planned = self.planned(ctx, r)
        parents = [s.id for s in self.survivors(ctx, r - 1)]
        variants = [c.id for c in planned if c.kind == "variant"]
        cards = {i: ctx.outputs[_card_key(i)] for i in (*parents, *variants)}
        kept: Kept = drop_near_duplicates(
            parents, variants, cards, self.scoring.evolution.near_duplicate_distance
        )
        for card_id, why in kept.dropped.items():
            logger.info(
                "Round %d: variant %s dropped before judging: distance %.2f to %s < %g",
                r,
                card_id,
                why.distance,
                why.of,
                why.threshold,
            )
        judged = (*(parents if self.scoring.evolution.keep_parents else ()), *kept.ids)
        if not judged:
            raise StepFailedError(
                f"round {r}: every variant was a near-duplicate of its parent or another "
                f"variant (prompt.scoring.evolution.near_duplicate_distance "
                f"{self.scoring.evolution.near_duplicate_distance:g}), so nothing is left to judge"
            )
        return _Judged(ids=judged, dropped=dict(kept.dropped))

    def orders(self, ids: Sequence[str], r: int) -> dict[str, tuple[str, ...]]:
        return _judge_orders(self.run_seed, self.judges, ids, r)

    def paths(self, r: int) -> dict[str, str]:
        base = "pipeline/blackbox_scoring" + ("" if r == 0 else f"/round_{r}")
        return {j.id: f"{base}/judges/{j.id}" for j in self.judges}

    def _judges_block(self, ctx: Context, r: int) -> Block:
        judged = ctx.outputs[_judged_key(r)]
        assert isinstance(judged, _Judged)
        return _judge_panel(
            self.judges,
            self.orders(judged.ids, r),
            self.brief,
            self.novelty,
            run_seed=self.run_seed,
            max_reasks=self.scoring.max_reasks,
            round_index=r,
        )

    # -- scores and survivors -----------------------------------------------------------

    def judged_ids(self, ctx: Context, r: int) -> tuple[str, ...]:
        if r == 0:
            return tuple(c.id for c in self.first)
        judged = ctx.outputs.get(_judged_key(r))
        return judged.ids if isinstance(judged, _Judged) else ()

    def results(self, ctx: Context, r: int) -> list[JudgeResult]:
        ids = self.judged_ids(ctx, r)
        if not ids:
            return []
        return _judge_results(ctx, self.judges, self.orders(ids, r), self.paths(r), r)

    def _table(self, ctx: Context, r: int) -> tuple[ScoreRow, ...]:
        ids = self.judged_ids(ctx, r)
        table = tuple(_score_rows(ctx, ids, self.results(ctx, r), self.scoring, self.novelty))
        best = max(table, key=lambda row: (row.effective_score, row.aggregate))
        logger.info(
            "Round %d: %d candidate(s) judged, best %s %s (%s)",
            r,
            len(table),
            self.label,
            best.aggregate,
            best.id,
        )
        return table

    def table(self, ctx: Context, r: int) -> tuple[ScoreRow, ...]:
        value = ctx.outputs.get(_table_key(r))
        return value if isinstance(value, tuple) else ()

    def _categories(self, ctx: Context, r: int) -> tuple[SurvivorCategory, ...]:
        evo = self.scoring.evolution
        count = min(evo.survivors, len(self.table(ctx, r)))
        return evo.quota.categories(count)

    def _cards(self, ctx: Context, ids: Sequence[str]) -> dict[str, IdeaCard]:
        return {i: ctx.outputs[_card_key(i)] for i in ids}

    def _selector_step(self, ctx: Context, r: int) -> ChatStep:
        table = self.table(ctx, r)
        ids = [row.id for row in table]
        cards = self._cards(ctx, ids)
        categories = self._categories(ctx, r)
        lines = "\n".join(
            json.dumps(
                {
                    "id": row.id,
                    self.label: row.aggregate,
                    "effective": row.effective_score,
                    "spread": row.spread,
                    "judge_scores": row.judge_scores,
                    "card": cards[row.id].model_dump(),
                },
                ensure_ascii=False,
            )
            for row in table
        )
        prompt = (
            f"Round {r} of {self.generations} is judged ({self.label} of the judges' 0-100 "
            f"scores; effective = after the novelty penalty).\n\nCandidates, one JSON object "
            f"per line:\n{lines}\n\nFill exactly these slots, one candidate each, in any "
            f"order: {', '.join(categories)}."
        )
        return ChatStep(
            name="selector",
            prompt=prompt,
            temperature=0.0,
            model=self.selector_model,
            seed=derive_seed(self.run_seed, "step", "selector", r),
            output=selector_output(ids, categories),
            reask=ReaskPolicy(max=self.scoring.max_reasks, style="restate"),
            stateless=True,
            system_prompt=_SELECTOR_SYSTEM,
            merge="none",
            allow_empty_response=True,
            on_failure=lambda exc: _SelectorFailure(preview(str(exc), 300)),
            capture_key=_selector_key(r),
            meta={"role": "selector", "round": r, "slots": list(categories)},
        )

    def _choose(self, ctx: Context, r: int) -> _Choice:
        table = self.table(ctx, r)
        categories = self._categories(ctx, r)
        code = code_survivors(
            table, self._cards(ctx, [row.id for row in table]), categories, label=self.label
        )
        choice = _Choice(code, SelectorRecord(kind="code", status="ok"))
        if self.scoring.evolution.selector == "llm":
            choice = self._llm_choice(ctx, r, code)
        logger.info(
            "Round %d survivors (%s): %s",
            r,
            choice.selector.kind,
            "; ".join(f"{s.id} {s.category}: {s.reason}" for s in choice.survivors),
        )
        return choice

    def _llm_choice(self, ctx: Context, r: int, code: tuple[Survivor, ...]) -> _Choice:
        path = f"pipeline/blackbox_scoring/round_{r}/selector"
        answers = next(
            (e.answers for e in ctx.steps if isinstance(e, ChatEvent) and e.path == path), 0
        )
        value = ctx.outputs.get(_selector_key(r))
        model = self.selector_model
        if isinstance(value, SelectorAnswer):
            survivors = tuple(
                Survivor(id=p.id, category=p.category, reason=p.reason, proposed_by="llm")
                for p in value.selections
            )
            record = SelectorRecord(
                kind="llm",
                status="ok",
                attempts=answers,
                model=model,
                path=path,
                summary=value.summary,
            )
            return _Choice(survivors, record)
        error = value.error if isinstance(value, _SelectorFailure) else "no answer"
        warning = (
            f"round {r}: the LLM selector's proposal was still invalid after {answers} "
            f"answer(s), so the code choice is used instead: {error}"
        )
        logger.warning("SELECTOR FALLBACK: %s", warning)
        record = SelectorRecord(
            kind="llm",
            status="fallback",
            attempts=answers,
            model=model,
            path=path,
            warning=warning,
        )
        return _Choice(code, record)

    def survivors(self, ctx: Context, r: int) -> tuple[Survivor, ...]:
        value = ctx.outputs.get(_survivors_key(r))
        return value.survivors if isinstance(value, _Choice) else ()

    # -- the record ---------------------------------------------------------------------

    def planned(self, ctx: Context, r: int) -> tuple[RoundCandidate, ...]:
        if r == 0:
            return tuple(
                RoundCandidate(
                    id=c.id, kind="card", parent=None, directive=c.direction, seed=c.seed
                )
                for c in self.first
            )
        value = ctx.outputs.get(_plan_key(r))
        return value if isinstance(value, tuple) else ()

    def all_candidates(self, ctx: Context) -> list[RoundCandidate]:
        """Every candidate written so far (first appearance), any round."""
        seen: dict[str, RoundCandidate] = {}
        for r in range(self.generations + 1):
            for c in self.planned(ctx, r):
                if c.kind != "parent":
                    seen.setdefault(c.id, c)
        return list(seen.values())

    def last_round(self, ctx: Context) -> int:
        """The last round the run planned (0 until round 1 is built)."""
        return max(r for r in range(self.generations + 1) if r == 0 or self.planned(ctx, r))

    def round_record(self, ctx: Context, r: int) -> RoundRecord:
        judged = ctx.outputs.get(_judged_key(r))
        dropped = judged.dropped if isinstance(judged, _Judged) else {}
        candidates = tuple(
            c.model_copy(
                update={
                    "card": ScoringPlan._card(ctx, c.id),
                    "dropped": dropped.get(c.id),
                }
            )
            for c in self.planned(ctx, r)
        )
        choice = ctx.outputs.get(_survivors_key(r))
        return RoundRecord(
            index=r,
            candidates=candidates,
            judges=tuple(self.results(ctx, r)),
            score_table=self.table(ctx, r),
            survivors=choice.survivors if isinstance(choice, _Choice) else (),
            selector=choice.selector if isinstance(choice, _Choice) else None,
        )

    def record(self, ctx: Context) -> EvolutionRecord:
        evo = self.scoring.evolution
        return EvolutionRecord(
            generations=evo.generations,
            survivors=evo.survivors,
            variants_per_survivor=evo.variants_per_survivor,
            keep_parents=evo.keep_parents,
            selector=evo.selector,
            rounds=tuple(self.round_record(ctx, r) for r in range(self.last_round(ctx) + 1)),
        )

    def final_candidates(self, ctx: Context) -> tuple[CandidateRecord, ...]:
        """The last round's judged candidates, as the top-level record lists them."""
        r = self.last_round(ctx)
        if r == 0:
            return ()
        ids = set(self.judged_ids(ctx, r))
        return tuple(
            CandidateRecord(
                id=c.id,
                seed=c.seed,
                direction=c.directive,
                card=ScoringPlan._card(ctx, c.id),
            )
            for c in self.planned(ctx, r)
            if c.id in ids or not ids
        )


def _score_rows(
    ctx: Context,
    ids: Sequence[str],
    results: Sequence[JudgeResult],
    scoring: ScoringConfig,
    novelty: NoveltyState,
) -> list[ScoreRow]:
    """The score table of one round: the quorum, then the aggregate and novelty penalty of
    every card (the first wave's ``select`` logic, shared by every round)."""
    ok = require_quorum(results, scoring.effective_min_ok_judges)
    cards = {card_id: ctx.outputs[_card_key(card_id)] for card_id in ids}
    penalties: dict[str, float] = {}
    if novelty.summary is not None:
        for card_id in ids:
            penalties[card_id] = novelty_penalty(card_text(cards[card_id]), novelty.summary)[0]
    return aggregate(
        ids,
        {r.id: r.scores or {} for r in ok},
        penalties,
        method=scoring.aggregation,
        weights={r.id: r.weight for r in ok},
        trim=scoring.trim,
    )


def scoring_pipeline(
    *,
    brief: Brief,
    run_seed: int,
    scoring: ScoringConfig,
    judges: Sequence[EffectiveJudge],
    likes: Sequence[str],
    novelty: NoveltyState,
    refinement: str,
    temperature: float,
) -> ScoringPlan:
    """The whole prompt pipeline of a scoring run (see the module docstring)."""
    ids = card_ids(scoring.num_ideas)
    candidates = directions_for(run_seed, ids)
    judges = tuple(judges)
    orders = _judge_orders(run_seed, judges, ids, 0)
    use_hints = scoring.generator_profile_abstraction
    reask = ReaskPolicy(max=scoring.max_reasks, style="restate")

    scoring_nodes: list[Node] = []
    if use_hints:
        scoring_nodes.append(
            ChatStep(
                name="profile_abstraction",
                prompt=_hints_prompt(brief),
                temperature=0.0,
                seed=derive_seed(run_seed, "step", "profile_abstraction"),
                output=hints_output(likes),
                reask=reask,
                stateless=True,
                system_prompt=_HINTS_SYSTEM,
                merge="none",
                capture_key=HINTS_KEY,
            )
        )
    scoring_nodes.append(
        Block(
            name="ideas",
            merge="none",
            parallel=True,
            nodes=[
                ChatStep(
                    name=f"idea_{c.id}",
                    prompt=_idea_prompt(c, brief, use_hints),
                    temperature=scoring.generator_temperature,
                    seed=c.seed,
                    output=CARD_OUTPUT,
                    reask=reask,
                    stateless=True,
                    system_prompt=_IDEA_SYSTEM,
                    merge="none",
                    capture_key=_card_key(c.id),
                    meta={"role": "idea", "card_id": c.id, "direction": c.direction},
                )
                for c in candidates
            ],
        )
    )
    scoring_nodes.append(
        _judge_panel(
            judges, orders, brief, novelty, run_seed=run_seed, max_reasks=scoring.max_reasks
        )
    )

    rounds = (
        _Rounds(
            brief=brief,
            run_seed=run_seed,
            scoring=scoring,
            judges=judges,
            novelty=novelty,
            first=candidates,
            selector_model=scoring.evolution.selector_model or scoring.judge_model,
        )
        if scoring.evolution.enabled
        else None
    )
    if rounds is not None:
        scoring_nodes += rounds.nodes()

    def choose(ctx: Context) -> ScoringOutcome:
        if rounds is not None:
            table = list(rounds.table(ctx, rounds.generations))
        else:
            table = _score_rows(ctx, ids, plan.judge_results(ctx), scoring, novelty)
        cards = {row.id: ctx.outputs[_card_key(row.id)] for row in table}
        selection = select(table, exploration_rate=scoring.exploration_rate, run_seed=run_seed)
        logger.info(
            "Selected candidate: id=%s, score=%s, selection_mode=%s",
            selection.selected_id,
            selection.selected_score,
            selection.mode,
        )
        return ScoringOutcome(tuple(table), selection, cards[selection.selected_id])

    scoring_nodes.append(ActionStep(name="select", fn=choose, capture_key=OUTCOME_KEY))

    tree = Block(
        name="pipeline",
        merge="all_messages",
        nodes=[
            Block(name="blackbox_scoring", merge="none", nodes=scoring_nodes),
            stage_block(
                "final_prompt_from_selected_idea",
                _final_from_card(brief),
                brief=brief,
                refine=refinement != "none",
                run_seed=run_seed,
                temperature=temperature,
            ),
            stage_block(
                "dalle_prompt_creation",
                stage_prompt("dalle_prompt_creation", brief),
                brief=brief,
                refine=refinement == "per_stage",
                run_seed=run_seed,
                temperature=temperature,
            ),
        ],
    )
    plan = ScoringPlan(
        tree=tree,
        scoring=scoring,
        candidates=candidates,
        judges=judges,
        orders=orders,
        judge_paths={j.id: f"pipeline/blackbox_scoring/judges/{j.id}" for j in judges},
        novelty=novelty,
        min_ok_judges=scoring.effective_min_ok_judges,
        rounds=rounds,
    )
    return plan
