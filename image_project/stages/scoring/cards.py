"""Idea cards: the generator's output, the card ids and the diversity directions.

One generator call produces one card (:class:`~image_project.record.scoring.IdeaCard`, whose
strict JSON schema is what the server is asked for)::

    {"hook": "...", "narrative": "...",
     "options": {"composition": [2-4], "palette": [2-4], "medium": [1-3], "mood": [1-3]},
     "avoid": [0-4]}

``avoid`` is required by the schema (strict mode demands every key) but may be empty, and may
be omitted from an answer. String lengths are checked in code, not in the schema. The gate
``card_field`` (:func:`check_card_fields`) re-asks a card with a string that is empty,
punctuation only, or nothing but a schema field name or a placeholder word
(:data:`PLACEHOLDER_WORDS`); the gate ``card_degenerate`` (:func:`check_card_shape`) one
that stopped saying anything (cut at its length limit, a few words over and over, an option
that is the hook or repeats another). Ids ``A, B,
C, ...`` are assigned by code in declared order, so the model never invents or duplicates one;
an ``id`` key in the answer is rejected like any other unexpected key.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

from image_project import markers
from image_project.engine.output import JsonOutput
from image_project.record.gates import gate_error
from image_project.record.scoring import ITEM_MAX_CHARS, TEXT_MAX_CHARS, CandidateRecord, IdeaCard
from image_project.record.textshape import cut_at_limit, distinct_share, repetition_loop
from image_project.seeding import derive_seed, rng_for

_FIELD_NAMES = (
    "id hook narrative options option composition compositions palette palettes medium "
    "mediums media mood moods avoid idea card idea_card"
)
_BARE: frozenset[str] = frozenset(
    {w.replace("_", " ") for w in _FIELD_NAMES.split()} | markers.STAND_IN_WORDS
)
PLACEHOLDER_WORDS: frozenset[str] = frozenset(
    _BARE
    | {f"{article} {w}" for article in ("a", "an", "the") for w in _BARE}
    | {
        "lorem ipsum",
        "one sentence pitch",
        "a one sentence pitch",
        "short paragraph",
        "a short paragraph",
        "things the image must not show",
    }
)
"""What a card string may not be, all of it (case, punctuation and spacing ignored): the
card schema's field names and the placeholder words a weak model copies from a prompt or
schema instead of answering (``"image"``, ``"string"``, ``"..."`` has no letters at all)."""

_WORD = re.compile(r"[a-z0-9/]+")


def _field_problem(text: str) -> str | None:
    words = _WORD.findall(text.lower())
    if not any(ch.isalnum() for ch in text):
        return "is empty or punctuation only" if text.strip() else "is empty"
    if " ".join(words) in PLACEHOLDER_WORDS:
        return "says nothing (a field name or a stand-in word)"
    return None


def check_card_fields(card: IdeaCard) -> list[str]:
    """Every card string that says nothing (see :data:`PLACEHOLDER_WORDS`), as
    ``"<where> <problem>"`` (empty = the card is fine; the value is not quoted, the message
    goes back to the model in a re-ask)."""
    o = card.options
    fields: list[tuple[str, str]] = [("hook", card.hook), ("narrative", card.narrative)]
    for name, items in (
        ("options.composition", o.composition),
        ("options.palette", o.palette),
        ("options.medium", o.medium),
        ("options.mood", o.mood),
        ("avoid", card.avoid),
    ):
        fields += [(f"{name}[{i}]", item) for i, item in enumerate(items)]
    problems = []
    for where, text in fields:
        problem = _field_problem(text)
        if problem is not None:
            problems.append(f"{where} {problem}")
    return problems


MIN_DISTINCT_SHARE = 0.5
"""A card string of many words (:data:`~image_project.record.textshape.DISTINCT_MIN_WORDS`
or more) with fewer distinct words than this share of them repeats itself."""


HOOK_COPY_MIN_WORDS = 3
HOOK_COPIES = 3
"""Options equal to the hook are copies when there are at least :data:`HOOK_COPIES` of
them and the hook is a phrase of at least :data:`HOOK_COPY_MIN_WORDS` words (one short
hook may honestly name a medium too)."""
REPEATED_OPTION_SLOTS = 4
"""The same option in this many slots (any lists) repeats itself; twice in one list too.
The same word as a composition and a mood ("baroque") is a choice, not a loop."""


def _norm(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def check_card_shape(card: IdeaCard) -> list[str]:
    """Every sign that a card was written by a model that stopped saying anything (the
    ``card_degenerate`` gate), as ``"<where> <problem>"`` (empty = the card is fine): a
    string ended by its length limit, a long string with a low share of distinct words or a
    repetition loop, an option equal to the hook, the same option in several slots."""
    o = card.options
    fields: list[tuple[str, str, int]] = [
        ("hook", card.hook, TEXT_MAX_CHARS),
        ("narrative", card.narrative, TEXT_MAX_CHARS),
    ]
    options: list[tuple[str, str]] = []
    for name, items in (
        ("options.composition", o.composition),
        ("options.palette", o.palette),
        ("options.medium", o.medium),
        ("options.mood", o.mood),
    ):
        options += [(f"{name}[{i}]", item) for i, item in enumerate(items)]
    fields += [(where, text, ITEM_MAX_CHARS) for where, text in options]
    fields += [(f"avoid[{i}]", item, ITEM_MAX_CHARS) for i, item in enumerate(card.avoid)]
    problems: list[str] = []
    for where, text, limit in fields:
        if cut_at_limit(text, limit):
            problems.append(f"{where} was cut off at its {limit}-character limit")
        share = distinct_share(text)
        if share is not None and share < MIN_DISTINCT_SHARE:
            problems.append(f"{where} repeats itself (only {share:.0%} of its words distinct)")
        elif repetition_loop(text) is not None:
            problems.append(f"{where} is caught in a repetition loop (a phrase said again)")
    hook = _norm(card.hook)
    copies = [where for where, text in options if _norm(text) == hook]
    if len(copies) >= HOOK_COPIES and len(hook.split()) >= HOOK_COPY_MIN_WORDS:
        problems.append(f"{', '.join(copies)}: the hook again")
    slots: dict[str, list[str]] = {}
    for where, text in options:
        key = _norm(text)
        if key == hook and len(copies) >= HOOK_COPIES:
            continue
        earlier = slots.setdefault(key, [])
        same_list = [w for w in earlier if w.split("[")[0] == where.split("[")[0]]
        if same_list or len(earlier) + 1 >= REPEATED_OPTION_SLOTS:
            problems.append(f"{where} repeats {(same_list or earlier)[0]}")
        earlier.append(where)
    return problems


def _checked_card(card: IdeaCard) -> IdeaCard:
    problems = check_card_fields(card)
    if problems:
        raise gate_error(
            "card_field",
            "; ".join(problems[:6]) + "; write what the image shows in every field",
        )
    shape = check_card_shape(card)
    if shape:
        raise gate_error(
            "card_degenerate",
            "; ".join(shape[:6]) + "; write short, complete, distinct phrases in every field",
        )
    return card


CARD_OUTPUT: JsonOutput[IdeaCard] = JsonOutput(IdeaCard, check=_checked_card)
"""A generator's output: one :class:`IdeaCard` whose strings all say something (the
``card_field`` gate, :func:`check_card_fields`)."""


def parse_card(text: str) -> IdeaCard:
    """One card from a model answer, or ``ValueError`` saying what is wrong (for a re-ask)."""
    return CARD_OUTPUT.parse(text)


def card_ids(n: int) -> tuple[str, ...]:
    """``A, B, ..., Z, AA, AB, ...``: the ids of ``n`` cards, in order."""
    letters = string.ascii_uppercase
    out = []
    for i in range(n):
        label = ""
        k = i
        while True:
            label = letters[k % 26] + label
            k = k // 26 - 1
            if k < 0:
                break
        out.append(label)
    return tuple(out)


def card_text(card: IdeaCard) -> str:
    """Every word of a card as one text (for novelty statistics)."""
    o = card.options
    parts = [card.hook, card.narrative, *o.composition, *o.palette, *o.medium, *o.mood]
    return "\n".join(parts)


# -- diversity directions ---------------------------------------------------------------

# Two independent axes; each card gets a distinct (lens, register) pair from a seeded
# shuffle of all 48 pairs, so N independent calls are pushed apart instead of collapsing
# onto the single most likely idea.
_LENSES: tuple[str, ...] = (
    "an intimate close view of a small, telling detail",
    "a vast panoramic scale where figures are tiny",
    "an unexpected vantage point (from above, below or through something)",
    "a single decisive moment of motion",
    "a quiet, almost empty composition built on negative space",
    "dense, intricate detail that rewards a long look",
    "a scene told through light and shadow more than through objects",
    "a symbolic, dreamlike reading rather than a literal one",
)
_REGISTERS: tuple[str, ...] = (
    "tender",
    "playful",
    "mysterious",
    "monumental",
    "melancholic",
    "hopeful",
)
DIRECTIONS: tuple[str, ...] = tuple(
    f"{lens}; {reg} in tone" for lens in _LENSES for reg in _REGISTERS
)


def directions_for(run_seed: int, ids: Sequence[str]) -> tuple[CandidateRecord, ...]:
    """Each id's derived seed and direction (the cards are added once generated).
    Directions are distinct while ``len(ids)`` is at most ``len(DIRECTIONS)`` (48) and
    cycle through a second shuffle beyond that."""
    order = list(DIRECTIONS)
    rng_for(run_seed, "idea_directions").shuffle(order)
    return tuple(
        CandidateRecord(
            id=card_id,
            seed=derive_seed(run_seed, "step", "idea", card_id),
            direction=order[i % len(order)],
        )
        for i, card_id in enumerate(ids)
    )
