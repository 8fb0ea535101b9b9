"""The markers and section headers of the scoring prompts: the one declared protocol between
the code that writes a prompt and the code that reads one.

The prompt builders (:mod:`image_project.stages.scoring.prompts`,
:mod:`image_project.stages.scoring.rubrics`) write these strings; the offline backend's judges
and selector (:mod:`image_project.backends.offline`), the quality bench's simulated world
(``bench/quality.py``) and the wire tests find the parts of a prompt by them. Rewording a
prompt around a marker changes nothing for its readers; changing a marker changes it here,
for every reader at once, and the round-trip tests (``tests/test_markers.py``) build the real
prompts and parse them back.

A leaf module: it imports nothing, so every layer may read it.
"""

CONCEPTS = "Concepts:"
"""A judge prompt's first section: the concepts, one ``- `` line each."""

CONCEPTS_TO_BLEND = "Concepts to blend:"
"""An idea or variant prompt's first section: the concepts, one ``- `` line each."""

DIRECTION = "Your direction, which sets your pitch apart from the others: "
"""An idea prompt's direction, up to the next ``.`` and blank line."""

REWORK = "The idea card to rework:"
"""A variant prompt's parent card section (``Hook: ...`` lines)."""

DIRECTIVE = "Directive: "
"""A variant prompt's directive line."""

HOOK = "Hook: "
"""The first line of a card shown as labelled lines (a variant's parent, the selected card
in the final prompt): the card's hook."""

DO_NOT_COPY_OPEN = "<do_not_copy>"
DO_NOT_COPY_CLOSE = "</do_not_copy>"
"""Text a model must not copy (the profile in the hints request, the dislikes)."""

TASTE_HINTS = "What the viewer enjoys, in broad strokes:"
TASTE_DISLIKES = "Never depict:"
"""What a generator is told of the person: the hints, or the dislikes."""

PROFILE_AUTHORITATIVE = "The viewer's profile (authoritative):"
PROFILE_DISLIKES = "The viewer's dislikes (never acceptable; the likes are not shown):"
PROFILE_HINTS = "The viewer's taste in broad strokes (the profile itself is not shown):"
"""What a judge is shown of the person, by its ``profile`` view."""

RECENT_HISTORY = "Recent history:"
"""A judge prompt's novelty line: ``word (n/m)`` motifs of the recent prompts."""

IDEA_CARDS = "Idea cards, one JSON object per line:"
"""A judge prompt's cards section: one ``{"id": ..., ...}`` line per card."""

SCORE_EVERY = "Score every card id exactly once ("
"""A judge prompt's closing instruction, followed by the ids in the judge's order."""

SELECTOR_SLOTS = "Fill exactly these slots, one candidate each, in any order: "
"""A selector prompt's slots, comma separated, ending with ``.``."""

RUBRIC = "Rubric ("
"""A judge system prompt's rubric header, ``Rubric (<label>):`` on its own line."""

STAND_IN_WORDS: frozenset[str] = frozenset(
    [
        "image",
        "picture",
        "artwork",
        "string",
        "str",
        "value",
        "values",
        "example",
        "examples",
        "placeholder",
        "description",
        "sentence",
        "paragraph",
        "list",
        "item",
        "items",
        "tbd",
        "todo",
        "n/a",
        "na",
        "none",
        "null",
        "nil",
        "undefined",
        "etc",
    ]
)
"""Words that stand in for content, never are it (the card gate ``card_field`` rejects a card
string that is only one of them; the offline backend never answers a string with one)."""
