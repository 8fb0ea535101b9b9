"""Novelty: recent motifs from the generations history, and a penalty per card. No model.

Statistics (deterministic): over the last ``window`` final image prompts, each content word
(letters only, at least 3 characters, not a stopword, not a prompt-format word such as
"subject" or "lighting") counts once per prompt it appears in. A word is frequent when it
appears in at least 2 prompts and in at least ``min_share`` of them (``novelty.min_share``;
:data:`MIN_SHARE` when not given). Frequent words that always come
together form one **motif**, a phrase: two of them join when they appear in exactly the same
prompts and one directly follows the other (among the content words) in each of those
prompts, so "misty coastal landscapes at dawn" repeated in 6 prompts is one motif
("misty coastal landscapes dawn", 6 prompts), not four. The 12 most frequent motifs are kept
(ties by text). Each motif's ``share`` is its prompt count / the number of prompts.

Penalty of a card: ``min(cap, per_share * sum(share x used part))`` over the motifs, rounded
to 0.1, where a motif's used part is the fraction of its words the card contains (1 for the
whole phrase); ``per_share`` and ``cap`` are ``novelty.penalty_per_share`` and
``novelty.max_penalty`` (:data:`PENALTY_PER_SHARE` and :data:`MAX_PENALTY`, 10 and 25, when
not given; the product's defaults are the config model's, chosen by bench/novelty.py). The
penalty counts motifs, not words: a card that repeats a four-word phrase found in every
recent prompt loses ``per_share`` points, as one that repeats a one-word motif found in every
recent prompt does. The judges also see the motif list as context.

:func:`load_novelty` reads the history for a run (:class:`NoveltyState`): the scoring
stage's one warn-and-continue.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from image_project.artifacts.generations import read_recent_prompts
from image_project.errors import ImageProjectError
from image_project.record.scoring import Motif, NoveltyRecord
from image_project.stages.scoring.hints import content_tokens

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


def _sequence(text: str) -> list[str]:
    """The content words of ``text`` that novelty counts, in order."""
    return [t for t in content_tokens(text) if len(t) >= 3 and t not in _FORMAT_WORDS]


def _joins(sequences: Sequence[Sequence[str]], where: dict[str, set[int]]) -> list[tuple[str, str]]:
    """The pairs (a, b) of frequent words in the same prompts where b directly follows a in
    every one of them."""
    followers: dict[tuple[str, str], set[int]] = {}
    for index, words in enumerate(sequences):
        for a, b in itertools.pairwise(words):
            if a != b and a in where and b in where and where[a] == where[b]:
                followers.setdefault((a, b), set()).add(index)
    return sorted(pair for pair, prompts in followers.items() if prompts == where[pair[0]])


def _phrases(sequences: Sequence[Sequence[str]], where: dict[str, set[int]]) -> list[list[str]]:
    """The frequent words (keys of ``where``: word -> the prompts it is in) grouped into
    motifs by :func:`_joins`, each group's words in the order they first appear."""
    parent = {w: w for w in where}

    def root(w: str) -> str:
        while parent[w] != w:
            parent[w] = parent[parent[w]]
            w = parent[w]
        return w

    for a, b in _joins(sequences, where):
        parent[root(b)] = root(a)
    first: dict[str, tuple[int, int]] = {}
    for index, words in enumerate(sequences):
        for position, w in enumerate(words):
            if w in where:
                first.setdefault(w, (index, position))
    groups: dict[str, list[str]] = {}
    for w in sorted(where, key=lambda w: first[w]):
        groups.setdefault(root(w), []).append(w)
    return list(groups.values())


def recent_motifs(prompts: Sequence[str], min_share: float = MIN_SHARE) -> NoveltySummary:
    """The motif statistics of ``prompts`` (the caller applies the window); a word is
    frequent in at least ``min_share`` of them (and in :data:`MIN_PROMPTS`)."""
    sequences = [_sequence(prompt) for prompt in prompts]
    where: dict[str, set[int]] = {}
    for index, words in enumerate(sequences):
        for w in words:
            where.setdefault(w, set()).add(index)
    rows = len(prompts)
    threshold = max(MIN_PROMPTS, math.ceil(min_share * rows))
    frequent = {w: found for w, found in where.items() if len(found) >= threshold}
    motifs = sorted(
        ((" ".join(words), len(frequent[words[0]])) for words in _phrases(sequences, frequent)),
        key=lambda x: (-x[1], x[0]),
    )[:MAX_MOTIFS]
    return NoveltySummary(
        rows=rows,
        motifs=tuple(Motif(word=text, prompts=n, share=round(n / rows, 3)) for text, n in motifs),
    )


def novelty_penalty(
    card_text: str,
    summary: NoveltySummary,
    per_share: float = PENALTY_PER_SHARE,
    cap: float = MAX_PENALTY,
) -> tuple[float, tuple[str, ...]]:
    """The card's penalty (``min(cap, per_share x sum(share x used part))``) and the motifs
    it reuses, wholly or in part (in motif order)."""
    words = set(_sequence(card_text))
    total = 0.0
    used: list[str] = []
    for motif in summary.motifs:
        phrase = motif.word.split()
        part = sum(w in words for w in phrase) / len(phrase)
        if part:
            total += motif.share * part
            used.append(motif.word)
    return round(min(cap, per_share * total), 1), tuple(used)


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


def load_novelty(
    enabled: bool, window: int, history_path: Path, min_share: float = MIN_SHARE
) -> NoveltyState:
    """Read the recent prompts for novelty.

    The one documented warn-and-continue of the scoring stage: a missing, empty or unreadable
    history logs a WARNING naming the path and the exception and turns novelty off for this
    run (recorded in ``warning``). ``enabled: false`` or ``window: 0`` turn it off quietly.
    """
    if not enabled or window <= 0:
        return NoveltyState(enabled=enabled and window > 0, window=window)
    try:
        prompts = read_recent_prompts(history_path, window)
    except (OSError, ValueError, ImageProjectError) as exc:
        return _unavailable(window, str(history_path), exc)
    return novelty_from(enabled, window, prompts, str(history_path), min_share)


def novelty_from(
    enabled: bool, window: int, prompts: Sequence[str], source: str, min_share: float = MIN_SHARE
) -> NoveltyState:
    """:func:`load_novelty` on prompts read elsewhere (oldest first; the last ``window``
    count), ``source`` naming where in the warning: no prompt turns novelty off with it."""
    if not enabled or window <= 0:
        return NoveltyState(enabled=enabled and window > 0, window=window)
    recent = list(prompts)[-window:]
    if not recent:
        return _unavailable(
            window, source, ValueError("the history has no final_image_prompt rows yet")
        )
    return NoveltyState(enabled=True, window=window, summary=recent_motifs(recent, min_share))


def _unavailable(window: int, source: str, exc: Exception) -> NoveltyState:
    warning = (
        f"Novelty enabled but history unavailable; disabling novelty for this run: "
        f"{source} {type(exc).__name__}: {exc}"
    )
    logger.warning("%s", warning)
    return NoveltyState(enabled=True, window=window, warning=warning)
