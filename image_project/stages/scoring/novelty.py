"""Novelty: recent motifs from the generations history, and a penalty per card. No model.

Statistics (deterministic): over the last ``window`` final image prompts, each content word
(letters only, at least 3 characters, not a stopword, not a prompt-format word such as
"subject" or "lighting") counts once per prompt it appears in. A word is a **motif** when it
appears in at least 2 prompts and in at least 20% of them; the 12 most frequent motifs are
kept (ties by word). Each motif's ``share`` is its prompt count / the number of prompts.

Penalty of a card: ``min(25, 10 * sum(share of every motif the card uses))``, rounded to
0.1. A card that reuses a motif found in every recent prompt loses 10 points; three such
motifs hit the 25-point cap. The judges also see the motif list as context.

:func:`load_novelty` reads the history for a run (:class:`NoveltyState`): the scoring
stage's one warn-and-continue.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from image_project.artifacts import read_recent_prompts
from image_project.errors import ImageProjectError
from image_project.record.scoring import Motif, NoveltyRecord
from image_project.stages.scoring.hints import content_tokens

__all__ = [
    "MAX_MOTIFS",
    "MAX_PENALTY",
    "MIN_PROMPTS",
    "MIN_SHARE",
    "PENALTY_PER_SHARE",
    "NoveltyState",
    "NoveltySummary",
    "load_novelty",
    "novelty_penalty",
    "recent_motifs",
]

MAX_PENALTY = 25.0
PENALTY_PER_SHARE = 10.0
MAX_MOTIFS = 12
MIN_PROMPTS = 2
MIN_SHARE = 0.2

# Words every image prompt uses because of its format, not its content.
_FORMAT_WORDS_TEXT = """
    deliverable subject action setting context style medium composition camera lighting
    palette constraints must include image prompt scene the this that with without into
    one two three lines line shot view frame
    """
_FORMAT_WORDS = frozenset(_FORMAT_WORDS_TEXT.split())


@dataclass(frozen=True)
class NoveltySummary:
    """Motifs of ``rows`` recent prompts."""

    rows: int
    motifs: tuple[Motif, ...]

    def describe(self) -> str:
        """The judges' context line."""
        if not self.motifs:
            return f"No motif repeats across the last {self.rows} images."
        listed = ", ".join(f"{m.word} ({m.prompts}/{self.rows})" for m in self.motifs)
        return f"Motifs repeated across the last {self.rows} images: {listed}."


def _words(text: str) -> set[str]:
    return {t for t in content_tokens(text) if len(t) >= 3 and t not in _FORMAT_WORDS}


def recent_motifs(prompts: Sequence[str]) -> NoveltySummary:
    """The motif statistics of ``prompts`` (the caller applies the window)."""
    counts: Counter[str] = Counter()
    for prompt in prompts:
        counts.update(_words(prompt))
    rows = len(prompts)
    threshold = max(MIN_PROMPTS, math.ceil(MIN_SHARE * rows))
    frequent = sorted(
        ((word, n) for word, n in counts.items() if n >= threshold), key=lambda x: (-x[1], x[0])
    )[:MAX_MOTIFS]
    return NoveltySummary(
        rows=rows,
        motifs=tuple(Motif(word=word, prompts=n, share=round(n / rows, 3)) for word, n in frequent),
    )


def novelty_penalty(card_text: str, summary: NoveltySummary) -> tuple[float, tuple[str, ...]]:
    """The card's penalty and the motifs it reuses (in motif order)."""
    words = _words(card_text)
    used = tuple(m for m in summary.motifs if m.word in words)
    penalty = min(MAX_PENALTY, PENALTY_PER_SHARE * sum(m.share for m in used))
    return round(penalty, 1), tuple(m.word for m in used)


logger = logging.getLogger("image_project.scoring")


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
