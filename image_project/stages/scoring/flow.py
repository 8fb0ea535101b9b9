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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import JsonValue

from image_project.artifacts import read_recent_prompts
from image_project.config import EffectiveJudge, ProfileView, ScoringConfig
from image_project.engine import ActionStep, Block, ChatStep, Context, Node, PromptFn, ReaskPolicy
from image_project.errors import ImageProjectError, ModelOutputError, preview
from image_project.record.events import ChatEvent
from image_project.record.scoring import (
    CandidateRecord,
    IdeaCard,
    JudgeResult,
    JudgeStatus,
    NoveltyRecord,
    ScoreRow,
    ScoringRecord,
)
from image_project.seeding import derive_seed, rng_for
from image_project.stages.scoring.cards import CARD_OUTPUT, card_ids, card_text, directions_for
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


def _idea_prompt(candidate: CandidateRecord, brief: Brief, use_hints: bool) -> PromptFn:
    def render(ctx: Context) -> str:
        if use_hints:
            hints = ctx.outputs[HINTS_KEY]
            assert isinstance(hints, ProfileHints)
            taste = f"What the viewer enjoys, in broad strokes:\n{render_hints(hints)}"
        else:
            dislikes = "; ".join(brief.dislikes) or "nothing in particular"
            taste = f"Never depict:\n<do_not_copy>\n{dislikes}\n</do_not_copy>"
        return (
            f"Concepts to blend:\n{concept_lines(brief.concepts)}\n\n"
            f"Your direction, which sets your pitch apart from the others: "
            f"{candidate.direction}.\n\n{taste}"
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

    def outcome(self, ctx: Context) -> ScoringOutcome | None:
        """The select step's decision, once it has run."""
        value = ctx.outputs.get(OUTCOME_KEY)
        return value if isinstance(value, ScoringOutcome) else None

    def record(self, ctx: Context) -> ScoringRecord:
        """The scoring record from whatever the run got to."""
        s = self.scoring
        outcome = self.outcome(ctx)
        selection = outcome.selection if outcome else None
        return ScoringRecord(
            aggregation=s.aggregation,
            config_snapshot={
                **s.model_dump(mode="json", exclude={"judges"}),
                "judges": [_judge_snapshot(j) for j in self.judges],
                "min_ok_judges": self.min_ok_judges,
            },
            candidates=tuple(
                c.model_copy(update={"card": self._card(ctx, c.id)}) for c in self.candidates
            ),
            judges=tuple(self.judge_results(ctx)),
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
        answers = {e.path: e.answers for e in ctx.steps if isinstance(e, ChatEvent) and e.path}
        results = []
        for judge in self.judges:
            key = f"{_JUDGE_KEY}.{judge.id}"
            if key not in ctx.outputs:
                continue
            value = ctx.outputs[key]
            failure = value if isinstance(value, _JudgeFailure) else None
            path = self.judge_paths[judge.id]
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
                    order=self.orders[judge.id],
                    path=path,
                    scores=None if failure else value,
                    error=failure.error if failure else None,
                    output_preview=failure.output_preview if failure else None,
                )
            )
        return results


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
) -> ChatStep:
    return ChatStep(
        name=judge.id,
        prompt=_judge_prompt(order, brief, novelty, judge.profile),
        temperature=judge.temperature,
        model=judge.model,
        seed=derive_seed(run_seed, "step", "judge", judge.id),
        output=judge_output(order),
        reask=ReaskPolicy(max=max_reasks, style="restate"),
        stateless=True,
        system_prompt=judge_system_prompt(judge.rubric),
        merge="none",
        allow_empty_response=True,
        on_failure=_judge_failure,
        capture_key=f"{_JUDGE_KEY}.{judge.id}",
        meta={
            "role": "judge",
            "judge_id": judge.id,
            "order": list(order),
            "rubric": judge.rubric.label,
            "profile": judge.profile,
        },
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
    orders: dict[str, tuple[str, ...]] = {}
    for judge in judges:
        order = list(ids)
        rng_for(run_seed, "judge_order", judge.id).shuffle(order)
        orders[judge.id] = tuple(order)
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
        Block(
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
                    max_reasks=scoring.max_reasks,
                )
                for judge in judges
            ],
        )
    )

    def choose(ctx: Context) -> ScoringOutcome:
        ok = require_quorum(plan.judge_results(ctx), plan.min_ok_judges)
        cards = {card_id: ctx.outputs[_card_key(card_id)] for card_id in ids}
        penalties: dict[str, float] = {}
        if novelty.summary is not None:
            for card_id in ids:
                penalties[card_id] = novelty_penalty(card_text(cards[card_id]), novelty.summary)[0]
        table = aggregate(
            ids,
            {r.id: r.scores or {} for r in ok},
            penalties,
            method=scoring.aggregation,
            weights={r.id: r.weight for r in ok},
            trim=scoring.trim,
        )
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
    )
    return plan
