"""Novelty: recent motifs from the generations history, and a penalty per card. No model.

Statistics (deterministic): over the last ``window`` final image prompts, each content word
(letters only, at least 3 characters, not a stopword, not a prompt-format word such as
"subject" or "lighting") counts once per prompt it appears in. A word is a **motif** when it
appears in at least 2 prompts and in at least 20% of them; the 12 most frequent motifs are
kept (ties by word). Each motif's ``share`` is its prompt count / the number of prompts.

Penalty of a card: ``min(25, 10 * sum(share of every motif the card uses))``, rounded to
0.1. A card that reuses a motif found in every recent prompt loses 10 points; three such
motifs hit the 25-point cap. The judges also see the motif list as context.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from image_project.record.scoring import Motif
from image_project.stages.scoring.hints import content_tokens

__all__ = [
    "MAX_MOTIFS",
    "MAX_PENALTY",
    "MIN_PROMPTS",
    "MIN_SHARE",
    "PENALTY_PER_SHARE",
    "NoveltySummary",
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
