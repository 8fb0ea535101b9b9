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
scoring prompt or answer is in the conversation afterwards; the final stages read the
selected card from ``ctx.outputs["selected_idea_card"]`` only, never the scores.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from image_project.artifacts import read_recent_prompts
from image_project.config import EffectiveJudge, ScoringConfig
from image_project.engine import ActionStep, Block, ChatStep, Context, Node
from image_project.errors import ImageProjectError, ModelOutputError, preview
from image_project.seeding import derive_seed, rng_for
from image_project.stages.scoring.cards import (
    CARD_SCHEMA,
    Candidate,
    IdeaCard,
    card_ids,
    card_text,
    card_to_dict,
    directions_for,
    parse_card,
)
from image_project.stages.scoring.hints import HINTS_SCHEMA, ProfileHints, parse_hints, render_hints
from image_project.stages.scoring.judges import (
    JudgeResult,
    JudgeStatus,
    judge_schema,
    parse_scores,
    require_quorum,
    status_of,
)
from image_project.stages.scoring.novelty import NoveltySummary, novelty_penalty, recent_motifs
from image_project.stages.scoring.selection import ScoreRow, Selection, aggregate, select
from image_project.stages.standard import STAGES, concept_lines, stage_block

__all__ = [
    "HINTS_KEY",
    "SELECTED_KEY",
    "NoveltyState",
    "ScoringPlan",
    "load_novelty",
    "scoring_pipeline",
]

logger = logging.getLogger("image_project.scoring")

HINTS_KEY = "generator_profile_hints"
SELECTED_KEY = "selected_idea_card"
_CARD_KEY = "idea_cards"
_JUDGE_KEY = "judge_results"
_SELECTION_KEY = "scoring.selection"
_TABLE_KEY = "scoring.score_table"


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "used": self.used,
            "window": self.window,
            "rows": self.summary.rows if self.summary else 0,
            "motifs": [m.to_dict() for m in self.summary.motifs] if self.summary else [],
            "warning": self.warning,
        }


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

_JUDGE_SYSTEM = (
    "You are a judge. You score idea cards for one specific viewer, numbers only: for each "
    "card an integer from 0 to 100 for how well it blends the concepts, suits the viewer's "
    "taste and stays fresh. Reply with ONLY the JSON object "
    '{"scores": [{"id": "<card id>", "score": <0-100>}, ...]}: every card id exactly once, '
    "no other keys, no explanation."
)


def _hints_prompt(ctx: Context) -> str:
    return (
        "Summarise this taste as broad hints, in a register such as: quiet, intimate, "
        "weathered, luminous, tactile, airy, contemplative, handmade, nocturnal, serene.\n\n"
        f"<do_not_copy>\n{ctx.outputs['preferences']}\n</do_not_copy>"
    )


def _idea_prompt(candidate: Candidate, use_hints: bool) -> object:
    def render(ctx: Context) -> str:
        if use_hints:
            hints = ctx.outputs[HINTS_KEY]
            assert isinstance(hints, ProfileHints)
            taste = f"What the viewer enjoys, in broad strokes:\n{render_hints(hints)}"
        else:
            dislikes = "; ".join(ctx.outputs.get("dislikes") or ()) or "nothing in particular"
            taste = f"Never depict:\n<do_not_copy>\n{dislikes}\n</do_not_copy>"
        return (
            f"Concepts to blend:\n{concept_lines(ctx)}\n\n"
            f"Your direction, which sets your pitch apart from the others: "
            f"{candidate.direction}.\n\n{taste}"
        )

    return render


def _judge_prompt(order: Sequence[str], novelty: NoveltyState) -> object:
    def render(ctx: Context) -> str:
        cards = ctx.outputs[_CARD_KEY]
        shown = "\n".join(
            json.dumps(card_to_dict(card_id, cards[card_id]), ensure_ascii=False)
            for card_id in order
        )
        history = ""
        if novelty.summary is not None:
            history = (
                f"\nRecent history: {novelty.summary.describe()} Prefer cards that do not "
                "lean on these.\n"
            )
        return (
            f"Concepts:\n{concept_lines(ctx)}\n\n"
            f"The viewer's profile (authoritative):\n{ctx.outputs['preferences']}\n"
            f"{history}\n"
            f"Idea cards, one JSON object per line:\n{shown}\n\n"
            f"Score every card id exactly once ({', '.join(order)}), integers 0-100. "
            'Output ONLY {"scores": [{"id": ..., "score": ...}, ...]}.'
        )

    return render


def _card_summary(card: Mapping[str, Any]) -> str:
    o = card["options"]
    lines = [
        f"Hook: {card['hook']}",
        f"Narrative: {card['narrative']}",
        f"Composition options: {' | '.join(o['composition'])}",
        f"Palette options: {' | '.join(o['palette'])}",
        f"Medium: {' | '.join(o['medium'])}",
        f"Mood: {' | '.join(o['mood'])}",
    ]
    if card.get("avoid"):
        lines.append(f"Avoid: {'; '.join(card['avoid'])}")
    return "\n".join(lines)


def _final_from_card(ctx: Context) -> str:
    card = ctx.outputs[SELECTED_KEY]
    return (
        "We are creating one artwork for the person whose preferences follow. Treat the "
        "preferences as authoritative: lean into the likes and never depict the dislikes.\n\n"
        f"Preferences:\n{ctx.outputs['preferences']}\n\n"
        f"The concepts it blends:\n{concept_lines(ctx)}\n\n"
        f"The chosen idea, to develop rather than replace:\n{_card_summary(card)}\n\n"
        "Pick ONE option from each list (composition, palette, medium, mood) and write a "
        "concise, detailed description of the final image for an image-generation model: "
        "most important details first, the story shown through visual details and symbolism, "
        "style, medium and palette stated explicitly, one coherent scene."
    )


# --------------------------------------------------------------------------- plan


@dataclass
class ScoringPlan:
    """The scoring tree of one run and what is needed to record it."""

    tree: Block
    scoring: ScoringConfig
    candidates: tuple[Candidate, ...]
    judges: tuple[EffectiveJudge, ...]
    orders: Mapping[str, tuple[str, ...]]
    judge_paths: Mapping[str, str]
    novelty: NoveltyState
    min_ok_judges: int
    answers: dict[str, int] = field(default_factory=dict)

    def record(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """The transcript's ``blackbox_scoring`` object from whatever the run got to."""
        s = self.scoring
        selection: Selection | None = outputs.get(_SELECTION_KEY)
        table: list[ScoreRow] = outputs.get(_TABLE_KEY) or []
        return {
            "enabled": True,
            "config_snapshot": {
                **s.model_dump(mode="json", exclude={"judges"}),
                "judges": [
                    {"id": j.id, "model": j.model, "temperature": j.temperature}
                    for j in self.judges
                ],
                "min_ok_judges": self.min_ok_judges,
            },
            "candidates": [c.to_dict() for c in self.candidates],
            "judges": [r.to_dict() for r in self.judge_results(outputs)],
            "score_table": [row.to_dict() for row in table],
            "selected_id": selection.selected_id if selection else None,
            "selected_score": selection.selected_score if selection else None,
            "exploration_rate": s.exploration_rate,
            "exploration_roll": selection.exploration_roll if selection else None,
            "selection_mode": selection.mode if selection else None,
            "selection": selection.to_dict() if selection else None,
            "novelty": self.novelty.to_dict(),
        }

    def judge_results(self, outputs: Mapping[str, Any]) -> list[JudgeResult]:
        """The structured result of each judge that ran, in ensemble order (none before the
        judges' block has finished, e.g. when an idea card failed)."""
        results = []
        for judge in self.judges:
            key = f"{_JUDGE_KEY}.{judge.id}"
            if key not in outputs:
                continue
            value = outputs[key]
            failure = value if isinstance(value, _JudgeFailure) else None
            results.append(
                JudgeResult(
                    judge_id=judge.id,
                    status=failure.status if failure else "ok",
                    scores=None if failure else value,
                    attempts=max(1, self.answers.get(judge.id, 0)),
                    model=judge.model,
                    temperature=judge.temperature,
                    order=self.orders[judge.id],
                    path=self.judge_paths[judge.id],
                    error=failure.error if failure else None,
                    output_preview=failure.output_preview if failure else None,
                )
            )
        return results

    def selected_card(self, outputs: Mapping[str, Any]) -> dict[str, Any] | None:
        card = outputs.get(SELECTED_KEY)
        return dict(card) if isinstance(card, Mapping) else None


@dataclass(frozen=True)
class _JudgeFailure:
    status: JudgeStatus
    error: str
    output_preview: str | None


def _judge_step(
    plan_answers: dict[str, int],
    judge: EffectiveJudge,
    order: tuple[str, ...],
    novelty: NoveltyState,
    *,
    run_seed: int,
    max_reasks: int,
) -> ChatStep:
    def parse(text: str) -> dict[str, int]:
        plan_answers[judge.id] = plan_answers.get(judge.id, 0) + 1
        if not text.strip():
            raise ValueError("the answer is empty; expected the scores JSON object")
        return parse_scores(text, order)

    def on_failure(exc: Exception) -> _JudgeFailure:
        output = exc.output_preview if isinstance(exc, ModelOutputError) else None
        return _JudgeFailure(status_of(exc), preview(str(exc), 300), output or None)

    return ChatStep(
        name=judge.id,
        prompt=_judge_prompt(order, novelty),  # type: ignore[arg-type]
        temperature=judge.temperature,
        model=judge.model,
        seed=derive_seed(run_seed, "step", "judge", judge.id),
        json_schema=judge_schema(order),
        stateless=True,
        system_prompt=_JUDGE_SYSTEM,
        merge="none",
        parse=parse,
        max_reasks=max_reasks,
        reask_style="restate",
        allow_empty_response=True,
        on_failure=on_failure,
        capture_key=f"{_JUDGE_KEY}.{judge.id}",
        meta={"role": "judge", "judge_id": judge.id, "order": list(order)},
    )


def scoring_pipeline(
    *,
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
    answers: dict[str, int] = {}

    scoring_nodes: list[Node] = []
    if use_hints:
        scoring_nodes.append(
            ChatStep(
                name="profile_abstraction",
                prompt=_hints_prompt,
                temperature=0.0,
                seed=derive_seed(run_seed, "step", "profile_abstraction"),
                json_schema=HINTS_SCHEMA,
                stateless=True,
                system_prompt=_HINTS_SYSTEM,
                merge="none",
                parse=parse_hints(likes),  # type: ignore[arg-type]
                max_reasks=scoring.max_reasks,
                reask_style="restate",
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
                    prompt=_idea_prompt(c, use_hints),  # type: ignore[arg-type]
                    temperature=scoring.generator_temperature,
                    seed=c.seed,
                    json_schema=CARD_SCHEMA,
                    stateless=True,
                    system_prompt=_IDEA_SYSTEM,
                    merge="none",
                    parse=parse_card,
                    max_reasks=scoring.max_reasks,
                    reask_style="restate",
                    capture_key=f"idea_card.{c.id}",
                    meta={"role": "idea", "card_id": c.id, "direction": c.direction},
                )
                for c in candidates
            ],
        )
    )

    def collect_cards(ctx: Context) -> dict[str, IdeaCard]:
        return {card_id: ctx.outputs[f"idea_card.{card_id}"] for card_id in ids}

    scoring_nodes.append(ActionStep(name="collect_cards", fn=collect_cards, capture_key=_CARD_KEY))
    scoring_nodes.append(
        Block(
            name="judges",
            merge="none",
            parallel=True,
            nodes=[
                _judge_step(
                    answers,
                    judge,
                    orders[judge.id],
                    novelty,
                    run_seed=run_seed,
                    max_reasks=scoring.max_reasks,
                )
                for judge in judges
            ],
        )
    )

    def choose(ctx: Context) -> dict[str, Any]:
        results = plan.judge_results(ctx.outputs)
        ok = require_quorum(results, plan.min_ok_judges)
        cards: Mapping[str, IdeaCard] = ctx.outputs[_CARD_KEY]
        penalties: dict[str, float] = {}
        if novelty.summary is not None:
            for card_id in ids:
                penalties[card_id] = novelty_penalty(card_text(cards[card_id]), novelty.summary)[0]
        table = aggregate(ids, {r.judge_id: r.scores or {} for r in ok}, penalties)
        ctx.outputs[_TABLE_KEY] = table
        selection = select(table, exploration_rate=scoring.exploration_rate, run_seed=run_seed)
        ctx.outputs[_SELECTION_KEY] = selection
        logger.info(
            "Selected candidate: id=%s, score=%s, selection_mode=%s",
            selection.selected_id,
            selection.selected_score,
            selection.mode,
        )
        return card_to_dict(selection.selected_id, cards[selection.selected_id])

    scoring_nodes.append(ActionStep(name="select", fn=choose, capture_key=SELECTED_KEY))

    dalle_prompt = dict(STAGES)["dalle_prompt_creation"]
    tree = Block(
        name="pipeline",
        merge="all_messages",
        nodes=[
            Block(name="blackbox_scoring", merge="none", nodes=scoring_nodes),
            stage_block(
                "final_prompt_from_selected_idea",
                _final_from_card,
                refine=refinement != "none",
                run_seed=run_seed,
                temperature=temperature,
            ),
            stage_block(
                "dalle_prompt_creation",
                dalle_prompt,
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
        answers=answers,
    )
    return plan
