"""How a step's answer is read: :class:`JsonOutput` (a pydantic model is both the strict JSON
schema sent to the server and the validator of the answer), :class:`TextOutput` (free text
through a parse function) and :class:`ReaskPolicy` (what happens to an answer that fails).

Modelled on pydantic-ai's ``output_type``: one definition per answer shape, so the schema the
server is held to and the code that checks the answer cannot disagree.

**Strict schemas.** :func:`strict_json_schema` turns a model into OpenAI's strict
structured-output subset: every ``$ref`` inlined, every object listing all its properties in
``required`` with ``additionalProperties: false``, and only the keywords ``type``,
``properties``, ``required``, ``additionalProperties``, ``items``, ``minItems``,
``maxItems``, ``enum``, ``minimum`` and ``maximum`` kept
(:data:`~image_project.backends.base.STRICT_KEYWORDS`).
A ``const`` (a one-value ``Literal``) becomes a one-value ``enum``. Annotations (``title``,
``description``, ``default``) are dropped, and so are string lengths and patterns, which
strict mode cannot express: the model still checks them when the answer is validated.
The same schema in the ``grammar`` dialect (``JsonSchema.grammar``) keeps ``minLength``,
``maxLength`` and ``pattern`` (:data:`~image_project.backends.base.GRAMMAR_KEYWORDS`), for
servers that compile them into a grammar (llama.cpp, vLLM; ``backend.schema_dialect``).
A model that needs anything else (an optional field, a union) is rejected when the step is
built, naming the model and the keyword. The schema's ``name`` is the model's ``title``
(``model_config = ConfigDict(title=...)``).

**Strict answers.** :func:`extract_json_object` accepts the JSON object alone, or alone inside
one Markdown code fence, and rejects everything else with a short reason: prose around the
object, invalid JSON (``NaN``/``Infinity`` included), a top-level value that is not an
object, duplicate keys, nesting too deep to decode, integers too long to convert. Rejections
are plain ``ValueError`` (the runner's re-ask signal) saying why, never quoting the answer:
the message is what the re-ask sends back to the model.

**Refusals.** With ``refusals=True`` an answer with no JSON object in it that reads like a
refusal (:data:`REFUSAL_PATTERNS` within its first 300 characters) raises
:class:`~image_project.errors.RefusalError`, which is never re-asked; an answer that tried
(a ``{...}`` with an apology around it) is malformed, not a refusal.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias, TypeVar, cast

from pydantic import BaseModel, ValidationError

from image_project.backends.base import GRAMMAR_KEYWORDS, STRICT_KEYWORDS, JsonSchema
from image_project.errors import PipelineDefinitionError, RefusalError, preview

ReaskStyle = Literal["conversation", "restate"]

T = TypeVar("T")
U = TypeVar("U")
"""What an output hands back: the validated answer (after ``check``) or the parsed text."""


def default_reask(error: str) -> str:
    return (
        "Your previous answer was rejected by validation:\n"
        f"{error}\n"
        "Answer the original request again, following the required format exactly. "
        "Output only the answer."
    )


@dataclass(frozen=True)
class ReaskPolicy:
    """What happens when an answer fails its output's validation.

    ``max`` re-asks follow, each carrying the validation error. ``style`` ``"conversation"``
    appends the rejected answer and the error to the conversation; ``"restate"`` re-asks
    statelessly instead (the same history plus ONE user message: the original prompt followed
    by the error), so a bad answer cannot anchor the next one. ``prompt`` words the re-ask.
    ``fallback(last_answer, last_error)``, when set, is called once the re-asks are used up
    and its value is accepted instead of failing (a title with a deterministic fallback).
    ``skip(error)``, when set, may name a reason not to re-ask this error at all (the step
    then fails at once, the reason in its error: an answer a re-ask would only repeat).
    ``resample(error, k)``, when set, may give re-ask ``k`` (1-based) its own
    ``(seed, temperature)`` instead of the step's (a temperature-0 answer re-asked with the
    same seed comes back byte-identical); the re-ask's record keeps them.
    """

    max: int = 0
    style: ReaskStyle = "conversation"
    prompt: Callable[[str], str] = default_reask
    fallback: Callable[[str, Exception], object] | None = None
    skip: Callable[[Exception], str | None] | None = None
    resample: Callable[[Exception, int], tuple[int, float] | None] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max, bool) or not isinstance(self.max, int) or self.max < 0:
            raise PipelineDefinitionError(f"ReaskPolicy.max must be an int >= 0, got {self.max!r}")
        if self.style not in ("conversation", "restate"):
            raise PipelineDefinitionError(
                f"ReaskPolicy.style must be 'conversation' or 'restate', got {self.style!r}"
            )


# --------------------------------------------------------------------------- strict schemas

_ANNOTATIONS = frozenset({"$defs", "title", "description", "default", "examples"})


def _strict(
    node: Any,
    defs: Mapping[str, Any],
    where: str,
    seen: tuple[str, ...],
    keywords: frozenset[str] = STRICT_KEYWORDS,
) -> Any:
    if not isinstance(node, Mapping):
        raise PipelineDefinitionError(f"{where}: expected a schema object, got {node!r}")
    ref = node.get("$ref")
    if ref is not None:
        name = str(ref).rsplit("/", 1)[-1]
        if name in seen or name not in defs:
            problem = "is recursive" if name in seen else "cannot be resolved"
            raise PipelineDefinitionError(f"{where}: $ref {ref!r} {problem}")
        return _strict(defs[name], defs, where, (*seen, name), keywords)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _ANNOTATIONS or (key in GRAMMAR_KEYWORDS and key not in keywords):
            continue
        if key == "const":  # a one-value Literal: the same constraint as a one-value enum
            out["enum"] = [value]
        elif key == "additionalProperties" and value is not False:
            raise PipelineDefinitionError(
                f"{where}: additionalProperties: an open object (a dict field, or extra keys "
                "allowed) cannot be a strict structured-output schema; use fixed fields"
            )
        elif key not in GRAMMAR_KEYWORDS:
            raise PipelineDefinitionError(
                f"{where}: the keyword {key!r} is not supported in a strict structured-output "
                f"schema (allowed: {', '.join(sorted(GRAMMAR_KEYWORDS))}); make the field "
                "required and of a plain type, and check the rest in code"
            )
        else:
            out[key] = _strict_value(key, value, defs, where, seen, keywords)
    if out.get("type") == "object":
        out["required"] = list(out.get("properties", {}))
        out["additionalProperties"] = False
    return out


def _strict_value(
    key: str,
    value: Any,
    defs: Mapping[str, Any],
    where: str,
    seen: tuple[str, ...],
    keywords: frozenset[str],
) -> Any:
    if key == "properties":
        return {
            name: _strict(sub, defs, f"{where}.{name}", seen, keywords)
            for name, sub in value.items()
        }
    if key == "items":
        return _strict(value, defs, f"{where}[]", seen, keywords)
    return value


@functools.lru_cache(maxsize=512)
def strict_json_schema(model: type[BaseModel]) -> JsonSchema:
    """The strict structured-output schema of ``model`` (see the module docstring)."""
    raw = model.model_json_schema(mode="validation")
    name = str(model.model_config.get("title") or model.__name__)
    defs = raw.get("$defs", {})
    schema = _strict(raw, defs, name, ())
    if schema.get("type") != "object":
        raise PipelineDefinitionError(f"{name}: the root of an answer schema must be an object")
    grammar = _strict(raw, defs, name, (), GRAMMAR_KEYWORDS)
    return JsonSchema(name=name, schema=schema, strict=True, grammar=grammar)


def literal_of(values: Sequence[str]) -> Any:
    """``Literal[values...]`` built at run time, for an answer model whose allowed values (the
    card ids of a run) are known only when the run starts."""
    if not values:
        raise PipelineDefinitionError("literal_of needs at least one value")
    return Literal.__getitem__(tuple(values))


def list_of(item: type[BaseModel]) -> Any:
    """``list[item]`` for a model class built at run time."""
    return list.__class_getitem__(item)


# --------------------------------------------------------------------------- strict answers

_FENCE_RE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\r?\n(?P<body>.*)\r?\n[ \t]*```$", re.DOTALL)

# Seed 002's refusal heuristics: phrases a model uses when it declines. Matched
# case-insensitively near the start of an answer that holds no JSON object.
REFUSAL_PATTERNS: tuple[str, ...] = (
    r"i['\u2019]m sorry",
    r"i am sorry",
    r"\bsorry\b",
    r"i cannot",
    r"i can['\u2019]t",
    r"cannot comply",
    r"cannot fulfill",
    r"cannot fulfil",
    r"not able to",
    r"unable to (?:help|assist|comply)",
    r"as an ai\b",
)
_REFUSAL_RE = re.compile("|".join(REFUSAL_PATTERNS), re.IGNORECASE)
_REFUSAL_WINDOW = 300


def looks_like_refusal(text: str) -> bool:
    """True when ``text`` reads like a refusal: one of :data:`REFUSAL_PATTERNS` within its
    first 300 characters. Only consulted for answers with no JSON object in them."""
    return bool(_REFUSAL_RE.search(text[:_REFUSAL_WINDOW]))


def has_json_object(text: str) -> bool:
    """True when ``text`` holds a ``{`` before a ``}``: the model tried to answer in JSON."""
    start = text.find("{")
    return start >= 0 and text.find("}", start) > start


class _Rejected(ValueError):
    """A rejection raised inside ``json.loads`` hooks, re-raised as a plain ``ValueError``."""


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Rejected("a key appears twice in one JSON object (duplicate keys)")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise _Rejected(f"the answer is not valid JSON: {name} is not a JSON number")


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object that is the whole answer (optionally inside one code fence).

    Raises ``ValueError`` with a short, specific reason otherwise.
    """
    body = text.strip()
    fence = _FENCE_RE.match(body)
    if fence:
        body = fence.group("body").strip()
    if not body:
        raise ValueError("the answer is empty; expected a JSON object")
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise ValueError("expected a JSON object, found no {...} in the answer")
    if start > 0 or end < len(body) - 1:
        where = "before" if body[:start].strip() else "after"
        raise ValueError(
            "the answer must be ONLY the JSON object, with no text before or after it; found "
            f"text {where} the object"
        )
    try:
        value = json.loads(
            body, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer is not valid JSON: {exc}") from exc
    except _Rejected as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        raise ValueError("the JSON object is nested too deeply to read") from None
    except ValueError as exc:  # int() refuses longer numbers than sys.get_int_max_str_digits()
        raise ValueError(
            f"the answer holds a number of more than {sys.get_int_max_str_digits()} digits"
        ) from exc
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object at the top level, got {type(value).__name__}")
    return value


def describe_validation_error(exc: ValidationError, *, limit: int = 6) -> str:
    """pydantic errors as ``"options.palette: List should have at least 2 items"`` parts.

    A ``ValueError`` raised by a model's own validator keeps its message as written (without
    pydantic's ``Value error,`` prefix, and without a location when it concerns the whole
    answer). No part of the answer is quoted (pydantic's messages name the rule, not the
    value; the name of a key the schema does not have is left out): the message is what a
    re-ask sends back to the model."""
    parts = []
    for error in exc.errors()[:limit]:
        where, message = error["loc"], error["msg"]
        if error["type"] == "extra_forbidden":  # the key is the answer's own: not quoted
            where, message = where[:-1], "a key that is not in the schema (not allowed)"
        elif error["type"] == "missing":
            message = "required key is missing"
        loc = preview(".".join(str(part) for part in where), 80)
        if error["type"] == "value_error":
            message = str(message).removeprefix("Value error, ")
            if not loc:
                parts.append(message)
                continue
        parts.append(f"{loc or '(top level)'}: {message}")
    hidden = len(exc.errors()) - limit
    if hidden > 0:
        parts.append(f"... and {hidden} more")
    return "; ".join(parts)


# --------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class JsonOutput(Generic[T]):
    """A structured answer: ``model`` defines both the strict JSON schema sent with the
    request (:attr:`schema`) and the validation of the answer (:meth:`parse`).

    ``check(value)`` runs after the model validated; it may return a different value to
    hand back, or raise ``ValueError`` to have the answer re-asked with that message.
    ``what`` names the answer in messages (default: the schema name with spaces).
    ``T`` is what :meth:`parse` returns: the model instance, or what ``check`` returns
    (annotate the output, e.g. ``JsonOutput[IdeaCard]``, so steps built on it are typed).
    """

    model: type[BaseModel]
    check: Callable[[Any], T] | None = None
    refusals: bool = False
    what: str | None = None
    schema: JsonSchema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "schema", strict_json_schema(self.model))

    @property
    def label(self) -> str:
        return self.what or self.schema.name.replace("_", " ")

    def then(self, fn: Callable[[T], U]) -> JsonOutput[U]:
        """The same output (schema, checks, refusals, wording) handing back ``fn`` of its
        value: e.g. a judge's scores wrapped as the verdict its flow reads."""
        check = self.check

        def composed(value: Any) -> U:
            return fn(value if check is None else check(value))

        return JsonOutput(self.model, check=composed, refusals=self.refusals, what=self.what)

    def parse(self, text: str) -> T:
        """The validated answer (after ``check``), ``ValueError`` saying what is wrong (for a
        re-ask), or ``RefusalError`` (see the module docstring)."""
        try:
            data = extract_json_object(text)
        except ValueError:
            if self.refusals and not has_json_object(text) and looks_like_refusal(text):
                raise RefusalError(
                    f"the model declined to give the {self.label}", output=text
                ) from None
            raise
        try:
            value = self.model.model_validate(data)
        except ValidationError as exc:
            raise ValueError(f"invalid {self.label}: {describe_validation_error(exc)}") from exc
        if self.check is None:
            return cast("T", value)  # without a check, T is the model itself
        return self.check(value)


@dataclass(frozen=True)
class TextOutput(Generic[T]):
    """A free-text answer read by ``parse(text)``, which returns the value to hand back or
    raises ``ValueError`` / ``ModelOutputError`` (re-asked) or ``RefusalError`` (not)."""

    parse: Callable[[str], T]
    schema: None = field(default=None, init=False, repr=False, compare=False)


Output: TypeAlias = JsonOutput[T] | TextOutput[T]
