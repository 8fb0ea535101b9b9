"""Profile abstraction: generator-safe hints, and the code check that keeps them safe.

Generators must not see the raw likes (otherwise every card becomes "teal cats at dawn"),
so one stateless call turns the profile into broad hints::

    {"adjectives": ["quiet", "tactile", ...], "avoid": ["no gore", ...]}

and :func:`check_hints` verifies in code, deterministically, what the prompt asks for:

* no colour word (:data:`COLOUR_WORDS`, matched as whole words, case-insensitively);
* no 3-gram copied from the likes: no three consecutive words of one hint equal three
  consecutive words of one taste item (``Loves``, ``Likes`` or ``Notes``:
  everything but the dislikes), compared both as written ("rain on windows") and with
  stopwords dropped ("rain, windows, reflections" against "rain on windows and
  reflections");
* no short taste item copied whole: an item of exactly two content words ("Autumn
  forests") may not appear as two consecutive content words of a hint. (A one-word item is
  a broad adjective, which is what hints are made of.)

The gate ``hints_avoid`` (:func:`check_avoid`) rejects an ``avoid`` item made only of the
hints' own adjectives (``"quiet"``, ``"no quiet, tactile"``: the person's feel turned into a
prohibition, or the adjectives copied into both lists); the words of negation (``no``,
``not``, ``avoid``, ``never``, ...) are not counted.

A failing answer is re-asked with the violations listed, then the run fails (the step's
``max_reasks`` is ``prompt.scoring.max_reasks``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints

from image_project.engine.output import JsonOutput
from image_project.record.base import RecordModel
from image_project.record.gates import gate_error

_COLOUR_WORDS_TEXT = """
    red reds reddish orange oranges orangey yellow yellows yellowish green greens greenish
    blue blues bluish blueish purple purples purplish violet pink pinks pinkish brown browns
    brownish black blacks white whites grey greys greyish gray grays grayish teal turquoise
    cyan magenta crimson scarlet vermilion vermillion maroon burgundy indigo azure cobalt navy
    ultramarine cerulean emerald jade chartreuse lavender lilac mauve fuchsia beige ochre ocher
    umber sienna sepia taupe khaki ivory gold golden silver silvery bronze copper coppery amber
    aquamarine aqua saffron mustard tangerine coral salmon ruby sapphire periwinkle viridian
    vermeil cream russet auburn charcoal terracotta rust rusty plum olive slate mint rose rosy
    peach lime sage apricot celadon cinnabar
    """
COLOUR_WORDS: frozenset[str] = frozenset(_COLOUR_WORDS_TEXT.split())
"""Colour names the hints may not contain (whole words, any case)."""

_STOPWORDS_TEXT = """
    a an the and or but nor of in on at to for from by with without into onto over under
    through across near beside between among is are was were be been being it its this that
    these those as so than too very all any each every some no not only just own same such
    s t up down out off again then once here there when where why how what which who whom
    """
_STOPWORDS: frozenset[str] = frozenset(_STOPWORDS_TEXT.split())
_WORD_RE = re.compile(r"[a-z]+")


def tokens(text: str) -> list[str]:
    """Lower-case letter runs of ``text`` (hyphens and punctuation split words)."""
    return _WORD_RE.findall(text.lower().replace("\u2019", "'").replace("'", ""))


def content_tokens(text: str) -> list[str]:
    """:func:`tokens` without stopwords."""
    return [t for t in tokens(text) if t not in _STOPWORDS]


def _ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _like_grams(likes: Iterable[str]) -> set[tuple[str, ...]]:
    """The word groups a hint may not copy (see the module docstring): each item's 3-grams
    as written and without stopwords, and a two-content-word item whole. Groups never span
    two items."""
    grams: set[tuple[str, ...]] = set()
    for item in likes:
        content = content_tokens(item)
        grams |= _ngrams(tokens(item), 3) | _ngrams(content, 3)
        if len(content) == 2:
            grams.add(tuple(content))
    return grams


def _copied_grams(phrase: str, like_grams: set[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The word groups of ``phrase`` found in ``like_grams``."""
    content = content_tokens(phrase)
    mine = _ngrams(tokens(phrase), 3) | _ngrams(content, 3) | _ngrams(content, 2)
    return sorted(mine & like_grams)


_Hint = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=120)]


class ProfileHints(RecordModel):
    """The abstraction step's answer: broad adjectives and avoid-constraints."""

    model_config = ConfigDict(title="generator_profile_hints", strict=True)

    adjectives: list[_Hint] = Field(min_length=3, max_length=8)
    avoid: list[_Hint] = Field(default_factory=list, min_length=0, max_length=6)

    def phrases(self) -> tuple[str, ...]:
        return (*self.adjectives, *self.avoid)


def check_hints(
    phrases: Iterable[str], likes: Iterable[str], *, where: Sequence[str] = ()
) -> list[str]:
    """Every violation of the hint rules, as readable strings (empty = the hints are safe).

    A phrase is named by its place (``where[i]``, else ``hint <i+1>``), never quoted: the
    message goes back to the model in a re-ask. The colour words and the likes' words it
    names are the rule's and the step's input, not the answer's own text."""
    like_grams = _like_grams(likes)
    problems: list[str] = []
    for i, phrase in enumerate(phrases):
        name = where[i] if i < len(where) else f"hint {i + 1}"
        colours = sorted({t for t in tokens(phrase) if t in COLOUR_WORDS})
        if colours:
            problems.append(f"{name} names a colour ({', '.join(colours)})")
        copied = _copied_grams(phrase, like_grams)
        if copied:
            shown = ", ".join(" ".join(g) for g in copied[:3])
            problems.append(f"{name} copies words from the likes ({shown})")
    return problems


_NEGATIONS = frozenset({"avoid", "avoiding", "never", "dont", "don", "nothing", "none", "less"})


def check_avoid(hints: ProfileHints) -> list[str]:
    """Every ``avoid`` item whose content words (negations aside) are all words of the
    adjectives, as readable strings (empty = the avoid list is its own)."""
    feel = {t for adjective in hints.adjectives for t in content_tokens(adjective)}
    problems = []
    for i, item in enumerate(hints.avoid):
        words = [t for t in content_tokens(item) if t not in _NEGATIONS]
        if words and set(words) <= feel:
            problems.append(f"avoid[{i}] only repeats the adjectives")
    return problems


def hints_output(likes: Sequence[str]) -> JsonOutput[ProfileHints]:
    """The abstraction step's output: valid :class:`ProfileHints`, then :func:`check_hints`
    (a violation is a ``ValueError`` listing every problem, so it is re-asked) and
    :func:`check_avoid` (the gate ``hints_avoid``, re-asked with its reason)."""

    def check(hints: ProfileHints) -> ProfileHints:
        where = [f"adjectives[{i}]" for i in range(len(hints.adjectives))]
        where += [f"avoid[{i}]" for i in range(len(hints.avoid))]
        problems = check_hints(hints.phrases(), likes, where=where)
        repeated = check_avoid(hints)
        if repeated:
            raise gate_error(
                "hints_avoid",
                "; ".join(repeated + problems) + "; avoid must name what the person "
                "dislikes, never the feel they enjoy",
            )
        if problems:
            raise ValueError(
                "the hints must be broad and must not reveal the likes: " + "; ".join(problems)
            )
        return hints

    return JsonOutput(ProfileHints, check=check, what="hints")


def parse_hints(likes: Sequence[str]) -> Callable[[str], ProfileHints]:
    """:func:`hints_output`'s parse function: an answer in, :class:`ProfileHints` out."""
    return hints_output(likes).parse


def render_hints(hints: ProfileHints) -> str:
    lines = [f"Feel: {', '.join(hints.adjectives)}"]
    if hints.avoid:
        lines.append(f"Avoid: {'; '.join(hints.avoid)}")
    return "\n".join(lines)
