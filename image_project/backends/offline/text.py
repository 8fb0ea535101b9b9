"""Text replies: the rules of the package docstring's table, and :class:`OfflineTextBackend`."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from image_project.backends.base import TextReply, TextRequest, Usage
from image_project.backends.jsonschema_instance import generate_instance
from image_project.backends.offline.rubric import MODEL_ERROR, _rubric_judge_reply
from image_project.backends.offline.seed import _derive_seed
from image_project.backends.offline.selector import _selector_reply
from image_project.backends.offline.words import (
    _FALLBACK_WORDS,
    _STOPWORDS,
    _TITLE_CLOSERS,
    _last_user_text,
    _pool,
    _salient_units,
    estimate_tokens,
)

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
    the count, such as the dislike rewrite), the first JSON array of N strings in
    ``user_text`` (the material to rewrite comes before any list of constraints), unchanged:
    an offline rewrite changes nothing. None when that does not apply. The backend reads the
    user messages from the last back, so a re-ask in the conversation (whose message holds no
    array) is answered from the request it re-asks."""
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


class OfflineTextBackend:
    """A deterministic, network-free :class:`~image_project.backends.base.TextBackend`.

    See the package docstring for how requests are answered. Raises
    :class:`~image_project.backends.jsonschema_instance.UnsupportedSchemaError` (a
    ``RequestRejectedError``) for a schema outside the supported subset. ``model_error`` is
    the half-width of the error a rubric judge's model makes on a card, shared by every
    judge on that model (:data:`~.rubric.MODEL_ERROR` points; 0 turns it off, as the wire
    snapshots do to keep the answers they were taken with).
    """

    __slots__ = ("_model_error",)

    def __init__(self, *, model_error: float = MODEL_ERROR) -> None:
        if not 0.0 <= model_error <= 50.0:
            raise ValueError(f"model_error: got {model_error}, must be in 0..50 points")
        self._model_error = model_error

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
                next(
                    (
                        echoed
                        for m in reversed(request.messages)
                        if m.role == "user"
                        and (echoed := _echoed_array(schema.schema, m.content)) is not None
                    ),
                    None,
                )
                or _selector_reply(schema, user_text)
                or _rubric_judge_reply(request, schema, rng, model, self._model_error)
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
