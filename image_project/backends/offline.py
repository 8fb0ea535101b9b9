"""The built-in offline backend: every model role of the pipeline, with no network and no key.

``python main.py`` on a fresh machine runs through these two classes, so they aim to look
sensible rather than merely type-check: replies reuse the words of the request, structured
requests get valid JSON, and images are real (if modest) pictures of the prompt's colours.

Contract (both classes):

* **Deterministic.** Every choice comes from one ``random.Random`` seeded with
  ``sha256(canonical JSON of the request)`` — for text ``(messages, model, temperature, seed,
  schema)``, for images ``(prompt, model, size, quality, seed)``. The same request always gives
  the same reply (byte for byte for images); changing the seed or temperature changes it.
  Nothing touches the global ``random``, the clock, files or the network, so the backends are
  safe to call concurrently. Image rendering is CPU work and runs in a worker thread
  (``anyio.to_thread``) so that concurrent calls do not stall the event loop; the drawing
  lives in :mod:`.offline_drawing`, imported (with Pillow) on the first image.
* **Cancellable.** A cancelled image call returns at once (the worker thread is abandoned,
  ``abandon_on_cancel``), and the drawing itself stops at its next check
  (``anyio.from_thread.check_cancelled``: before each gradient and glow, between the
  finishing passes and before each chunk of the PNG is written), so Ctrl-C does not wait for
  a 4096x4096 picture to be finished, nor does the process's exit.
* **Honest.** Replies report ``system_fingerprint="offline"``, ``finish_reason="stop"``,
  ``attempts=1`` and estimated usage (``ceil(words * 4 / 3)`` tokens); images carry a small
  "offline preview" badge in the top-right corner (clear of the caption strip along the
  bottom) so nobody mistakes them for a real render.

How a text request is answered (first matching row wins; "the prompt" is the system messages
plus the last user message, salient words come from the last user message without stopwords):

=================================  ===========================================================
request                            reply
=================================  ===========================================================
``json_schema`` whose root holds   that object with the first JSON array of exactly N strings
one array of exactly N strings     in the user message, unchanged (an offline rewrite keeps
                                   everything), when there is one
``json_schema`` named              ``{"scores": [{"id": ..., "score": ...}, ...]}`` with every
``idea_scores`` (a judge) whose    id of the schema's ``enum`` once, in ``enum`` order, each
system prompt has a ``Rubric       score an integer 0..100 computed from the request by the
(...):`` section with at least     rubric's points (see "Rubric judges" below); a judge
one readable points line           without one (the ``default`` rubric, or a rubric with no
                                   readable points) gets the next row's answer, unchanged
``json_schema`` named              ``{"selections": [...], "summary": ...}``: one candidate
``survivor_selection`` (the        per slot named after "in any order:", chosen from the
multi-round survivor selector)     candidates' JSON lines: performance = best effective
                                   score, diversity = fewest words shared with those already
                                   picked, potential = highest single judge score; reasons
                                   quote the numbers
``json_schema`` set                JSON text that validates against the schema, strings built
                                   from the salient words (see :mod:`.jsonschema_instance`;
                                   unsupported keywords raise ``UnsupportedSchemaError``)
prompt says "JSON array"/"JSON     a JSON array: the last JSON array of strings in the user
list"                              message, unchanged (preferring one of the requested
                                   length); otherwise N fresh strings (N from "3 strings",
                                   "array of five"...; default 3) — titles when the title
                                   row below also matches, short phrases otherwise
prompt says "title" and "2-4       a 2-4 word Title Case title of letters only, from the
words" or "Title Case"             salient words (sometimes closed with a word like "Reverie")
anything else                      2-4 sentences of prose built around the salient phrases;
                                   ``max_output_tokens`` drops sentences (never the first)
=================================  ===========================================================

Higher temperatures draw on more of the prompt's phrases; temperature 0 sticks to the most
frequent ones. Text between ``<do_not_copy>`` and ``</do_not_copy>`` in the user message is
material the request tells the model to abstract rather than repeat (the raw likes, for the
scoring stage's profile abstraction), so the offline backend never draws words from it.

Rubric judges: the rubric section is read line by line. ``Start every card at N`` sets the
start (50 without one); each ``- <axis>: ...`` line may carry ``+lo to +hi`` (a reward),
``-lo to -hi`` (a penalty range) and ``-a, -b or -c`` (penalties by severity); other lines
are ignored. The axis name picks a feature by a fragment of it (concept; profile, taste,
like, love, fit; dislike, hate, avoid; novel, original, fresh, distinct; render, concrete,
craft, clarity; repet, history, motif, clich). A feature is a pair of values in 0..1, one
for a reward and one for a penalty, computed from the words of the request (salient words,
hyphenated words split, plurals folded; a card's ``avoid`` list is not part of it):

=============  ===========================================================================
axis           reward value; penalty value
=============  ===========================================================================
concepts       share of the concepts' words the card uses; share of the concept lines it
               uses no word of (0.5 and 0 when the request shows no concepts)
profile        like fit minus dislike touch, at least 0; dislike touch. Like fit: like
               words used (lines of ``Loves``/``Likes``/``Notes``... sections, or the hints'
               ``Feel``), six (or all, if fewer) for full marks; 0.5 when none are shown
dislikes       1 - dislike touch; dislike touch = the largest share of one dislike line's
               words (``Dislikes``/``Hates`` sections, the dislikes-only list, the hints'
               ``Avoid``) the card uses, words the likes use too not counted
novelty        1 - the card's largest Jaccard word overlap with another card; that overlap
renderability  mean of four checks: composition options given, a medium given, colour or
               layout words used (three for full marks), a narrative of 12-80 words
               (fading to 0 at 160); max(0, 1 - 2 * reward value)
repetition     1 - repeat; repeat = the summed shares (k/N) of the "Recent history"
               motifs the card uses, at most 1
other names    a value drawn from the request's generator in 0.35..0.65; 0 (no penalty)
=============  ===========================================================================

A card's score is ``start + scale * sum(lo + (hi - lo) * reward) - sum(penalties) +
jitter``, rounded and clamped to 0..100. A penalty value of 0 costs nothing; otherwise a
range costs ``lo + (hi - lo) * penalty`` and a list of k severities costs its i-th entry
(mildest first) for a penalty value up to i/k. ``scale = min(1, (100 - start) / (sum of
the rewards' hi))`` keeps a card perfect on every axis at 100 instead of past the clamp
(``novelty_heavy`` offers 80 points above its start of 65). The jitter is drawn from the
request's generator within +-(1 + 2 * temperature) points (temperature clamped to 0..1).
Judges with different rubrics thus rank the same cards differently, as their rubrics say;
they read words, not meaning ("close-up" touches the dislike "spiders in close-up").

Images: colour words in the prompt (:data:`COLOURS`, about fifty names such as teal, crimson,
ochre, navy) set the palette, else a seeded named palette; the first composition word
(:data:`LAYOUTS`: horizon, diagonal, centered, symmetry, spiral, grid, bird's-eye, close-up...)
picks the layout, else a seeded one. Gradients, shapes, a soft grain and a vignette make the
picture; ``size`` is ``"WxH"`` (16..4096 each) or ``"auto"`` (1536x1024). The reply is PNG;
``metadata`` records ``palette``, ``palette_source``, ``layout``, ``layout_source``, ``size``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio.from_thread
import anyio.to_thread

from image_project.backends.base import (
    ImageReply,
    ImageRequest,
    JsonSchema,
    Message,
    TextReply,
    TextRequest,
    Usage,
)
from image_project.backends.jsonschema_instance import generate_instance
from image_project.errors import RequestRejectedError

__all__ = [
    "COLOURS",
    "LAYOUTS",
    "RGB",
    "OfflineImageBackend",
    "OfflineTextBackend",
    "estimate_tokens",
    "parse_size",
]

RGB = tuple[int, int, int]

# --------------------------------------------------------------------------- shared helpers


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _derive_seed(kind: str, payload: Mapping[str, Any]) -> int:
    """A stable 64-bit seed from the canonical JSON of ``payload`` (never Python's ``hash``)."""
    canonical = json.dumps(
        {"kind": kind, **_plain(payload)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=repr,
    )
    return int.from_bytes(hashlib.sha256(canonical.encode("utf-8")).digest()[:8], "big")


def estimate_tokens(text: str) -> int:
    """Roughly ``words * 4 / 3`` tokens (0 for blank text); good enough for offline usage."""
    words = len(text.split())
    return math.ceil(words * 4 / 3)


# --------------------------------------------------------------------------- words

_STOPWORDS_TEXT = """
    a about above after again against all almost also am an and any are aren't as at be because
    been before being below between both but by can cannot could couldn't did didn't do does
    doesn't doing don't down during each either else even ever every few for from further had
    hadn't has hasn't have haven't having he her here hers herself him himself his how however
    i if in into is isn't it it's its itself just let's like made make many may me might more
    most much must my myself neither no nor not now of off often on once one only or other ought
    our ours ourselves out over own per perhaps quite rather really same she should shouldn't so
    some such than that that's the their theirs them themselves then there there's these they
    this those though through thus to too two under until up upon us very via was wasn't we
    were weren't what what's when where whether which while who whom whose why will with within
    without would wouldn't yet you your yours yourself yourselves three four five six seven
    eight nine ten
    answer answers array arrays ask asked based brief briefly concise create describe detail
    each exactly example following format generate give given json keep list lists new note
    output please plain print produce prompt provide punctuation quote quotes reply respond
    response return returns short should string strings sure task text title titles use used
    using word words write case letters item items entry entries element elements reply only
    image images card cards idea ideas concepts describing rewrite refine refined improve
    suggest version versions
    draft drafts critique critiques critic critics circle voice persona representative
    chameleon hemingway munch vinci enclave consensus synthesise synthesize revised revise
    last assistant weigh counts veto vetoes cautions agreement clarity preferences issues
    edits sections characters total form final labelled lines omit apply requirement
    stage stages theme themes propose message messages key why what's step let agree prefer
    together held
"""
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
_FALLBACK_WORDS = (
    "light",
    "colour",
    "texture",
    "horizon",
    "shadow",
    "rhythm",
    "stillness",
    "contrast",
    "morning",
    "motion",
)
_TITLE_CLOSERS = (
    "Reverie",
    "Study",
    "Nocturne",
    "Echoes",
    "Drift",
    "Interlude",
    "Vigil",
    "Chorus",
    "Fable",
    "Hymn",
)
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|[A-Za-z]")
_CLAUSE_SPLIT_RE = re.compile(r"[.,;:!?()\[\]{}\"\n]+")


def _tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD_RE.findall(text.replace("\u2019", "'"))]


def _is_salient(word: str) -> bool:
    return len(word) >= 3 and word not in _STOPWORDS


def _salient_units(text: str) -> list[str]:
    """Runs of up to three consecutive salient words, most frequent first, then by position."""
    units: list[str] = []
    for clause in _CLAUSE_SPLIT_RE.split(text):
        run: list[str] = []
        for word in [*_tokens(clause), ""]:
            if word and _is_salient(word):
                run.append(word)
                continue
            units.extend(" ".join(run[i : i + 3]) for i in range(0, len(run), 3))
            run = []
    counts = Counter(units)
    first = {u: i for i, u in reversed(list(enumerate(units)))}
    return sorted(counts, key=lambda u: (-counts[u], first[u]))


_DO_NOT_COPY_RE = re.compile(r"<do_not_copy>.*?(?:</do_not_copy>|\Z)", re.DOTALL | re.IGNORECASE)


def _last_user_text(messages: Sequence[Message]) -> str:
    """The last user message, without its ``<do_not_copy>`` sections."""
    text = next(
        (m.content for m in reversed(messages) if m.role == "user"),
        messages[-1].content if messages else "",
    )
    return _DO_NOT_COPY_RE.sub(" ", text)


def _pool(units: Sequence[str], temperature: float) -> list[str]:
    """The units a reply may use: the top four or a third at temperature 0, all at 1 and above.

    Padded with neutral words to at least four so that no sentence repeats itself.
    """
    share = 0.35 + 0.65 * min(max(temperature, 0.0), 1.0)
    pool = list(units[: max(4, math.ceil(len(units) * share))])
    pool += [w for w in _FALLBACK_WORDS if w not in pool][: max(0, 4 - len(pool))]
    return pool


# --------------------------------------------------------------------------- text rules

_NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_NUM = r"(\d+|" + "|".join(_NUMBER_WORDS) + r")"
_JSON_ARRAY_RE = re.compile(r"\bjson\s+(?:array|list)\b", re.IGNORECASE)
_COUNT_RES = (
    re.compile(r"\b(?:array|list)\s+of\s+(?:exactly\s+)?" + _NUM + r"\b", re.IGNORECASE),
    re.compile(
        r"\b" + _NUM + r"\s+(?:[a-z\-]+\s+){0,2}?"
        r"(?:strings|items|entries|elements|phrases|titles|options|lines|names|ideas)\b",
        re.IGNORECASE,
    ),
)
_TITLE_WORDS_RE = re.compile(r"\b2\s*(?:-|\u2013|\u2014|to)\s*4\s+words?\b", re.IGNORECASE)
_MAX_ARRAY = 64


def _wants_title(rule_text: str) -> bool:
    lowered = rule_text.lower()
    return "title" in lowered and (
        bool(_TITLE_WORDS_RE.search(rule_text)) or "title case" in lowered
    )


def _requested_count(rule_text: str) -> int | None:
    for pattern in _COUNT_RES:
        match = pattern.search(rule_text)
        if match:
            raw = match.group(1).lower()
            n = int(raw) if raw.isdigit() else _NUMBER_WORDS[raw]
            if 1 <= n <= _MAX_ARRAY:
                return n
    return None


def _string_arrays(text: str) -> list[tuple[str, int]]:
    """Every non-empty JSON array of strings in ``text``: (its exact source text, its length)."""
    decoder = json.JSONDecoder()
    found: list[tuple[str, int]] = []
    for start in (i for i, ch in enumerate(text) if ch == "["):
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            found.append((text[start:end], len(value)))
    return found


def _title(rng: random.Random, pool: Sequence[str]) -> str:
    letters = [p for unit in pool for w in unit.split() for p in re.findall(r"[a-z]+", w)]
    candidates = list(dict.fromkeys(w for w in letters if len(w) >= 3 and w not in _STOPWORDS))
    n = rng.randint(2, 4)
    picked = rng.sample(candidates, min(n, len(candidates)))
    closers = [w.lower() for w in _TITLE_CLOSERS if w.lower() not in picked]
    if len(picked) == n and n > 2 and rng.random() < 0.35:
        picked[-1] = rng.choice(closers)
    spare = [w.lower() for w in (*_TITLE_CLOSERS, *_FALLBACK_WORDS) if w.lower() not in picked]
    while len(picked) < n:
        picked.append(spare.pop(rng.randrange(len(spare))))
    return " ".join(w[:1].upper() + w[1:] for w in picked)


_SENTENCES = (
    "At the heart of it: {a}, with {b} close behind.",
    "Let {a} lead, and let {b} answer quietly.",
    "{A} and {b} share the frame, held together by {c}.",
    "Think of {a} against {b}: a contrast that keeps {c} in focus.",
    "Start from {a}; let {b} and {c} shape the rest.",
    "There is room here for {a}, softened by {b}.",
    "The weight comes from {a}, the movement from {b}.",
    "In short: {a}, {b} and {c}.",
)


def _prose(rng: random.Random, pool: Sequence[str], max_tokens: int | None) -> str:
    order = rng.sample(list(pool), len(pool))
    cursor = 0

    def nxt() -> str:
        nonlocal cursor
        unit = order[cursor % len(order)]
        cursor += 1
        return unit

    sentences = []
    for template in rng.sample(_SENTENCES, rng.randint(2, 4)):
        a, b, c = nxt(), nxt(), nxt()
        sentences.append(template.format(A=a[:1].upper() + a[1:], a=a, b=b, c=c))
    while max_tokens is not None and len(sentences) > 1:
        if estimate_tokens(" ".join(sentences)) <= max_tokens:
            break
        sentences.pop()
    return " ".join(sentences)


def _array_reply(rng: random.Random, rule_text: str, user_text: str, pool: Sequence[str]) -> str:
    count = _requested_count(rule_text)
    arrays = _string_arrays(user_text)
    if arrays:
        matching = [src for src, n in arrays if count is None or n == count]
        return matching[-1] if matching else arrays[-1][0]
    n = count or 3
    if _wants_title(rule_text):
        items = [_title(rng, pool) for _ in range(n)]
    else:
        order = rng.sample(list(pool), len(pool))
        items = [order[i % len(order)] for i in range(n)]
        for i in range(len(order), n):
            items[i] = f"{items[i]} and {order[(i + 1 + i // len(order)) % len(order)]}"
    return json.dumps(items, ensure_ascii=False)


def _text_reply(request: TextRequest, rng: random.Random) -> str:
    user_text = _last_user_text(request.messages)
    system_text = "\n".join(m.content for m in request.messages if m.role == "system")
    rule_text = f"{system_text}\n{user_text}"
    pool = _pool(_salient_units(user_text), request.temperature)
    if _JSON_ARRAY_RE.search(rule_text):
        return _array_reply(rng, rule_text, user_text, pool)
    if _wants_title(rule_text):
        return _title(rng, pool)
    return _prose(rng, pool, request.max_output_tokens)


def _echoed_array(schema: Mapping[str, Any], user_text: str) -> str | None:
    """For a schema whose root holds one array of exactly N strings (a rewrite that must keep
    the count, such as the dislike rewrite), the first JSON array of N strings in the user
    message (the material to rewrite comes before any list of constraints), unchanged: an
    offline rewrite changes nothing. None when that does not apply."""
    props = schema.get("properties")
    if not isinstance(props, Mapping) or len(props) != 1:
        return None
    ((key, node),) = props.items()
    items = node.get("items") if isinstance(node, Mapping) else None
    count = node.get("minItems") if isinstance(node, Mapping) else None
    if not (isinstance(items, Mapping) and items.get("type") == "string" and "enum" not in items):
        return None
    if count is None or count != node.get("maxItems"):
        return None
    arrays = [src for src, n in _string_arrays(user_text) if n == count]
    if not arrays:
        return None
    return json.dumps({key: json.loads(arrays[0])}, ensure_ascii=False)


# --------------------------------------------------------------------------- rubric judges

_JUDGE_SCHEMA = "idea_scores"
_RUBRIC_HEADER_RE = re.compile(r"^Rubric \([^\n]*\):[ \t]*$", re.MULTILINE)
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

_CONCEPTS_RE = re.compile(r"^Concepts:[ \t]*\n((?:[ \t]*-[ \t].*(?:\n|$))*)", re.MULTILINE)
_VIEW_END_RE = re.compile(r"^(?:Recent history:|Idea cards\b)", re.MULTILINE)
_HISTORY_RE = re.compile(r"^Recent history:(.*)$", re.MULTILINE)
_MOTIF_RE = re.compile(r"([A-Za-z][A-Za-z'\-]*) \((\d+)/(\d+)\)")
_NEGATIVE_RE = re.compile(r"dislike|hate|avoid|never", re.IGNORECASE)
_LIKES_FOR_FULL_FIT = 6
_NARRATIVE_BAND = (12, 80, 160)  # full marks from 12 to 80 words, none from 160


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


@dataclass(frozen=True)
class _JudgeView:
    """What a rubric judge reads of its request (the user message)."""

    concepts: tuple[frozenset[str], ...]
    likes: frozenset[str] | None
    dislikes: tuple[frozenset[str], ...]
    motifs: Mapping[str, float]
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


def _judge_ids(schema: Mapping[str, Any]) -> list[str] | None:
    """The card ids of a judge schema (its ``enum``, in order) when every one must be scored."""
    try:
        node = schema["properties"]["scores"]
        ids = node["items"]["properties"]["id"]["enum"]
    except (KeyError, TypeError):
        return None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        return None
    return list(ids) if node.get("minItems") == len(ids) else None


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
    )


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


def _motifs(user_text: str) -> dict[str, float]:
    """Motif -> its share of the recent prompts, from the "Recent history:" line."""
    line = _HISTORY_RE.search(user_text)
    if line is None:
        return {}
    found: dict[str, float] = {}
    for word, prompts, rows in _MOTIF_RE.findall(line[1]):
        found[_stem(word.lower())] = int(prompts) / max(1, int(rows))
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


def _repetition(motifs: Mapping[str, float], words: frozenset[str]) -> float:
    return min(1.0, sum(share for motif, share in motifs.items() if motif in words))


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
    rubric: _Rubric, features: Mapping[str, tuple[float, float]], rng: random.Random, jitter: float
) -> int:
    total = float(rubric.start)
    scale = _reward_scale(rubric)
    for axis in rubric.axes:
        reward, penalty = features.get(axis.kind) or (rng.uniform(0.35, 0.65), 0.0)
        total += _points(axis, reward, penalty, scale)
    total += rng.uniform(-jitter, jitter)
    return max(0, min(100, round(total)))


def _rubric_judge_reply(request: TextRequest, schema: JsonSchema, rng: random.Random) -> str | None:
    """A judge's scores by its rubric (see the module docstring), or None when the request is
    not a rubric judge's (then nothing is drawn from ``rng``)."""
    if schema.name != _JUDGE_SCHEMA:
        return None
    rubric = _read_rubric("\n".join(m.content for m in request.messages if m.role == "system"))
    ids = _judge_ids(schema.schema)
    if rubric is None or ids is None:
        return None
    view = _judge_view(_last_user_text(request.messages))
    jitter = 1.0 + 2.0 * min(max(request.temperature, 0.0), 1.0)
    scores = []
    for card_id in ids:
        card = view.cards.get(card_id, _CardView())
        score = _card_score(rubric, _features(view, card_id, card), rng, jitter)
        scores.append({"id": card_id, "score": score})
    return json.dumps({"scores": scores}, ensure_ascii=False)


_SELECTOR_SCHEMA = "survivor_selection"


def _words_of(value: object) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", json.dumps(value).lower()) if len(w) >= 3}


def _selector_reply(schema: JsonSchema, user_text: str) -> str | None:
    """The survivor selector's proposal (see the module docstring), or None when the request
    is not the selector's or names no candidates or slots."""
    if schema.name != _SELECTOR_SCHEMA or "in any order: " not in user_text:
        return None
    rows = []
    for line in user_text.splitlines():
        if line.startswith('{"id"'):
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    slots = user_text.rsplit("in any order: ", 1)[1].split(".")[0].split(", ")
    if not rows:
        return None
    rows.sort(key=lambda r: -float(r.get("effective", 0)))
    chosen: list[dict[str, Any]] = []
    picks = []
    for slot in slots[: len(rows)]:
        rest = [r for r in rows if r not in chosen]
        if slot == "diversity" and chosen:
            seen = set().union(*(_words_of(c.get("card")) for c in chosen))
            pick = min(rest, key=lambda r: len(_words_of(r.get("card")) & seen))
            reason = f"shares the fewest words with {', '.join(c['id'] for c in chosen)}"
        elif slot == "potential":
            pick = max(rest, key=lambda r: max((r.get("judge_scores") or {"": 0}).values()))
            top = max((pick.get("judge_scores") or {"": 0}).values())
            reason = f"one judge gave it {top}; room to improve"
        else:
            pick = rest[0]
            reason = f"best effective score {pick.get('effective')}"
        chosen.append(pick)
        picks.append({"id": pick["id"], "category": slot, "reason": reason})
    summary = "Kept " + ", ".join(f"{p['id']} ({p['category']})" for p in picks) + "."
    return json.dumps({"selections": picks, "summary": summary}, ensure_ascii=False)


class OfflineTextBackend:
    """A deterministic, network-free :class:`~image_project.backends.base.TextBackend`.

    See the module docstring for how requests are answered. Raises
    :class:`~image_project.backends.jsonschema_instance.UnsupportedSchemaError` (a
    ``RequestRejectedError``) for a schema outside the supported subset.
    """

    __slots__ = ()

    @property
    def label(self) -> str:
        return "offline"

    @property
    def default_model(self) -> str:
        return "offline-text-1"

    async def complete(self, request: TextRequest) -> TextReply:
        model = request.model or self.default_model
        schema = request.json_schema
        seed = _derive_seed(
            "text",
            {
                "messages": [{"role": m.role, "content": m.content} for m in request.messages],
                "model": model,
                "temperature": request.temperature,
                "seed": request.seed,
                "schema": None
                if schema is None
                else {"name": schema.name, "schema": schema.schema, "strict": schema.strict},
            },
        )
        rng = random.Random(seed)
        if schema is not None:
            user_text = _last_user_text(request.messages)
            text = (
                _echoed_array(schema.schema, user_text)
                or _selector_reply(schema, user_text)
                or _rubric_judge_reply(request, schema, rng)
                or json.dumps(
                    generate_instance(schema.schema, rng, _salient_units(user_text)),
                    ensure_ascii=False,
                )
            )
        else:
            text = _text_reply(request, rng)
        prompt_tokens = sum(estimate_tokens(m.content) for m in request.messages)
        completion_tokens = max(1, estimate_tokens(text))
        return TextReply(
            text=text,
            model=model,
            usage=Usage(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens),
            system_fingerprint="offline",
            finish_reason="stop",
            attempts=1,
        )


# --------------------------------------------------------------------------- images

COLOURS: Mapping[str, RGB] = {
    "black": (18, 18, 22),
    "charcoal": (54, 69, 79),
    "slate": (92, 108, 125),
    "grey": (128, 128, 132),
    "silver": (192, 192, 198),
    "white": (245, 245, 242),
    "ivory": (255, 250, 232),
    "cream": (250, 240, 205),
    "beige": (222, 205, 170),
    "sand": (214, 190, 140),
    "tan": (200, 160, 110),
    "ochre": (204, 119, 34),
    "amber": (255, 180, 30),
    "gold": (222, 175, 40),
    "mustard": (205, 170, 50),
    "yellow": (250, 215, 50),
    "lemon": (250, 240, 100),
    "orange": (240, 130, 30),
    "rust": (183, 65, 14),
    "terracotta": (204, 98, 70),
    "sienna": (160, 82, 45),
    "umber": (99, 81, 71),
    "brown": (120, 75, 45),
    "sepia": (112, 66, 20),
    "coral": (255, 127, 80),
    "salmon": (250, 128, 114),
    "peach": (255, 200, 160),
    "red": (200, 35, 40),
    "scarlet": (240, 36, 10),
    "crimson": (220, 20, 60),
    "vermilion": (227, 66, 52),
    "burgundy": (128, 0, 32),
    "pink": (240, 150, 180),
    "rose": (225, 90, 120),
    "magenta": (200, 30, 150),
    "plum": (142, 69, 133),
    "purple": (110, 50, 150),
    "violet": (138, 80, 200),
    "lavender": (181, 160, 220),
    "indigo": (75, 20, 130),
    "navy": (20, 32, 90),
    "cobalt": (0, 71, 171),
    "blue": (40, 90, 210),
    "azure": (0, 127, 255),
    "cyan": (20, 200, 220),
    "turquoise": (64, 224, 208),
    "teal": (0, 128, 128),
    "aqua": (90, 220, 210),
    "mint": (170, 240, 200),
    "jade": (0, 168, 107),
    "emerald": (20, 160, 90),
    "green": (40, 150, 60),
    "sage": (160, 180, 140),
    "olive": (110, 120, 40),
    "lime": (170, 220, 50),
}
"""Colour words the image renderer understands (also ``gray`` → grey, ``golden`` → gold)."""

_COLOUR_ALIASES = {"gray": "grey", "golden": "gold", "silvery": "silver", "violets": "violet"}
_COLOUR_RE = re.compile(
    r"\b(" + "|".join(sorted([*COLOURS, *_COLOUR_ALIASES], key=len, reverse=True)) + r")\b"
)

LAYOUTS: Mapping[str, tuple[str, ...]] = {
    "horizon": ("horizon", "landscape", "seascape", "sunset", "sunrise", "skyline", "panorama"),
    "diagonal": ("diagonal", "diagonals", "dynamic", "oblique", "slanted"),
    "centered": ("centered", "centred", "central", "center", "centre", "focal point"),
    "symmetry": ("symmetry", "symmetric", "symmetrical", "mirrored", "reflection"),
    "spiral": ("spiral", "swirl", "swirling", "vortex", "golden ratio"),
    "grid": ("grid", "tiles", "tiled", "mosaic", "checkerboard", "modular"),
    "birds_eye": ("bird's-eye", "bird's eye", "birds-eye", "aerial", "overhead", "top-down"),
    "close_up": ("close-up", "closeup", "close up", "macro", "extreme detail"),
}
"""Layout name → the composition words (lower case) that select it; the earliest match wins."""

_LAYOUT_RE = re.compile(
    r"(?<![a-z])("
    + "|".join(
        re.escape(w)
        for w in sorted((w for ws in LAYOUTS.values() for w in ws), key=len, reverse=True)
    )
    + r")(?![a-z])"
)
_LAYOUT_OF = {w: name for name, ws in LAYOUTS.items() for w in ws}
_SEEDED_PALETTES = (
    ("navy", "coral", "gold", "cream"),
    ("teal", "ochre", "ivory", "charcoal"),
    ("plum", "peach", "sage", "cream"),
    ("emerald", "gold", "navy", "ivory"),
    ("terracotta", "sand", "olive", "slate"),
    ("indigo", "lavender", "amber", "white"),
    ("crimson", "charcoal", "beige", "gold"),
    ("cobalt", "mint", "coral", "ivory"),
)
_AUTO_SIZE = (1536, 1024)
_SIZE_RE = re.compile(r"^\s*(\d{1,5})\s*[xX\u00d7]\s*(\d{1,5})\s*$")


def parse_size(size: str) -> tuple[int, int]:
    if size.strip().lower() == "auto":
        return _AUTO_SIZE
    match = _SIZE_RE.match(size)
    if match:
        w, h = int(match.group(1)), int(match.group(2))
        if 16 <= w <= 4096 and 16 <= h <= 4096:
            return w, h
    raise RequestRejectedError(
        f"offline image backend: size: got {size!r}, expected 'WxH' with 16..4096 pixels per "
        "side (for example '1536x1024') or 'auto'"
    )


def _palette(prompt: str, rng: random.Random) -> tuple[list[str], str]:
    names = [_COLOUR_ALIASES.get(m, m) for m in _COLOUR_RE.findall(prompt)]
    found = list(dict.fromkeys(names))[:5]
    if found:
        return found, "prompt"
    return list(rng.choice(_SEEDED_PALETTES)), "seeded"


def _layout(prompt: str, rng: random.Random) -> tuple[str, str]:
    match = _LAYOUT_RE.search(prompt)
    if match:
        return _LAYOUT_OF[match.group(1)], "prompt"
    return rng.choice(sorted(LAYOUTS)), "seeded"


def _draw(
    size: tuple[int, int],
    names: list[str],
    layout: str,
    rng: random.Random,
    check: Callable[[], None],
) -> bytes:
    """:func:`offline_drawing.render <image_project.backends.offline_drawing.render>`, in the
    worker thread: Pillow is imported with it, on the first offline image of the process."""
    from image_project.backends import offline_drawing

    return offline_drawing.render(size, names, layout, rng, check)


class OfflineImageBackend:
    """A deterministic, network-free :class:`~image_project.backends.base.ImageBackend`.

    Draws a PNG from the prompt's colour and composition words (see the module docstring).
    The reply's ``model`` is always its own name (``offline-image-1``): whatever model the
    request named, no such model drew the picture. Raises :class:`~image_project.errors.RequestRejectedError` for a malformed ``size``.
    """

    __slots__ = ()

    @property
    def label(self) -> str:
        return "offline"

    @property
    def default_model(self) -> str:
        return "offline-image-1"

    async def generate(self, request: ImageRequest) -> ImageReply:
        model = request.model or self.default_model
        size = parse_size(request.size)
        seed = _derive_seed(
            "image",
            {
                "prompt": request.prompt,
                "model": model,
                "size": request.size,
                "quality": request.quality,
                "seed": request.seed,
            },
        )
        rng = random.Random(seed)
        lowered = request.prompt.lower().replace("\u2019", "'")
        names, palette_source = _palette(lowered, rng)
        layout, layout_source = _layout(lowered, rng)
        # Cancelling this call releases the caller at once (the thread is abandoned) and
        # stops the drawing at its next check.
        data = await anyio.to_thread.run_sync(
            partial(_draw, size, names, layout, rng, anyio.from_thread.check_cancelled),
            abandon_on_cancel=True,
        )
        return ImageReply(
            data=data,
            model=self.default_model,
            format="png",
            attempts=1,
            metadata={
                "renderer": "offline",
                "palette": list(names),
                "palette_source": palette_source,
                "layout": layout,
                "layout_source": layout_source,
                "size": f"{size[0]}x{size[1]}",
            },
        )
