"""Titles for finished images: one engine :class:`~image_project.engine.ChatStep` that never
fails on a bad answer.

A valid title is one line of 2-4 words made of ASCII letters, single spaces and hyphens;
every hyphen segment of every word is Title Case (a capital then lowercase letters, e.g.
``Sea-Glass``) or a Roman numeral I-XX; no quotes; and no case-insensitive match with an
existing title. :func:`sanitize_title` cleans an answer, :func:`validate_title` says exactly
what is wrong with it, and :func:`disambiguate` turns anything into a valid, unique title.

:func:`title_step` builds the step: a stateless call (its own system prompt, no pipeline
history) whose ``parse`` sanitises and validates, re-asking with the reason up to
``max_attempts - 1`` times. When every answer is bad, the step's ``fallback`` builds the
result deterministically instead of failing (the transcript keeps every re-ask):

* ``source="llm"`` — an answer was valid as given;
* ``source="llm_disambiguated"`` — the most recent answer that was valid apart from
  colliding with an existing title, made unique with a Roman numeral;
* ``source="fallback"`` — no answer was usable: a loose clean-up of the last answer's first
  line (or ``Untitled Work``), made unique.

Because the manifest may change between the call and the moment the title is written,
:func:`resolve_collision` re-checks a result against a fresher list of titles.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from image_project.engine.budget import TokenBudget
from image_project.engine.nodes import ChatStep
from image_project.engine.output import ReaskPolicy, TextOutput
from image_project.engine.scope import Scope
from image_project.errors import EmptyPromptError, RefusalError
from image_project.record.run import TitleSource

if TYPE_CHECKING:
    from image_project.engine.context import Context

logger = logging.getLogger("image_project.title")

FALLBACK_TITLE = "Untitled Work"
TITLE_KEY = "title"
"""The title step's name; its value is a :class:`TitleResult`."""
MAX_AVOID_TITLES_IN_PROMPT = 25

TITLE_SYSTEM_PROMPT = (
    "You name finished artworks. Reply with a title for the image described by the user.\n"
    "Rules:\n"
    "- 2 to 4 words, each in Title Case (a capital letter followed by lowercase letters).\n"
    "- No quotes, no proper nouns, no numbers or digits.\n"
    "- No punctuation except a hyphen.\n"
    "- Output the title text only, on a single line, with no explanation."
)


def _to_roman(n: int) -> str:
    out = []
    for value, numeral in ((10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        count, n = divmod(n, value)
        out.append(numeral * count)
    return "".join(out)


ROMAN_NUMERALS: tuple[str, ...] = tuple(_to_roman(n) for n in range(1, 21))
_ROMAN_SET = frozenset(ROMAN_NUMERALS)
_TITLE_WORD = re.compile(r"[A-Z][a-z]*")
_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb\u201e\u201a\u2039\u203a"


@dataclass(frozen=True)
class TitleResult:
    """The outcome of title generation.

    ``raw`` is the model answer the title came from (the last answer for ``fallback``);
    ``attempts`` is how many answers the step saw.
    """

    title: str
    source: TitleSource
    raw: str
    attempts: int


class TitleCollisionError(ValueError):
    """A title that is valid except that it matches an existing title (case-insensitive)."""

    def __init__(self, title: str, existing: str) -> None:
        self.title = title
        self.existing = existing
        super().__init__(
            "the title is already taken (one of the existing titles, ignoring case); "
            "choose a different title"
        )


def _key(title: str) -> str:
    return " ".join(title.split()).casefold()


def _taken(existing: Iterable[object]) -> dict[str, str]:
    return {_key(t): t for t in existing if isinstance(t, str) and t.strip()}


def sanitize_title(raw: object) -> str:
    """The single line of ``raw`` with outer quotes stripped and whitespace collapsed.

    Outer quote pairs (straight, curly or guillemets, possibly nested) are removed. Raises
    ``ValueError`` with the reason when ``raw`` is not text, has no non-empty line, has more
    than one, or is empty once its quotes are removed.
    """
    if not isinstance(raw, str):
        raise ValueError(f"expected the title as text, got {type(raw).__name__}")
    lines = [ln.strip() for ln in raw.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("the answer is empty; reply with the title on one line")
    if len(lines) > 1:
        raise ValueError(
            f"the answer has {len(lines)} non-empty lines; reply with exactly one line "
            "containing only the title"
        )
    text = lines[0]
    while len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    text = " ".join(text.split())
    if not text:
        raise ValueError("the title is empty once its quotes are removed")
    return text


def validate_title(title: str, existing: Iterable[str]) -> None:
    """Raise ``ValueError`` with a specific reason unless ``title`` is a valid, unused title.

    Checks, in order: quote characters; characters outside ``[A-Za-z -]``; leading, trailing
    or repeated spaces; 2-4 words; stray hyphens; every hyphen segment Title Case or a Roman
    numeral I-XX; and finally a case-insensitive collision with ``existing``, reported as
    :class:`TitleCollisionError` (a ``ValueError``) so callers can tell "valid but taken"
    apart from "invalid".
    """
    quotes = sorted({ch for ch in title if ch in _QUOTES})
    if quotes:
        raise ValueError("the title contains quote characters; remove them")
    bad = sorted({ch for ch in title if not (ch.isascii() and (ch.isalpha() or ch in " -"))})
    if bad:
        raise ValueError(
            "the title contains characters other than letters, spaces and hyphens (ASCII "
            "only); use only those"
        )
    if title != " ".join(title.split()):
        raise ValueError("the title has leading, trailing or repeated spaces")
    words = title.split(" ")
    if not 2 <= len(words) <= 4:
        raise ValueError(f"the title has {len(words)} word(s); it must have 2 to 4 words")
    for n, word in enumerate(words, 1):
        segments = word.split("-")
        if not all(segments):
            raise ValueError(f"word {n} has a stray hyphen; use hyphens only inside words")
        for seg in segments:
            if not (_TITLE_WORD.fullmatch(seg) or seg in _ROMAN_SET):
                raise ValueError(
                    f"word {n} is not Title Case: write each word as a capital letter "
                    "followed by lowercase letters (or a Roman numeral I-XX)"
                )
    match = _taken(existing).get(_key(title))
    if match is not None:
        raise TitleCollisionError(title, match)


def _usable(title: object) -> str | None:
    """``title`` sanitised, if it is then valid apart from collisions."""
    try:
        clean = sanitize_title(title)
        validate_title(clean, ())
    except ValueError:
        return None
    return clean


def _loose_title(raw: object) -> str:
    """A permissive clean-up of the first non-empty line of ``raw``: accents folded, quotes
    and apostrophes dropped, every other non-letter turned into a space, words Title Cased,
    at most 4 kept; fewer than 2 words gives :data:`FALLBACK_TITLE`."""
    text = raw if isinstance(raw, str) else ""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    folded = "".join(
        ch for ch in unicodedata.normalize("NFKD", line) if not unicodedata.combining(ch)
    )
    letters = "".join(
        "" if ch in _QUOTES else ch if ch.isascii() and ch.isalpha() else " " for ch in folded
    )
    words = [w[0].upper() + w[1:].lower() for w in letters.split()][:4]
    return " ".join(words) if len(words) >= 2 else FALLBACK_TITLE


def _numeral_chain(n: int) -> str:
    """``n`` >= 1 in bijective base 20 with digits I..XX joined by hyphens: 2 -> ``II``,
    20 -> ``XX``, 21 -> ``I-I``, 40 -> ``I-XX``, 41 -> ``II-I``. Distinct for every ``n``
    and always a valid title word, so the numbering never runs out."""
    digits: list[str] = []
    while n > 0:
        n, r = divmod(n - 1, 20)
        digits.append(ROMAN_NUMERALS[r])
    return "-".join(reversed(digits))


def _stem(title: str) -> str:
    """``title`` without a numeral suffix added by an earlier disambiguation."""
    words = title.split(" ")
    segments = words[-1].split("-")
    if len(words) >= 2 and words[-1] != "I" and all(s in _ROMAN_SET for s in segments):
        return " ".join(words[:-1])
    keep = len(segments)
    while keep > 1 and segments[keep - 1] in _ROMAN_SET:
        keep -= 1
    words[-1] = "-".join(segments[:keep])
    return " ".join(words)


def _attach(stem: str, numeral: str) -> str:
    words = stem.split(" ")
    if len(words) >= 4:
        words[-1] = f"{words[-1]}-{numeral}"
    else:
        words.append(numeral)
    return " ".join(words)


def disambiguate(title: object, existing: Iterable[str]) -> str:
    """A valid title, unique among ``existing`` (case-insensitive), derived from ``title``.

    The rule, deterministic for the same inputs:

    1. The base is ``title`` sanitised, if it is then valid apart from collisions; otherwise
       a loose clean-up of its first line (letters and spaces only, Title Cased, 2-4 words),
       or ``Untitled Work``.
    2. An unused base is returned as it is.
    3. Otherwise any numeral suffix is removed from the base (``Turquoise Citadel II`` ->
       ``Turquoise Citadel``) and numerals II, III, ... XX are tried in turn, appended as a
       word to a title of 1-3 words (``Turquoise Citadel II``) or hyphenated onto the last
       word of a 4-word title (``Quiet Blue Harbor Dawn-II``). After XX come hyphenated
       numeral chains (``I-I``, ``I-II``, ..., ``II-I``, ...), so candidates are endless
       and all distinct: the first unused one is returned after at most
       ``len(existing) + 1`` tries.
    """
    taken = _taken(existing)
    base = _usable(title) or _loose_title(title)
    if _key(base) not in taken:
        return base
    stem = _stem(base)
    n = 2
    while True:
        candidate = _attach(stem, _numeral_chain(n))
        if _key(candidate) not in taken:
            return candidate
        n += 1


def resolve_collision(result: TitleResult, existing: Iterable[str]) -> TitleResult:
    """``result`` re-checked against a fresher list of existing titles.

    Unchanged when its title is still unused; otherwise the title is disambiguated
    (:func:`disambiguate`) and an ``llm`` source becomes ``llm_disambiguated`` (``raw`` and
    ``attempts`` are kept). Call it under the manifest lock, just before writing the row.
    """
    titles = list(existing)
    if _key(result.title) not in _taken(titles):
        return result
    source: TitleSource = "fallback" if result.source == "fallback" else "llm_disambiguated"
    return replace(result, title=disambiguate(result.title, titles), source=source)


def build_title_prompt(image_prompt: str, existing: Sequence[str]) -> str:
    """The user message: the image prompt, the first 25 existing titles to avoid, and the
    instruction to return only the title."""
    parts = [f"Prompt: {image_prompt.strip()}"]
    avoid = [" ".join(t.split()) for t in existing if isinstance(t, str) and t.strip()]
    avoid = avoid[:MAX_AVOID_TITLES_IN_PROMPT]
    if avoid:
        parts.append(
            "Existing titles to avoid (do not reuse any of them):\n"
            + "\n".join(f"- {t}" for t in avoid)
        )
    parts.append("Return ONLY the title text.")
    return "\n\n".join(parts)


def _title_reask(error: str) -> str:
    return (
        f"Your previous title was rejected: {error}\n"
        "Reply again with a single line containing only a new title: 2 to 4 Title Case "
        "words, letters, spaces and hyphens only, no quotes, and not one of the existing "
        "titles."
    )


@dataclass
class _AttemptState:
    """Per-run bookkeeping of the title step: answers seen, last collision."""

    seen: int = 0
    collided: tuple[str, str] | None = None  # (valid but taken title, its raw answer)

    def reset(self) -> None:
        self.seen = 0
        self.collided = None


def title_step(
    image_prompt: str,
    existing: Sequence[str],
    *,
    temperature: float = 0.2,
    max_attempts: int = 3,
    seed: int | None = None,
) -> ChatStep[TitleResult]:
    """The ``title`` step: its value is a :class:`TitleResult`.

    Stateless (system prompt :data:`TITLE_SYSTEM_PROMPT` + one user message, see
    :func:`build_title_prompt`), ``merge="none"``, so the pipeline conversation is unchanged.
    Every answer is sanitised and validated against ``existing`` (all of it, not only the
    25 shown); a bad one is re-asked with the reason, up to ``max_attempts`` answers in all.
    A blank answer counts as a bad answer. When all are bad the fallback (see the module
    docstring) returns a valid, unique title instead of raising. Only a refusal or a
    transport failure makes the step fail.

    ``attempts``: a successful parse reports the number of answers seen in this run (1..n);
    the fallback runs only after all ``max_attempts`` answers and reports ``max_attempts``.
    The count lives in a small closure reset when the step renders its prompt, i.e. at the
    start of each run: build one step per title, and do not run the same step object
    concurrently. A blank ``image_prompt`` fails before any model call (``EmptyPromptError``).
    """
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
    avoid = tuple(t for t in existing if isinstance(t, str) and t.strip())
    state = _AttemptState()

    def prompt(ctx: Context) -> str:
        state.reset()
        if not isinstance(image_prompt, str) or not image_prompt.strip():
            raise EmptyPromptError(
                f"title: the image prompt is blank ({image_prompt!r}); nothing to title, "
                "no model call was made"
            )
        return build_title_prompt(image_prompt, avoid)

    def parse(text: str) -> TitleResult:
        state.seen += 1
        title = sanitize_title(text)
        try:
            validate_title(title, avoid)
        except TitleCollisionError as exc:
            state.collided = (exc.title, text)
            raise
        return TitleResult(title, "llm", text, state.seen)

    def fallback(text: str, error: Exception) -> TitleResult:
        if isinstance(error, TitleCollisionError):
            collided: tuple[str, str] | None = (error.title, text)
        else:
            collided = state.collided
        if collided is not None:
            candidate, raw = collided
            return TitleResult(
                disambiguate(candidate, avoid), "llm_disambiguated", raw, max_attempts
            )
        return TitleResult(disambiguate(text, avoid), "fallback", text, max_attempts)

    return ChatStep(
        name="title",
        prompt=prompt,
        temperature=temperature,
        merge="none",
        seed=seed,
        max_output_tokens=TokenBudget("title"),
        stateless=True,
        system_prompt=TITLE_SYSTEM_PROMPT,
        output=TextOutput(parse),
        reask=ReaskPolicy(
            max=max_attempts - 1, style="restate", prompt=_title_reask, fallback=fallback
        ),
        allow_empty_response=True,
        meta={"max_attempts": max_attempts, "existing_titles": len(avoid)},
    )


async def run_title(
    scope: Scope,
    image_prompt: str,
    existing: Sequence[str],
    *,
    seed: int | None = None,
) -> TitleResult:
    """The title of a finished image: :func:`title_step` run as ``scope``'s next child.

    A title is never worth failing a finished image for: a refusal gives a deterministic
    fallback (``Untitled Work``, made unique) with ``source="fallback"`` and the refusal as
    ``raw``; bad answers already end in the step's own fallback. Transport errors propagate.
    """
    try:
        answer = await scope.ask(title_step(image_prompt, existing, seed=seed))
    except RefusalError as refusal:
        logger.warning("Title step refused (%s); using a deterministic fallback title", refusal)
        return TitleResult(
            disambiguate(FALLBACK_TITLE, existing), "fallback", refusal.output_preview, 1
        )
    return answer.value
