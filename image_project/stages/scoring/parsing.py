"""Strict JSON answers: extraction, refusal detection, readable validation errors.

The scoring stage asks models for JSON only. What is accepted:

* the JSON object alone, surrounded by whitespace;
* the JSON object alone inside one Markdown code fence (```` ```json ... ``` ````), which
  some models add even when told not to; the fence carries no information, so it is removed.

Everything else is rejected with a message that says what was wrong, for the re-ask: prose
before or after the object (a judge's prose is rationale, which the black-box design forbids),
invalid JSON (including ``NaN`` / ``Infinity``, which ``json`` would otherwise accept), a
top-level value that is not an object, duplicate keys (which ``json`` would otherwise resolve
silently by keeping the last), nesting too deep to decode and integers too long to convert.

The rejection is always a plain ``ValueError`` (the engine's re-ask signal, turned into a
``ModelOutputError`` once the re-asks are used up); values quoted in messages go through
:func:`short_repr`, so a message stays short whatever the model wrote.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from pydantic import ValidationError

from image_project.errors import preview, short_repr

__all__ = [
    "REFUSAL_PATTERNS",
    "describe_validation_error",
    "extract_json_object",
    "has_json_object",
    "looks_like_refusal",
    "short_repr",
]

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
            raise _Rejected(f"duplicate key {short_repr(key)} in the JSON object")
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
        raise ValueError(f"expected a JSON object, found no {{...}} in {preview(body, 80)!r}")
    if start > 0 or end < len(body) - 1:
        extra = body[:start].strip() or body[end + 1 :].strip()
        raise ValueError(
            "the answer must be ONLY the JSON object, with no text before or after it; found "
            f"{preview(extra, 60)!r}"
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
    """pydantic errors as ``"options.palette: List should have at least 2 items"`` lines."""
    lines = []
    for error in exc.errors()[:limit]:
        loc = preview(".".join(str(part) for part in error["loc"]), 80) or "(top level)"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unexpected key (not allowed)"
        elif error["type"] == "missing":
            message = "required key is missing"
        lines.append(f"{loc}: {message}")
    hidden = len(exc.errors()) - limit
    if hidden > 0:
        lines.append(f"... and {hidden} more")
    return "; ".join(lines)
