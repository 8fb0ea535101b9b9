"""Deterministic, readable instances of a JSON schema (the strict structured-output subset).

The offline backend answers a structured-output request with an instance of the request's
schema. :func:`generate_instance` builds one from a ``random.Random`` and a list of words (taken
from the conversation), so the same inputs always give the same instance and strings read like
words, not gibberish. It never calls the global ``random`` and does no I/O.

Supported (OpenAI strict mode's subset, plus a little):

=====================  ==========================================================================
keyword                 behaviour
=====================  ==========================================================================
``type``                a name or a list of names (object, array, string, integer, number,
                        boolean, null); a list picks one type with the rng
``properties``          every property is generated, in declared order (strict mode requires all)
``required``            checked to name declared properties
``additionalProperties``  accepted (no extra keys are ever generated)
``items``               one schema for every item (tuple form is unsupported)
``minItems/maxItems``   honoured; without ``maxItems`` an array gets at most ``minItems + 3`` items
``enum`` / ``const``    a seeded choice / the constant
``minLength/maxLength`` honoured by adding or trimming words
``pattern``             best effort: a few readable candidates are tried with ``re.search``; when
                        none matches, :class:`UnsupportedSchemaError` says so
``minimum/maximum``     honoured, as are numeric ``exclusiveMinimum/exclusiveMaximum``; integers
                        vary across the whole range, leaning to its upper middle (score-like)
``anyOf``               a seeded branch (every branch is checked up front)
``$ref`` / ``$defs``    local references only (``#`` and ``#/...`` JSON pointers); ``definitions``
                        is accepted as an alias of ``$defs``
annotations             ``title``, ``description``, ``$comment``, ``examples``, ``default``,
                        ``deprecated``, ``readOnly``, ``writeOnly`` are ignored; ``$schema`` and
                        ``$id`` are ignored at the root only
=====================  ==========================================================================

Everything else (``oneOf``, ``allOf``, ``not``, ``if``, ``format``, ``multipleOf``,
``uniqueItems``, ``prefixItems``, ``patternProperties``, remote ``$ref``, ``$ref`` with sibling
constraints, draft-04 boolean exclusive bounds, the ``false`` schema, ...) raises
:class:`UnsupportedSchemaError` naming the keyword and its location, before anything is generated:
an answer that silently ignores a constraint would look valid and not be.

One rule covers what strict mode cannot say. A judge's ``{"scores": [{"id": ..., "score": ...}]}``
must name every candidate exactly once, but strict mode has no ``uniqueItems``. So when an
array's items are objects with an ``id`` property whose schema is an ``enum``, the ids are
distinct and in enum order; when ``minItems == maxItems == len(enum)`` every id appears exactly
once. Arrays of plain enum values are likewise distinct when the enum is long enough.

Strings are phrases from ``words`` (the offline backend passes the salient phrases of the last
user message), kept distinct within one array while the vocabulary allows, and follow the
property name: narrative-like keys (``narrative``, ``description``,
``rationale``, ``*_prompt``...) get a sentence, hook-like keys (``hook``, ``title``, ``name``...)
a short phrase, anything else a single phrase.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from image_project.errors import RequestRejectedError

__all__ = [
    "SUPPORTED_KEYWORDS",
    "UnsupportedSchemaError",
    "check_schema",
    "generate_instance",
]

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "$comment",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_ROOT_ONLY = frozenset({"$schema", "$id"})
_CONSTRAINTS = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
    }
)
SUPPORTED_KEYWORDS: frozenset[str] = _ANNOTATIONS | _ROOT_ONLY | _CONSTRAINTS
"""Every keyword :func:`check_schema` accepts (``$schema`` / ``$id`` at the root only)."""

_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})
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
_MAX_DEPTH = 32
_SHALLOW_DEPTH = 8


class UnsupportedSchemaError(RequestRejectedError):
    """The offline backend cannot produce an instance of this schema.

    A :class:`~image_project.errors.RequestRejectedError` (never retried): the real API would
    reject most of these schemas too. ``location`` is a JSON pointer into the schema.
    """

    def __init__(self, location: str, message: str) -> None:
        self.location = location or "#"
        super().__init__(
            f"offline backend, schema at {self.location}: {message} "
            "(supported: the strict structured-output subset; see "
            "image_project.backends.jsonschema_instance)"
        )


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise :class:`UnsupportedSchemaError` unless every part of ``schema`` is supported.

    Walks the whole schema (every ``anyOf`` branch and every ``$defs`` entry), so an
    unsupported keyword is reported whichever branch a seed would pick.
    """
    if not isinstance(schema, Mapping):
        raise UnsupportedSchemaError("#", f"the root schema must be an object, got {schema!r}")
    _check(schema, schema, "#", is_root=True)


def generate_instance(
    schema: Mapping[str, Any], rng: random.Random, words: Sequence[str] = ()
) -> Any:
    """A JSON value (dicts, lists, str, int, float, bool, None) that validates against ``schema``.

    ``words`` supplies the vocabulary for strings (a built-in one is used when it is empty);
    ``rng`` makes every choice. Raises :class:`UnsupportedSchemaError` (see the module docstring).
    """
    check_schema(schema)
    return _Generator(schema, rng, words).value(schema, "#", key=None, depth=0)


def _check(node: Any, root: Mapping[str, Any], loc: str, *, is_root: bool = False) -> None:
    if node is True:
        return
    if not isinstance(node, Mapping):
        raise UnsupportedSchemaError(loc, f"expected a schema object, got {node!r}")
    for keyword in node:
        if keyword in _ANNOTATIONS or keyword in _CONSTRAINTS:
            continue
        if keyword in _ROOT_ONLY and is_root:
            continue
        where = " below the root" if keyword in _ROOT_ONLY else ""
        raise UnsupportedSchemaError(loc, f"unsupported keyword {keyword!r}{where}")

    if "$ref" in node:
        extra = sorted(k for k in node if k in _CONSTRAINTS and k not in {"$ref", "$defs"})
        if extra:
            raise UnsupportedSchemaError(loc, f"'$ref' with sibling constraints {extra}")
        _resolve(root, node["$ref"], loc)

    for defs_key in ("$defs", "definitions"):
        if defs_key in node:
            defs = node[defs_key]
            if not isinstance(defs, Mapping):
                raise UnsupportedSchemaError(loc, f"{defs_key!r} must be an object")
            for name, sub in defs.items():
                _check(sub, root, f"{loc}/{defs_key}/{_escape(name)}")

    types = _types_of(node, loc)
    if "enum" in node and (not isinstance(node["enum"], list) or not node["enum"]):
        raise UnsupportedSchemaError(loc, f"'enum' must be a non-empty list, got {node['enum']!r}")

    if "properties" in node:
        props = node["properties"]
        if not isinstance(props, Mapping):
            raise UnsupportedSchemaError(loc, "'properties' must be an object")
        for name, sub in props.items():
            _check(sub, root, f"{loc}/properties/{_escape(name)}")
    if "required" in node:
        required = node["required"]
        declared = node.get("properties", {})
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise UnsupportedSchemaError(loc, f"'required' must be a list of names: {required!r}")
        missing = [r for r in required if r not in declared]
        if missing:
            raise UnsupportedSchemaError(loc, f"'required' names undeclared properties {missing}")
    extra_props = node.get("additionalProperties", False)
    if isinstance(extra_props, Mapping):
        _check(extra_props, root, f"{loc}/additionalProperties")
    elif not isinstance(extra_props, bool):
        raise UnsupportedSchemaError(loc, "'additionalProperties' must be a boolean or a schema")

    if "items" in node:
        if isinstance(node["items"], list):
            raise UnsupportedSchemaError(loc, "tuple-form 'items' (a list of schemas)")
        _check(node["items"], root, f"{loc}/items")
    lo_items = _count(node, "minItems", loc, 0) or 0
    hi_items = _count(node, "maxItems", loc, None)
    if hi_items is not None and hi_items < lo_items:
        raise UnsupportedSchemaError(loc, f"minItems {lo_items} > maxItems {hi_items}")

    lo_len = _count(node, "minLength", loc, 0) or 0
    hi_len = _count(node, "maxLength", loc, None)
    if hi_len is not None and hi_len < lo_len:
        raise UnsupportedSchemaError(loc, f"minLength {lo_len} > maxLength {hi_len}")
    if "pattern" in node:
        try:
            re.compile(node["pattern"])
        except (re.error, TypeError) as exc:
            raise UnsupportedSchemaError(loc, f"bad 'pattern' {node['pattern']!r}: {exc}") from exc

    for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = node.get(keyword)
        if keyword in node and (isinstance(bound, bool) or not isinstance(bound, int | float)):
            raise UnsupportedSchemaError(loc, f"{keyword!r} must be a number, got {bound!r}")
    if "integer" in types:
        _int_range(node, loc)
    if "number" in types:
        _float_range(node, loc)

    if "anyOf" in node:
        branches = node["anyOf"]
        if not isinstance(branches, list) or not branches:
            raise UnsupportedSchemaError(loc, "'anyOf' must be a non-empty list of schemas")
        for i, sub in enumerate(branches):
            _check(sub, root, f"{loc}/anyOf/{i}")


def _types_of(node: Mapping[str, Any], loc: str) -> list[str]:
    raw = node.get("type")
    if raw is None:
        return []
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names or not all(t in _TYPES for t in names):
        raise UnsupportedSchemaError(
            loc, f"'type' must be one of {sorted(_TYPES)} or a list, got {raw!r}"
        )
    return list(names)


def _count(node: Mapping[str, Any], keyword: str, loc: str, default: int | None) -> int | None:
    if keyword not in node:
        return default
    value = node[keyword]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UnsupportedSchemaError(loc, f"{keyword!r} must be an int >= 0, got {value!r}")
    return value


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _resolve(root: Mapping[str, Any], ref: Any, loc: str) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise UnsupportedSchemaError(
            loc, f"only local '$ref's ('#/...') are supported, got {ref!r}"
        )
    node: Any = root
    pointer = ref[1:]
    if pointer and not pointer.startswith("/"):
        raise UnsupportedSchemaError(loc, f"'$ref' {ref!r} is not a JSON pointer")
    for part in pointer.split("/")[1:] if pointer else []:
        token = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise UnsupportedSchemaError(loc, f"'$ref' {ref!r} does not resolve")
    return node


def _int_range(node: Mapping[str, Any], loc: str) -> tuple[int | None, int | None]:
    lo: int | None = None
    hi: int | None = None
    if "minimum" in node:
        lo = math.ceil(node["minimum"])
    if "exclusiveMinimum" in node:
        bound = math.floor(node["exclusiveMinimum"]) + 1
        lo = bound if lo is None else max(lo, bound)
    if "maximum" in node:
        hi = math.floor(node["maximum"])
    if "exclusiveMaximum" in node:
        bound = math.ceil(node["exclusiveMaximum"]) - 1
        hi = bound if hi is None else min(hi, bound)
    if lo is not None and hi is not None and lo > hi:
        raise UnsupportedSchemaError(loc, "the integer bounds leave no value")
    return lo, hi


def _float_range(node: Mapping[str, Any], loc: str) -> tuple[float, float, bool, bool]:
    lo, hi = -math.inf, math.inf
    lo_open = hi_open = False
    if "minimum" in node:
        lo = float(node["minimum"])
    if "exclusiveMinimum" in node and float(node["exclusiveMinimum"]) >= lo:
        lo, lo_open = float(node["exclusiveMinimum"]), True
    if "maximum" in node:
        hi = float(node["maximum"])
    if "exclusiveMaximum" in node and float(node["exclusiveMaximum"]) <= hi:
        hi, hi_open = float(node["exclusiveMaximum"]), True
    if lo > hi or (lo == hi and (lo_open or hi_open)):
        raise UnsupportedSchemaError(loc, "the number bounds leave no value")
    return lo, hi, lo_open, hi_open


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
    """One generation pass: holds the root (for ``$ref``), the rng and a word cursor."""

    def __init__(self, root: Mapping[str, Any], rng: random.Random, words: Sequence[str]) -> None:
        self._root = root
        self._rng = rng
        vocab = list(dict.fromkeys(w for w in words if w.strip())) or list(_DEFAULT_WORDS)
        self._vocab = vocab
        self._queue: list[str] = []

    def value(self, node: Any, loc: str, *, key: str | None, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise UnsupportedSchemaError(loc, f"recursion deeper than {_MAX_DEPTH} levels")
        if node is True:
            return self._string({}, loc, key)
        if "$ref" in node:
            return self.value(
                _resolve(self._root, node["$ref"], loc), loc, key=key, depth=depth + 1
            )
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return self._rng.choice(node["enum"])
        if "anyOf" in node:
            branches: list[Any] = node["anyOf"]
            index = (
                self._cheapest(branches)
                if depth >= _SHALLOW_DEPTH
                else self._rng.randrange(len(branches))
            )
            return self.value(branches[index], f"{loc}/anyOf/{index}", key=key, depth=depth + 1)

        types = _types_of(node, loc) or [_implied_type(node)]
        if depth >= _SHALLOW_DEPTH:
            kind = min(types, key=_TYPE_COST.__getitem__)
        else:
            kind = self._rng.choice(types)
        if kind == "object":
            return self._object(node, loc, depth)
        if kind == "array":
            return self._array(node, loc, key, depth)
        if kind == "string":
            return self._string(node, loc, key)
        if kind == "integer":
            return self._integer(node, loc)
        if kind == "number":
            return self._number(node, loc)
        if kind == "boolean":
            return self._rng.random() < 0.5
        return None

    def _cheapest(self, branches: list[Any]) -> int:
        def cost(branch: Any) -> int:
            seen = 0
            while isinstance(branch, Mapping) and "$ref" in branch and seen < _MAX_DEPTH:
                branch = _resolve(self._root, branch["$ref"], "#")
                seen += 1
            if not isinstance(branch, Mapping) or "const" in branch or "enum" in branch:
                return 0
            if "anyOf" in branch:
                return 3
            types = _types_of(branch, "#") or [_implied_type(branch)]
            return min(_TYPE_COST[t] for t in types)

        return min(range(len(branches)), key=lambda i: cost(branches[i]))

    def _object(self, node: Mapping[str, Any], loc: str, depth: int) -> dict[str, Any]:
        props: Mapping[str, Any] = node.get("properties", {})
        return {
            name: self.value(sub, f"{loc}/properties/{_escape(name)}", key=name, depth=depth + 1)
            for name, sub in props.items()
        }

    def _array(self, node: Mapping[str, Any], loc: str, key: str | None, depth: int) -> list[Any]:
        lo: int = node.get("minItems", 0)
        hi: int | None = node.get("maxItems")
        cap = lo + 3 if hi is None else hi
        if depth >= _SHALLOW_DEPTH:
            count = lo
        else:
            start = max(lo, min(1, cap))
            count = self._rng.randint(start, min(cap, start + 2))
        items: Any = node.get("items", True)
        item_loc = f"{loc}/items"
        target = self._deref(items, item_loc)

        enum = target.get("enum") if isinstance(target, Mapping) else None
        if isinstance(enum, list) and "const" not in target and count <= len(enum):
            return self._distinct(enum, count)

        id_enum = self._id_enum(target, item_loc)
        if id_enum is not None and count <= len(id_enum):
            ids = self._distinct(id_enum, count)
            out = []
            for ident in ids:
                item = self.value(target, item_loc, key=key, depth=depth + 1)
                item["id"] = ident
                out.append(item)
            return out

        out = []
        for _ in range(count):
            item = self.value(items, item_loc, key=key, depth=depth + 1)
            for _retry in range(3):
                if not isinstance(item, str) or item not in out:
                    break
                item = self.value(items, item_loc, key=key, depth=depth + 1)
            out.append(item)
        return out

    def _distinct(self, values: list[Any], count: int) -> list[Any]:
        """``count`` distinct values in enum order (all of them, in order, when count fits)."""
        if count == len(values):
            return list(values[:count])
        chosen = sorted(self._rng.sample(range(len(values)), count))
        return [values[i] for i in chosen]

    def _id_enum(self, target: Any, loc: str) -> list[Any] | None:
        """The ``id`` enum of an array's item object schema, if any (see the module docstring)."""
        if not isinstance(target, Mapping) or "properties" not in target:
            return None
        types = _types_of(target, loc)
        if types and types != ["object"]:
            return None
        id_schema = self._deref(target["properties"].get("id"), loc)
        if not isinstance(id_schema, Mapping) or "const" in id_schema:
            return None
        enum = id_schema.get("enum")
        return list(enum) if isinstance(enum, list) else None

    def _deref(self, node: Any, loc: str) -> Any:
        seen = 0
        while isinstance(node, Mapping) and "$ref" in node:
            seen += 1
            if seen > _MAX_DEPTH:
                raise UnsupportedSchemaError(loc, "'$ref' cycle")
            node = _resolve(self._root, node["$ref"], loc)
        return node

    def _integer(self, node: Mapping[str, Any], loc: str) -> int:
        lo, hi = _int_range(node, loc)
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

    def _number(self, node: Mapping[str, Any], loc: str) -> float:
        lo, hi, lo_open, hi_open = _float_range(node, loc)
        if math.isinf(lo) and math.isinf(hi):
            lo, hi = 0.0, 1.0
        elif math.isinf(lo):
            lo = hi - 1.0
        elif math.isinf(hi):
            hi = lo + 1.0
        x = self._rng.uniform(lo, hi)
        for candidate in (round(x, 2), x, (lo + hi) / 2):
            if (lo < candidate or (not lo_open and lo == candidate)) and (
                candidate < hi or (not hi_open and candidate == hi)
            ):
                return candidate
        return (lo + hi) / 2

    def _word(self) -> str:
        """The next vocabulary entry; the vocabulary is reshuffled each time it runs out."""
        if not self._queue:
            self._queue = self._rng.sample(self._vocab, len(self._vocab))
        return self._queue.pop()

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

    def _string(self, node: Mapping[str, Any], loc: str, key: str | None) -> str:
        lo: int = node.get("minLength", 0)
        hi: int | None = node.get("maxLength")
        base = self._phrase(_key_kind(key))
        pattern: str | None = node.get("pattern")
        if pattern is None:
            return self._fit(base, lo, hi)
        candidates = [
            variant for text in (base, self._word(), *_DEFAULT_WORDS) for variant in _variants(text)
        ]
        candidates += ["1", "a1", "A1"]
        compiled = re.compile(pattern)
        for candidate in candidates:
            fitted = self._fit(candidate, lo, hi)
            if compiled.search(fitted):
                return fitted
        raise UnsupportedSchemaError(
            loc,
            f"cannot satisfy 'pattern' {pattern!r} with plain words; the offline backend only "
            "handles patterns that simple words match (for example '^[A-Za-z ]+$')",
        )

    def _fit(self, text: str, lo: int, hi: int | None) -> str:
        while len(text) < lo:
            text = f"{text} {self._word()}" if text else self._word()
        if hi is not None and len(text) > hi:
            cut = text[:hi]
            if text[hi] != " " and " " in cut and len(cut.rsplit(" ", 1)[0]) >= lo:
                cut = cut.rsplit(" ", 1)[0]
            stripped = cut.rstrip(" ,")
            text = stripped if len(stripped) >= lo else cut
        return text


def _variants(text: str) -> list[str]:
    """Readable spellings of ``text`` to try against a ``pattern``, most natural first."""
    letters = re.sub(r"[^A-Za-z ]+", "", text).strip() or "a"
    out = []
    for t in (text, letters):
        out += [t, t[:1].upper() + t[1:], t.lower(), t.title(), t.upper()]
        out += [t.replace(" ", "-"), t.replace(" ", "_"), t.replace(" ", "")]
    return list(dict.fromkeys(out))


_TYPE_COST = {
    "null": 0,
    "boolean": 0,
    "integer": 0,
    "number": 0,
    "string": 1,
    "array": 2,
    "object": 3,
}


def _implied_type(node: Mapping[str, Any]) -> str:
    if "properties" in node or "required" in node or "additionalProperties" in node:
        return "object"
    if "items" in node or "minItems" in node or "maxItems" in node:
        return "array"
    if any(k in node for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        return "number"
    return "string"
