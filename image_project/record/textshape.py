"""The shapes of text a small model writes when it has stopped saying anything: a phrase
repeated back to back (a repetition loop), a long string of a few words over and over, a
string the grammar ended at its length limit. Pure functions over strings, for the gates
(``card_degenerate``, ``prose_loop``: :mod:`image_project.record.gates`)."""

from __future__ import annotations

import operator
import re

_WORD = re.compile(r"[^\W_]+(?:['\u2019-][^\W_]+)*")

LOOP_MIN_WORDS = 3
"""A phrase of this many words or more repeated back to back is a loop ("the composition of
the composition of"); English prose almost never says three words twice in a row."""
LOOP_SHORT_REPEATS = 4
"""A shorter phrase (one or two words) is a loop when it comes this many times in a row
("tactile, tactile, tactile, tactile"); "very, very" is prose."""
LOOP_MAX_WORDS = 30
"""The longest phrase looked for (bounds the work on a long answer)."""
DISTINCT_MIN_WORDS = 12
"""Below this many words a string is too short for :func:`distinct_share` to mean much."""


def words(text: str) -> list[str]:
    """The words of ``text``, lower case, punctuation dropped."""
    return [w.lower() for w in _WORD.findall(text)]


def repetition_loop(text: str) -> str | None:
    """The first repetition loop in ``text``, quoted, or None: a phrase of
    :data:`LOOP_MIN_WORDS` or more words said twice back to back, or of one or two words
    :data:`LOOP_SHORT_REPEATS` times in a row (punctuation and case ignored).

    "First": the shortest phrase, then the earliest. A phrase of ``size`` words said
    ``need`` times from word ``start`` is a run of ``(need - 1) * size`` words each equal to
    the word ``size`` places on, so each size is one comparison of the word list with itself
    shifted (``map`` over ``operator.eq``) and one substring search, not a slice per start:
    a gate runs on every card and prose answer."""
    ws = words(text)
    n = len(ws)
    for size in range(1, min(n // 2, LOOP_MAX_WORDS) + 1):
        need = 2 if size >= LOOP_MIN_WORDS else LOOP_SHORT_REPEATS
        if size * need > n:
            continue
        same = bytes(map(operator.eq, ws, ws[size:]))
        start = same.find(b"\x01" * ((need - 1) * size))
        if start >= 0:
            said = " ".join(ws[start : start + size])
            return f"{' '.join([said] * need)!r} repeats {said!r} {need} times in a row"
    return None


def distinct_share(text: str) -> float | None:
    """The share of distinct words among the words of ``text`` (1.0: no word twice), or None
    for a string of fewer than :data:`DISTINCT_MIN_WORDS` words."""
    ws = words(text)
    if len(ws) < DISTINCT_MIN_WORDS:
        return None
    return len(set(ws)) / len(ws)


def cut_at_limit(text: str, limit: int) -> bool:
    """Whether ``text`` looks ended by its length limit rather than by its writer: it is
    within two characters of ``limit`` and does not end a sentence or a quote."""
    stripped = text.strip()
    return len(stripped) >= limit - 2 and not stripped.endswith((".", "!", "?", '"', "'", ")"))
