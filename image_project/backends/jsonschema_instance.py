"""Deterministic, readable instances of the strict JSON schemas our answer models produce.

The offline backend answers a structured-output request with an instance of the request's
schema. :func:`generate_instance` builds one from a ``random.Random`` and a list of words
(taken from the conversation), so the same inputs always give the same instance and strings
read like words, not gibberish. It never calls the global ``random`` and does no I/O.

It supports exactly what :func:`image_project.engine.output.strict_json_schema` emits for an
answer model (:data:`~image_project.backends.base.STRICT_KEYWORDS`): ``type`` (one of
object, array, string, integer, number, boolean), ``properties`` (every property generated,
in declared order), ``required``, ``additionalProperties: false``, ``items``,
``minItems``/``maxItems`` (without ``maxItems`` an array gets at most ``minItems + 3``
items), ``enum`` (a seeded choice) and ``minimum``/``maximum`` (integers vary across the
whole range, leaning to its upper middle, score-like), and the string lengths of the
``grammar`` dialect (``minLength``/``maxLength``: a phrase is cut at a word boundary or
padded with words to fit; :data:`~image_project.backends.base.GRAMMAR_KEYWORDS` but
``pattern``, which a generated phrase cannot be made to match). Anything else raises
:class:`UnsupportedSchemaError` naming the keyword and its location, before anything is
generated: an answer that silently ignored a constraint would look valid and not be.

One rule covers what strict mode cannot say. A judge's ``{"scores": [{"id": ..., "score": ...}]}``
must name every candidate exactly once, but strict mode has no ``uniqueItems``. So when an
array's items are objects with an ``id`` property whose schema is an ``enum``, the ids are
distinct and in enum order; when ``minItems == maxItems == len(enum)`` every id appears exactly
once.

Strings are phrases from ``words`` (the offline backend passes the salient phrases of the last
user message) other than the schema's own property names and the stand-in words of
:data:`~image_project.markers.STAND_IN_WORDS` (an answer that fills a field with
``"composition"`` or ``"artwork"`` says nothing), kept distinct within one array while
the vocabulary allows, and follow the property name: narrative-like keys (``narrative``, ``description``, ``rationale``,
``*_prompt``...) get a sentence, hook-like keys (``hook``, ``title``, ``name``...) a short
phrase, anything else a single phrase.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from image_project.backends.base import STRICT_KEYWORDS
from image_project.errors import RequestRejectedError
from image_project.markers import STAND_IN_WORDS

SUPPORTED_KEYWORDS: frozenset[str] = STRICT_KEYWORDS | {"minLength", "maxLength"}
"""Every keyword :func:`check_schema` accepts: the strict subset answer models produce, and
the string lengths of the grammar dialect."""

_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})
_DEFAULT_WORDS = (
    "light",
    "colour",
    "texture",
    "horizon",
    "shadow",
    "rhythm",
    "quiet",
    "form",
    "contrast",
    "morning",
    "stillness",
    "motion",
)
_SENTENCE_KEYS = frozenset(
    {
        "narrative",
        "description",
        "summary",
        "rationale",
        "reason",
        "reasoning",
        "explanation",
        "story",
        "text",
        "caption",
        "prompt",
        "content",
        "body",
        "details",
        "notes",
        "note",
        "comment",
        "critique",
        "feedback",
        "message",
    }
)
_SHORT_KEYS = frozenset(
    {"hook", "title", "name", "headline", "label", "tagline", "subject", "theme", "concept"}
)
_CONNECTORS = ("and", "with", "over", "under", "beside", "through")
_SENTENCES = (
    "{A} against {b}, with {c} in the distance.",
    "{A} and {b}, held together by {c}.",
    "A quiet study of {a}, moving from {b} to {c}.",
    "{A} set against {b}, lit by {c}.",
    "Seen through {a}: {b}, giving way to {c}.",
    "{A} at the centre, {b} around it, and a trace of {c}.",
)


class UnsupportedSchemaError(RequestRejectedError):
    """The offline backend cannot produce an instance of this schema.

    A :class:`~image_project.errors.RequestRejectedError` (never retried). ``location`` is a
    JSON pointer into the schema.
    """

    def __init__(self, location: str, message: str) -> None:
        self.location = location or "#"
        super().__init__(
            f"offline backend, schema at {self.location}: {message} "
            "(supported: the strict schemas of answer models; see "
            "image_project.backends.jsonschema_instance)"
        )


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise :class:`UnsupportedSchemaError` unless every part of ``schema`` is supported."""
    if not isinstance(schema, Mapping):
        raise UnsupportedSchemaError("#", f"the root schema must be an object, got {schema!r}")
    _check(schema, "#")


def generate_instance(
    schema: Mapping[str, Any], rng: random.Random, words: Sequence[str] = ()
) -> Any:
    """A JSON value (dicts, lists, str, int, float, bool) that validates against ``schema``.

    ``words`` supplies the vocabulary for strings (a built-in one is used when it is empty);
    ``rng`` makes every choice. Raises :class:`UnsupportedSchemaError` (see the module docstring).
    """
    check_schema(schema)
    skip = _property_names(schema) | STAND_IN_WORDS
    return _Generator(rng, words, skip).value(schema, key=None)


def _property_names(node: Any) -> frozenset[str]:
    """Every property name in ``schema``, lower case."""
    if isinstance(node, Mapping):
        names = {str(k).lower() for k in node.get("properties", {})}
        for value in node.values():
            names |= _property_names(value)
        return frozenset(names)
    if isinstance(node, list):
        return frozenset().union(*(_property_names(v) for v in node))
    return frozenset()


def _check(node: Any, loc: str) -> None:
    if not isinstance(node, Mapping):
        raise UnsupportedSchemaError(loc, f"expected a schema object, got {node!r}")
    for keyword in node:
        if keyword not in SUPPORTED_KEYWORDS:
            raise UnsupportedSchemaError(loc, f"unsupported keyword {keyword!r}")
    kind = node.get("type")
    if not isinstance(kind, str) or kind not in _TYPES:
        raise UnsupportedSchemaError(loc, f"'type' must be one of {sorted(_TYPES)}, got {kind!r}")
    if "enum" in node and (not isinstance(node["enum"], list) or not node["enum"]):
        raise UnsupportedSchemaError(loc, f"'enum' must be a non-empty list, got {node['enum']!r}")
    if kind == "object":
        _check_object(node, loc)
    elif kind == "array":
        _check_array(node, loc)
    _check_bounds(node, loc)


def _check_object(node: Mapping[str, Any], loc: str) -> None:
    props = node.get("properties", {})
    if not isinstance(props, Mapping):
        raise UnsupportedSchemaError(loc, "'properties' must be an object")
    for name, sub in props.items():
        _check(sub, f"{loc}/properties/{_escape(name)}")
    required = node.get("required", [])
    if not isinstance(required, list) or any(r not in props for r in required):
        raise UnsupportedSchemaError(loc, f"'required' must name declared properties: {required!r}")
    if node.get("additionalProperties", False) is not False:
        raise UnsupportedSchemaError(loc, "'additionalProperties' must be false")


def _check_array(node: Mapping[str, Any], loc: str) -> None:
    if "items" not in node:
        raise UnsupportedSchemaError(loc, "an array needs 'items'")
    _check(node["items"], f"{loc}/items")
    lo, hi = _count(node, "minItems", loc, 0), _count(node, "maxItems", loc, None)
    if hi is not None and hi < (lo or 0):
        raise UnsupportedSchemaError(loc, f"minItems {lo} > maxItems {hi}")


def _check_bounds(node: Mapping[str, Any], loc: str) -> None:
    for keyword in ("minimum", "maximum"):
        bound = node.get(keyword)
        if keyword in node and (isinstance(bound, bool) or not isinstance(bound, int | float)):
            raise UnsupportedSchemaError(loc, f"{keyword!r} must be a number, got {bound!r}")
    if node.get("minimum", float("-inf")) > node.get("maximum", float("inf")):
        raise UnsupportedSchemaError(loc, "the bounds leave no value")
    shortest = _count(node, "minLength", loc, 0) or 0
    longest = _count(node, "maxLength", loc, None)
    if longest is not None and (longest < shortest or longest < 1):
        raise UnsupportedSchemaError(loc, f"the lengths {shortest}..{longest} leave no phrase")


def _count(node: Mapping[str, Any], keyword: str, loc: str, default: int | None) -> int | None:
    if keyword not in node:
        return default
    value = node[keyword]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UnsupportedSchemaError(loc, f"{keyword!r} must be an int >= 0, got {value!r}")
    return value


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _key_kind(key: str | None) -> str:
    if not key:
        return "words"
    parts = {p.lower() for p in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", key)}
    if parts & _SENTENCE_KEYS:
        return "sentence"
    if parts & _SHORT_KEYS:
        return "short"
    return "words"


class _Generator:
    """One generation pass: the rng and a word cursor."""

    def __init__(
        self, rng: random.Random, words: Sequence[str], keys: frozenset[str] = frozenset()
    ) -> None:
        self._rng = rng
        vocab = list(dict.fromkeys(w for w in words if w.strip())) or list(_DEFAULT_WORDS)
        self._vocab = vocab
        self._queue: list[str] = []
        self._keys = keys if any(w.strip().lower() not in keys for w in vocab) else frozenset()

    def value(self, node: Mapping[str, Any], *, key: str | None) -> Any:
        if "enum" in node:
            return self._rng.choice(node["enum"])
        kind = self._rng.choice([node["type"]])  # one draw per value keeps answers stable
        if kind == "object":
            props: Mapping[str, Any] = node.get("properties", {})
            return {name: self.value(sub, key=name) for name, sub in props.items()}
        if kind == "array":
            return self._array(node, key)
        if kind == "string":
            return self._fit(self._phrase(_key_kind(key)), node)
        if kind == "integer":
            return self._integer(node)
        if kind == "number":
            lo, hi = float(node.get("minimum", 0.0)), float(node.get("maximum", 1.0))
            return round(self._rng.uniform(lo, max(lo, hi)), 2)
        return self._rng.random() < 0.5

    def _array(self, node: Mapping[str, Any], key: str | None) -> list[Any]:
        lo: int = node.get("minItems", 0)
        hi: int | None = node.get("maxItems")
        cap = lo + 3 if hi is None else hi
        start = max(lo, min(1, cap))
        count = self._rng.randint(start, min(cap, start + 2))
        items: Mapping[str, Any] = node["items"]
        id_enum = self._id_enum(items)
        if id_enum is not None and count <= len(id_enum):
            out = []
            for ident in self._distinct(id_enum, count):
                item = self.value(items, key=key)
                item["id"] = ident
                out.append(item)
            return out
        out = []
        for _ in range(count):
            item = self.value(items, key=key)
            for _retry in range(3):
                if not isinstance(item, str) or item not in out:
                    break
                item = self.value(items, key=key)
            out.append(item)
        return out

    def _distinct(self, values: list[Any], count: int) -> list[Any]:
        """``count`` distinct values in enum order (all of them, in order, when count fits)."""
        if count == len(values):
            return list(values)
        chosen = sorted(self._rng.sample(range(len(values)), count))
        return [values[i] for i in chosen]

    @staticmethod
    def _id_enum(items: Mapping[str, Any]) -> list[Any] | None:
        """The ``id`` enum of an array's item object schema, if any (see the module docstring)."""
        if items.get("type") != "object":
            return None
        enum = items.get("properties", {}).get("id", {}).get("enum")
        return list(enum) if isinstance(enum, list) else None

    def _fit(self, text: str, node: Mapping[str, Any]) -> str:
        """``text`` within the node's ``minLength``/``maxLength`` (unchanged when it fits)."""
        shortest, longest = node.get("minLength", 0), node.get("maxLength")
        while len(text) < shortest:
            text = f"{text} {self._word()}"
        if longest is not None and len(text) > longest:
            cut = text[:longest]
            text = cut.rsplit(" ", 1)[0].rstrip(" ,.;:") if " " in cut.strip() else cut
            text = text if len(text) >= max(shortest, 1) else cut
        return text

    def _integer(self, node: Mapping[str, Any]) -> int:
        lo: int | None = node.get("minimum")
        hi: int | None = node.get("maximum")
        if lo is None and hi is None:
            lo, hi = 0, 100
        elif lo is None:
            assert hi is not None
            lo = hi - 100
        elif hi is None:
            hi = lo + 100
        if hi - lo >= 10:
            mode = lo + 0.7 * (hi - lo)
            return min(hi, max(lo, round(self._rng.triangular(lo, hi, mode))))
        return self._rng.randint(lo, hi)

    def _word(self) -> str:
        """The next vocabulary entry that is not one of the schema's property names; the
        vocabulary is reshuffled each time it runs out."""
        while True:
            if not self._queue:
                self._queue = self._rng.sample(self._vocab, len(self._vocab))
            word = self._queue.pop()
            if word.strip().lower() not in self._keys:
                return word

    def _other(self, *taken: str) -> str:
        word = self._word()
        return self._word() if word in taken and len(self._vocab) > len(taken) else word

    def _phrase(self, kind: str) -> str:
        a = self._word()
        if kind == "sentence":
            b = self._other(a)
            c = self._other(a, b)
            template = self._rng.choice(_SENTENCES)
            return template.format(A=a[:1].upper() + a[1:], a=a, b=b, c=c)
        if kind == "short":
            text = a
            if self._rng.random() < 0.5:
                text = f"{a} {self._rng.choice(_CONNECTORS)} {self._other(a)}"
            return text[:1].upper() + text[1:]
        return a
