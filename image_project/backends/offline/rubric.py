"""Rubric judges: scores by the points lines of a judge's rubric (see the package docstring)."""

from __future__ import annotations

import functools
import json
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from image_project import markers
from image_project.backends.base import JsonSchema, TextRequest
from image_project.backends.offline.seed import _derive_seed
from image_project.backends.offline.vocabulary import _COLOUR_ALIASES, COLOURS, LAYOUTS
from image_project.backends.offline.words import _is_salient, _last_user_text, _tokens

_JUDGE_SCHEMA = "idea_scores"
_PAIR_SCHEMA = "idea_comparison"
_RUBRIC_HEADER_RE = re.compile(rf"^{re.escape(markers.RUBRIC)}[^\n]*\):[ \t]*$", re.MULTILINE)
_START_RE = re.compile(r"\bstart (?:every|each) card at (\d{1,3})\b", re.IGNORECASE)
_AXIS_RE = re.compile(
    r"^[ \t]*[-*\u2022][ \t]*([A-Za-z][A-Za-z '/_-]{0,40}?)[ \t]*:[ \t]*(.+)$", re.MULTILINE
)
_REWARD_RE = re.compile(r"\+\s*(\d{1,3})\s*(?:to|\u2013)\s*\+\s*(\d{1,3})\b")
_PENALTY_RE = re.compile(r"(?<![\w.])-\s*(\d{1,3})\s*(?:to|\u2013)\s*-\s*(\d{1,3})\b")
_SEVERITY_RE = re.compile(r"(?<![\w.])-\s*\d{1,3}(?:\s*,\s*-\s*\d{1,3})*\s*,?\s*or\s+-\s*\d{1,3}\b")
_DEFAULT_START = 50
_AXIS_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dislikes", ("dislike", "hate", "avoid", "taboo")),
    ("repetition", ("repet", "history", "motif", "clich", "stale")),
    ("concepts", ("concept",)),
    ("novelty", ("novel", "original", "fresh", "distinct", "surpris")),
    ("renderability", ("render", "concrete", "craft", "clarity", "staging")),
    ("profile", ("profile", "taste", "like", "love", "prefer", "fit")),
)
"""Feature name -> the fragments of a rubric's axis name that select it (the first wins)."""

_CONCEPTS_RE = re.compile(
    rf"^{re.escape(markers.CONCEPTS)}[ \t]*\n((?:[ \t]*-[ \t].*(?:\n|$))*)", re.MULTILINE
)
_VIEW_END_RE = re.compile(
    rf"^(?:{re.escape(markers.RECENT_HISTORY)}|{re.escape(markers.IDEA_CARDS)})", re.MULTILINE
)
_HISTORY_RE = re.compile(rf"^{re.escape(markers.RECENT_HISTORY)}(.*)$", re.MULTILINE)
# A motif is a word or a phrase (novelty's words that always come together), after ": " or ", ".
_MOTIF_RE = re.compile(r"(?:^|: |, )([A-Za-z][A-Za-z' \-]*?) \((\d+)/(\d+)\)")
_NEGATIVE_RE = re.compile(r"dislike|hate|avoid|never", re.IGNORECASE)
_LIKES_FOR_FULL_FIT = 6
_NARRATIVE_BAND = (12, 80, 160)  # full marks from 12 to 80 words, none from 160
MODEL_ERROR = 4.0
"""Half-width of a model's own error on a card (points): every judge on one model shares it
(the default of ``OfflineTextBackend(model_error=...)``)."""


@dataclass(frozen=True)
class _Axis:
    """One rubric line: the feature it weighs, ``+lo to +hi`` and ``-lo to -hi`` points or
    penalties by severity (mildest first)."""

    kind: str
    reward: tuple[int, int] | None
    penalty: tuple[int, int] | None
    severities: tuple[int, ...]


@dataclass(frozen=True)
class _Rubric:
    start: int
    axes: tuple[_Axis, ...]


@dataclass(frozen=True)
class _CardView:
    """What a rubric judge reads of one card: its content words (``avoid`` left out) and how
    concrete it is."""

    words: frozenset[str] = frozenset()
    composition: int = 0
    medium: int = 0
    narrative_words: int = 0
    content: str = ""
    """The card's canonical JSON without its id: what a model's shared error is keyed by."""


@dataclass(frozen=True)
class _JudgeView:
    """What a rubric judge reads of its request (the user message)."""

    concepts: tuple[frozenset[str], ...]
    likes: frozenset[str] | None
    dislikes: tuple[frozenset[str], ...]
    motifs: Mapping[tuple[str, ...], float]
    cards: Mapping[str, _CardView]


def _stem(word: str) -> str:
    """A plural folded to its singular, roughly ("skies", "arches", "cats"), so that a card
    and a profile that differ only in number still share the word."""
    word = word.removesuffix("'s")
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _content_words(text: str) -> frozenset[str]:
    """The salient words of ``text``, hyphenated words split, plurals folded ("harbours")."""
    parts = (_stem(p) for w in _tokens(text) for p in w.split("-"))
    return frozenset(p for p in parts if _is_salient(p))


def _axis_kind(name: str) -> str:
    lowered = name.strip().lower()
    for kind, fragments in _AXIS_KINDS:
        if any(f in lowered for f in fragments):
            return kind
    return lowered


def _read_axis(name: str, rest: str) -> _Axis | None:
    reward = _REWARD_RE.search(rest)
    penalty = _PENALTY_RE.search(rest)
    severity = None if penalty else _SEVERITY_RE.search(rest)
    if not (reward or penalty or severity):
        return None
    return _Axis(
        kind=_axis_kind(name),
        reward=(int(reward[1]), int(reward[2])) if reward else None,
        penalty=(int(penalty[1]), int(penalty[2])) if penalty else None,
        severities=tuple(sorted(int(n) for n in re.findall(r"\d+", severity[0])))
        if severity
        else (),
    )


def _read_rubric(system_text: str) -> _Rubric | None:
    """The rubric section of a judge's system prompt, or None (no section, as for the
    ``default`` rubric, or no line with readable points)."""
    header = _RUBRIC_HEADER_RE.search(system_text)
    if header is None:
        return None
    body = system_text[header.end() :]
    axes = [_read_axis(m[1], m[2]) for m in _AXIS_RE.finditer(body)]
    readable = tuple(a for a in axes if a is not None)
    if not readable:
        return None
    start = _START_RE.search(body)
    return _Rubric(min(100, int(start[1])) if start else _DEFAULT_START, readable)


def _judge_ids(schema: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]] | None:
    """The card ids of a judge schema (the properties of ``scores``, in order) when every
    one must be scored, with each card's schema (a bare integer, or an object such as
    ``{"rationale", "score"}``)."""
    try:
        node = schema["properties"]["scores"]
        ids = list(node["properties"])
    except (KeyError, TypeError):
        return None
    if not ids or not all(isinstance(i, str) for i in ids):
        return None
    return (ids, dict(node["properties"])) if node.get("required") == ids else None


def _pair_ids(schema: Mapping[str, Any]) -> list[str] | None:
    """The two card ids of a ``pairwise`` judge's schema (``better``'s enum), as shown."""
    try:
        ids = list(schema["properties"]["better"]["enum"])
    except (KeyError, TypeError):
        return None
    return ids if len(ids) == 2 and all(isinstance(i, str) for i in ids) else None


def _rationale(features: Mapping[str, tuple[float, float]]) -> str:
    """A rubric judge's rationale: what the card's features came to, in words."""
    parts = [f"{name} {round(100 * reward)}%" for name, (reward, _) in features.items()]
    return f"Against the rubric: {', '.join(parts)}."


def _card_answer(node: Any, score: int, features: Mapping[str, tuple[float, float]]) -> Any:
    """A card's answer in the form its schema ``node`` asks for: the score; or, for an
    object, the score in each integer property and the rationale in each string one."""
    if not (isinstance(node, Mapping) and node.get("type") == "object"):
        return score
    properties: Mapping[str, Any] = node.get("properties") or {}
    return {
        key: score
        if isinstance(sub, Mapping) and sub.get("type") == "integer"
        else _rationale(features)
        for key, sub in properties.items()
    }


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _count(value: Any) -> int:
    return (
        len([v for v in value if isinstance(v, str) and v.strip()])
        if isinstance(value, list)
        else 0
    )


def _card_view(card: Mapping[str, Any]) -> _CardView:
    options = card.get("options")
    options = options if isinstance(options, Mapping) else {}
    narrative = card.get("narrative")
    shown = {k: v for k, v in card.items() if k not in ("id", "avoid")}
    return _CardView(
        words=_content_words(" ".join(_strings(shown))),
        composition=_count(options.get("composition")),
        medium=_count(options.get("medium")),
        narrative_words=len(narrative.split()) if isinstance(narrative, str) else 0,
        content=json.dumps(
            {k: v for k, v in card.items() if k != "id"}, sort_keys=True, ensure_ascii=False
        ),
    )


def _model_error(model: str, card: _CardView, half_width: float) -> float:
    """The error ``model`` makes on ``card`` whoever asks: drawn in +-``half_width`` from a
    stream seeded by the model's name and the card's content (not by the judge, its
    rubric, the run or the seed), so judges on one model share it and judges on another
    model draw their own."""
    seed = _derive_seed("judge_model_error", {"model": model, "card": card.content})
    return random.Random(seed).uniform(-half_width, half_width) if half_width else 0.0


def _card_views(user_text: str) -> dict[str, _CardView]:
    """Every line of the user message that is a JSON object with a string ``id``."""
    cards: dict[str, _CardView] = {}
    for line in user_text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("{"):
            continue
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and isinstance(value.get("id"), str):
            cards.setdefault(value["id"], _card_view(value))
    return cards


def _taste_line(line: str, negative: bool) -> tuple[bool, list[str], bool]:
    """One line of the profile view: (the mode for the next lines, its items, whether they
    are dislikes). A header line ("Dislikes:", "The viewer's profile (...):") sets the mode;
    "Label: a; b" lines (the hints' "Feel:" and "Avoid:") are items of their own label."""
    label, colon, rest = line.partition(":")
    if line.startswith(("-", "*", "\u2022")) or not colon:
        return negative, [line.lstrip("-*\u2022 ")], negative
    if not rest.strip():
        return bool(_NEGATIVE_RE.search(label)), [], negative
    return negative, re.split(r"[;,]", rest), bool(_NEGATIVE_RE.search(label))


def _taste(view: str) -> tuple[frozenset[str] | None, tuple[frozenset[str], ...]]:
    """The like words (None when the view shows none) and the dislike items' words."""
    likes: set[str] = set()
    dislikes: list[frozenset[str]] = []
    negative = False
    for raw in view.splitlines():
        negative, items, are_dislikes = _taste_line(raw.strip(), negative)
        for item in items:
            words = _content_words(item)
            if not words or (item.strip().startswith("(") and item.strip().endswith(")")):
                continue
            if are_dislikes:
                dislikes.append(words)
            else:
                likes |= words
    # A word the likes use too ("light" in "golden light" and in "harsh midday light") says
    # nothing about a dislike.
    distinct = (d - likes for d in dislikes)
    return (frozenset(likes) if likes else None), tuple(d for d in distinct if d)


def _motifs(user_text: str) -> dict[tuple[str, ...], float]:
    """Motif (its words) -> its share of the recent prompts, from the "Recent history:"
    line."""
    line = _HISTORY_RE.search(user_text)
    if line is None:
        return {}
    found: dict[tuple[str, ...], float] = {}
    for phrase, prompts, rows in _MOTIF_RE.findall(line[1]):
        words = tuple(_stem(w) for w in phrase.lower().split())
        found[words] = int(prompts) / max(1, int(rows))
    return found


def _judge_view(user_text: str) -> _JudgeView:
    concepts = _CONCEPTS_RE.search(user_text)
    items = concepts[1].splitlines() if concepts else []
    view_start = concepts.end() if concepts else 0
    view_end = _VIEW_END_RE.search(user_text, view_start)
    likes, dislikes = _taste(user_text[view_start : view_end.start() if view_end else view_start])
    return _JudgeView(
        concepts=tuple(w for w in (_content_words(i) for i in items) if w),
        likes=likes,
        dislikes=dislikes,
        motifs=_motifs(user_text),
        cards=_card_views(user_text),
    )


def _concept_fit(concepts: Sequence[frozenset[str]], words: frozenset[str]) -> tuple[float, float]:
    """(share of the concepts' words the card uses, share of the concepts it misses)."""
    if not concepts:
        return 0.5, 0.0
    pooled = frozenset().union(*concepts)
    missed = sum(1 for c in concepts if not c & words)
    return len(pooled & words) / len(pooled), missed / len(concepts)


def _like_fit(likes: frozenset[str] | None, words: frozenset[str]) -> float:
    if likes is None:
        return 0.5
    return min(1.0, len(likes & words) / min(len(likes), _LIKES_FOR_FULL_FIT))


def _dislike_touch(dislikes: Sequence[frozenset[str]], words: frozenset[str]) -> float:
    """The largest share of one dislike's words the card uses."""
    return max((len(d & words) / len(d) for d in dislikes), default=0.0)


def _novelty(card_id: str, card: _CardView, cards: Mapping[str, _CardView]) -> float:
    """1 - the card's highest Jaccard word overlap with another card."""
    overlaps = [
        len(card.words & other.words) / len(card.words | other.words)
        for other_id, other in cards.items()
        if other_id != card_id and card.words | other.words
    ]
    return 1.0 - max(overlaps, default=0.0)


@functools.cache
def _visual_words() -> frozenset[str]:
    """Colour and composition words (the image renderer's vocabulary)."""
    names = [*COLOURS, *_COLOUR_ALIASES, *(w for ws in LAYOUTS.values() for w in ws)]
    return _content_words(" ".join(names))


def _renderability(card: _CardView) -> float:
    """How concrete the card is: composition and medium options given, colour or layout
    words used (three for full marks), a narrative of a sensible length."""
    low, high, zero = _NARRATIVE_BAND
    n = card.narrative_words
    band = n / low if n < low else max(0.0, 1.0 - max(0, n - high) / (zero - high))
    visual = min(1.0, len(card.words & _visual_words()) / 3)
    return (float(card.composition > 0) + float(card.medium > 0) + visual + band) / 4


def _repetition(motifs: Mapping[tuple[str, ...], float], words: frozenset[str]) -> float:
    """Each motif's share times the part of its words the card uses, summed, at most 1."""
    used = (share * sum(w in words for w in motif) / len(motif) for motif, share in motifs.items())
    return min(1.0, sum(used))


def _features(view: _JudgeView, card_id: str, card: _CardView) -> dict[str, tuple[float, float]]:
    """Feature name -> (its value for a reward line, its value for a penalty line), in 0..1."""
    words = card.words
    concepts, missed = _concept_fit(view.concepts, words)
    touch = _dislike_touch(view.dislikes, words)
    novelty = _novelty(card_id, card, view.cards)
    render = _renderability(card)
    repetition = _repetition(view.motifs, words)
    return {
        "concepts": (concepts, missed),
        "profile": (max(0.0, _like_fit(view.likes, words) - touch), touch),
        "dislikes": (1.0 - touch, touch),
        "novelty": (novelty, 1.0 - novelty),
        "renderability": (render, max(0.0, 1.0 - 2.0 * render)),
        "repetition": (1.0 - repetition, repetition),
    }


def _points(axis: _Axis, reward: float, penalty: float, scale: float) -> float:
    """The points one rubric line gives a card: ``+lo to +hi`` gives lo + (hi - lo) * reward
    (times ``scale``); when ``penalty`` > 0, ``-lo to -hi`` takes lo + (hi - lo) * penalty and
    ``-a, -b or -c`` takes the severity the penalty reaches (a third or less: -a, ...)."""
    points = 0.0
    if axis.reward is not None:
        low, high = axis.reward
        points += (low + (high - low) * reward) * scale
    if penalty > 0 and axis.penalty is not None:
        low, high = sorted(axis.penalty)
        points -= low + (high - low) * penalty
    elif penalty > 0 and axis.severities:
        k = len(axis.severities)
        points -= axis.severities[min(k - 1, math.floor(penalty * k - 1e-9))]
    return points


def _reward_scale(rubric: _Rubric) -> float:
    """What the reward points are multiplied by: at most 1, and small enough that a card
    perfect on every axis lands at 100 rather than past the clamp (``novelty_heavy`` offers
    80 points above its start of 65)."""
    most = sum(max(a.reward) for a in rubric.axes if a.reward is not None)
    headroom = 100 - rubric.start
    return 1.0 if most <= headroom else headroom / most


def _card_score(
    rubric: _Rubric,
    features: Mapping[str, tuple[float, float]],
    rng: random.Random,
    jitter: float,
    shared: float,
) -> int:
    total = float(rubric.start) + shared
    scale = _reward_scale(rubric)
    for axis in rubric.axes:
        reward, penalty = features.get(axis.kind) or (rng.uniform(0.35, 0.65), 0.0)
        total += _points(axis, reward, penalty, scale)
    total += rng.uniform(-jitter, jitter)
    return max(0, min(100, round(total)))


def _rubric_judge_reply(
    request: TextRequest, schema: JsonSchema, rng: random.Random, model: str, model_error: float
) -> str | None:
    """A judge's scores by its rubric (see the package docstring) as ``model`` gives them
    (its shared error within +-``model_error``), or None when the request is not a rubric
    judge's (then nothing is drawn from ``rng``)."""
    if schema.name not in (_JUDGE_SCHEMA, _PAIR_SCHEMA):
        return None
    rubric = _read_rubric("\n".join(m.content for m in request.messages if m.role == "system"))
    pair = _pair_ids(schema.schema) if schema.name == _PAIR_SCHEMA else None
    found = _judge_ids(schema.schema) if pair is None else (pair, {})
    if rubric is None or found is None:
        return None
    ids, forms = found
    view = _judge_view(_last_user_text(request.messages))
    jitter = 1.0 + 2.0 * min(max(request.temperature, 0.0), 1.0)
    scores: dict[str, Any] = {}
    for card_id in ids:
        card = view.cards.get(card_id, _CardView())
        shared = _model_error(model, card, model_error)
        features = _features(view, card_id, card)
        score = _card_score(rubric, features, rng, jitter, shared)
        scores[card_id] = _card_answer(forms.get(card_id), score, features)
    if pair is not None:
        return json.dumps({"better": max(pair, key=lambda i: scores[i])}, ensure_ascii=False)
    return json.dumps({"scores": scores}, ensure_ascii=False)
