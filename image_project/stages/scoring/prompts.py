"""Every prompt of the scoring wing: the system prompts of the hints, idea, variant and
selector steps, and the functions that write each user prompt from typed values (the brief,
the cards, the hints, a round's table). The parts that other code reads back (the offline
judges and selector, the quality bench, the wire tests) are written with the markers of
:mod:`image_project.markers`, so rewording a prompt cannot silently change its readers. The
judges' system prompts are :mod:`.rubrics`'.

Isolation lives here too: a generator prompt (idea, variant) is written from the concepts,
the generator-safe taste and, for a variant, the parent card and its directive; no function
that writes one takes a score, a rank, a judge's or a selector's words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from image_project import markers
from image_project.config.models import ProfileView, SurvivorCategory
from image_project.record.scoring import DEFAULT_PROTOCOL, IdeaCard, ScoreRow
from image_project.stages.scoring.hints import ProfileHints, render_hints
from image_project.stages.scoring.novelty import NoveltySummary
from image_project.stages.scoring.protocols import protocol_of
from image_project.stages.standard import Brief, concept_lines

HINTS_SYSTEM = (
    "You turn a person's art taste profile into broad, generator-safe hints for artists who "
    "will never see the profile. Reply with one JSON object only: adjectives (3 to 8 broad "
    "adjectives for the look and feel the person enjoys) and avoid (up to 6 general "
    "constraints drawn from the dislikes, such as 'no gore'). Rules, checked by code: no "
    "colour names at all; no named subjects, places, motifs or artists; never three "
    "consecutive words copied from the likes."
)

IDEA_SYSTEM = (
    "You are one of several independent art directors, each pitching ONE idea for an artwork. "
    "You never see the other pitches, so commit to your own direction. Reply with one JSON "
    "object only: hook (a one-sentence pitch); narrative (a short paragraph); options with "
    "composition (2-4 genuinely different layouts), palette (2-4 distinct palettes), medium "
    "(1-3) and mood (1-3), distinct choices rather than synonyms; avoid (0-4 things the image "
    "must not show)."
)

VARIANT_SYSTEM = (
    "You are an art director reworking ONE existing idea card for an artwork into a new "
    "variant. Follow the directive: change what it names decisively, keep the rest of the "
    "idea recognisable. Reply with one JSON object only, in the same form as the card: hook "
    "(a one-sentence pitch); narrative (a short paragraph); options with composition (2-4 "
    "genuinely different layouts), palette (2-4 distinct palettes), medium (1-3) and mood "
    "(1-3); avoid (0-4 things the image must not show)."
)

SELECTOR_SYSTEM = (
    "You choose which candidates of one round of an evolutionary search for an artwork idea "
    "carry forward; variants of each will be bred in the next round. Categories: performance "
    "(strong scores, proven), diversity (a clearly different approach worth exploring), "
    "potential (promising, with room to improve). Reply with one JSON object only: "
    '{"selections": [{"id": ..., "category": ..., "reason": ...}], "summary": ...}, one '
    "selection per slot you are given, each id at most once, a one-sentence reason each."
)


def _do_not_copy(text: str) -> str:
    return f"{markers.DO_NOT_COPY_OPEN}\n{text}\n{markers.DO_NOT_COPY_CLOSE}"


def hints_prompt(brief: Brief) -> str:
    """The profile abstraction's request: the whole profile, not to be copied."""
    return (
        "Summarise this taste as broad hints, in a register such as: quiet, intimate, "
        "weathered, luminous, tactile, airy, contemplative, handmade, nocturnal, serene.\n\n"
        f"{_do_not_copy(brief.preferences)}"
    )


def _taste(brief: Brief, hints: ProfileHints | None) -> str:
    """What a generator is told of the person: the generator-safe hints (when the run has
    them), or the dislikes."""
    if hints is not None:
        return f"{markers.TASTE_HINTS}\n{render_hints(hints)}"
    dislikes = "; ".join(brief.dislikes) or "nothing in particular"
    return f"{markers.TASTE_DISLIKES}\n{_do_not_copy(dislikes)}"


def idea_prompt(direction: str, brief: Brief, hints: ProfileHints | None) -> str:
    """One idea generator's request: the concepts, its own direction, the taste."""
    return (
        f"{markers.CONCEPTS_TO_BLEND}\n{concept_lines(brief.concepts)}\n\n"
        f"{markers.DIRECTION}{direction}.\n\n{_taste(brief, hints)}"
    )


def variant_prompt(
    parent: IdeaCard, directive: str, brief: Brief, hints: ProfileHints | None
) -> str:
    """A variant generator's request: the concepts, the parent card, its directive and the
    taste; never a score, a rank, a judge's or a selector's words (isolation)."""
    return (
        f"{markers.CONCEPTS_TO_BLEND}\n{concept_lines(brief.concepts)}\n\n"
        f"{markers.REWORK}\n{card_summary(parent)}\n\n"
        f"{markers.DIRECTIVE}{directive}.\n\n{_taste(brief, hints)}"
    )


def card_line(card_id: str, card: IdeaCard) -> str:
    """A card as one JSON line with its id first (how judges and the selector see it)."""
    return json.dumps({"id": card_id, **card.model_dump()}, ensure_ascii=False)


def card_summary(card: IdeaCard) -> str:
    """A card as labelled lines (how the variant and final-prompt steps see it)."""
    o = card.options
    lines = [
        f"{markers.HOOK}{card.hook}",
        f"Narrative: {card.narrative}",
        f"Composition options: {' | '.join(o.composition)}",
        f"Palette options: {' | '.join(o.palette)}",
        f"Medium: {' | '.join(o.medium)}",
        f"Mood: {' | '.join(o.mood)}",
    ]
    if card.avoid:
        lines.append(f"Avoid: {'; '.join(card.avoid)}")
    return "\n".join(lines)


def _profile_view(view: ProfileView, brief: Brief, hints: ProfileHints | None) -> str:
    """What a judge is shown of the person: the whole profile (``raw``, the first wave's
    view), only the dislikes, or the generator-safe hints."""
    if view == "dislikes_only":
        dislikes = "\n".join(f"- {d}" for d in brief.dislikes) or "- (none given)"
        return f"{markers.PROFILE_DISLIKES}\n{dislikes}\n"
    if view == "hints":
        assert hints is not None, "a judge with profile 'hints' runs only after the hints step"
        return f"{markers.PROFILE_HINTS}\n{render_hints(hints)}\n"
    return f"{markers.PROFILE_AUTHORITATIVE}\n{brief.preferences}\n"


def judge_prompt(
    order: Sequence[str],
    cards: Mapping[str, IdeaCard],
    brief: Brief,
    history: NoveltySummary | None,
    view: ProfileView,
    hints: ProfileHints | None,
    *,
    protocol: str = DEFAULT_PROTOCOL,
) -> str:
    """One judge's request: the concepts, its view of the person, the recent history (when
    novelty is used), the cards the call shows in the judge's own order (a ``pairwise``
    comparison: its two cards), and the answer's form under its ``protocol``
    (:mod:`.protocols`)."""
    shown = "\n".join(card_line(card_id, cards[card_id]) for card_id in order)
    recent = ""
    if history is not None:
        recent = (
            f"\n{markers.RECENT_HISTORY} {history.describe()} Prefer cards that do not "
            "lean on these.\n"
        )
    return (
        f"{markers.CONCEPTS}\n{concept_lines(brief.concepts)}\n\n"
        f"{_profile_view(view, brief, hints)}"
        f"{recent}\n"
        f"{markers.IDEA_CARDS}\n{shown}\n\n"
        f"{protocol_of(protocol).answer_form(tuple(order))}"
    )


def selector_prompt(
    round_index: int,
    generations: int,
    label: str,
    table: Sequence[ScoreRow],
    cards: Mapping[str, IdeaCard],
    slots: Sequence[SurvivorCategory],
) -> str:
    """The LLM survivor selector's request: the round's table with each card, and the slots
    to fill."""
    lines = "\n".join(
        json.dumps(
            {
                "id": row.id,
                label: row.aggregate,
                "effective": row.effective_score,
                "spread": row.spread,
                "judge_scores": row.judge_scores,
                "card": cards[row.id].model_dump(),
            },
            ensure_ascii=False,
        )
        for row in table
    )
    return (
        f"Round {round_index} of {generations} is judged ({label} of the judges' 0-100 "
        f"scores; effective = after the novelty penalty).\n\nCandidates, one JSON object "
        f"per line:\n{lines}\n\n{markers.SELECTOR_SLOTS}{', '.join(slots)}."
    )


def final_from_card(brief: Brief, card: IdeaCard) -> str:
    """The first final-prompt stage's request: the whole profile, the concepts and the
    selected card (the only part of scoring the final stages read)."""
    return (
        "We are creating one artwork for the person whose preferences follow. Treat the "
        "preferences as authoritative: lean into the likes and never depict the "
        "dislikes.\n\n"
        f"Preferences:\n{brief.preferences}\n\n"
        f"The concepts it blends:\n{concept_lines(brief.concepts)}\n\n"
        f"The chosen idea, to develop rather than replace:\n{card_summary(card)}\n\n"
        "Pick ONE option from each list (composition, palette, medium, mood) and write a "
        "concise, detailed description of the final image for an image-generation model: "
        "most important details first, the story shown through visual details and "
        "symbolism, style, medium and palette stated explicitly, one coherent scene."
    )
