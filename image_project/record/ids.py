"""Generation ids: one pattern, checked wherever an id enters (a run, ``runs import``, the
store writer, a pending transcript's repair).

A generation id names files (``<id>_transcript.json``, ``<id>_image.jpg``, ``<id>.log``), a
review page and the store's key, so it must be a plain file name on every filesystem:
:data:`GENERATION_ID_PATTERN`, lower-case letters, digits, ``_`` and ``-``, starting with a
letter or digit, at most 64 characters (the store's column). Every id the product makes
matches it: a run's ``YYYYmmdd_HHMMSS_`` and 8 hex digits
(:func:`image_project.run.state.new_generation_id`), a campaign run's
``cYYYYmmdd_HHMMSS_xxxxxx_rNNNNN`` (:func:`image_project.campaign.queue.generation_id_for`).
Lower case only, so that two ids never name one file on a case-insensitive filesystem.
"""

from __future__ import annotations

import re
from typing import Final

GENERATION_ID_PATTERN: Final = r"[a-z0-9][a-z0-9_-]{0,63}"
"""What a generation id may be (a full match): see the module docstring."""

_ID = re.compile(GENERATION_ID_PATTERN)


def generation_id_problem(generation_id: object) -> str | None:
    """Why ``generation_id`` is not a generation id (one sentence naming it and the pattern),
    or None when it is one."""
    if isinstance(generation_id, str) and _ID.fullmatch(generation_id):
        return None
    shown = repr(generation_id)
    if len(shown) > 80:
        shown = (
            shown[:60]
            + f"… ({len(generation_id) if isinstance(generation_id, str) else '?'} characters)"
        )
    return f"generation id {shown} does not match {GENERATION_ID_PATTERN}"


def check_generation_id(generation_id: str) -> str:
    """``generation_id`` itself; ValueError (:func:`generation_id_problem`) when it is not
    one."""
    problem = generation_id_problem(generation_id)
    if problem is not None:
        raise ValueError(problem)
    return generation_id
