"""The configuration schema's building blocks: the strict validators (booleans, numbers that
are never booleans or floats or strings, non-blank text, paths resolved against the project
root), the bounds every section shares, and :class:`_Section`, the base of every section
model (frozen, unknown keys forbidden, a missing sub-section validated from ``{}``). The
contract is in :mod:`image_project.config.models`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    model_validator,
)

from image_project.errors import ConfigError, short_repr

_TRUE_WORDS = frozenset({"true", "yes", "1"})
_FALSE_WORDS = frozenset({"false", "no", "0"})
_BOOL_ALLOWED = "true or false (also yes/no, 1/0)"

MAX_NAME_CHARS = 200
"""Longest model name, environment variable name or judge id."""
MAX_URL_CHARS = 2048
MAX_PATH_CHARS = 4096
"""Longest path (Linux's PATH_MAX)."""
MAX_RUN_SEED = 2**63 - 1
"""Largest ``prompt.random_seed``: a run seed is recorded in the transcript and the CSVs and
fed to :func:`~image_project.seeding.derive_seed`; it must stay a 64-bit int everywhere."""
IMAGE_SIDE_MIN, IMAGE_SIDE_MAX = 16, 4096
"""Pixels per side of ``image.size`` (the range the offline image backend renders)."""

_show = short_repr


# --------------------------------------------------------------------------- validators


class _Invalid(ValueError):
    """Raised by our field validators; the error translator turns it into a message.

    ``must`` replaces the allowed-values text derived from the field; ``note`` is appended;
    ``redact`` hides the input (for keys where a user may paste a secret); ``shown`` is then
    what the message shows instead (a URL without its password, say).
    """

    def __init__(
        self,
        must: str | None = None,
        *,
        note: str = "",
        redact: bool = False,
        shown: str | None = None,
    ):
        super().__init__(must or note or "invalid value")
        self.must = must
        self.note = note
        self.redact = redact
        self.shown = shown


class _KeyedInvalid(ValueError):
    """Raised by model validators: ``subkey`` is appended to the model's path."""

    def __init__(self, subkey: str, message: str) -> None:
        super().__init__(message)
        self.subkey = subkey
        self.message = message


def _bool_or_none(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def parse_strict_bool(value: object, key: str) -> bool:
    """``True``/``False``, ints 0/1, or the words true/false/yes/no/1/0 (any case, trimmed).

    Anything else (``None``, ``2``, ``1.0``, ``"maybe"``) raises :class:`ConfigError` for ``key``.
    """
    result = _bool_or_none(value)
    if result is None:
        raise ConfigError(key, f"got {_show(value)}, must be {_BOOL_ALLOWED}")
    return result


def _validate_strict_bool(value: object) -> bool:
    result = _bool_or_none(value)
    if result is None:
        raise _Invalid()
    return result


_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _reject_bool(value: object) -> object:
    """A number key takes a number: never a boolean, never a string (``"2"``, quoted in the
    YAML or in ``--set 'run.runs="2"'``), which is refused like a float for an int."""
    if isinstance(value, bool):
        raise _Invalid(note="a boolean is not a number")
    if isinstance(value, str):
        bare = value.strip()
        number = _NUMBER.fullmatch(bare) is not None and len(bare) <= 40
        raise _Invalid(
            note="a string is not a number" + (f"; write {bare} without quotes" if number else "")
        )
    return value


def _reject_bool_or_float(value: object) -> object:
    """An int key takes an int, never a float: ``4.0`` is refused like ``4.5`` instead of
    being silently truncated; nor a string (``"4"``)."""
    if isinstance(value, float):
        whole = f"; write {int(value)}" if value.is_integer() and abs(value) < 1e15 else ""
        raise _Invalid(note=f"a float is not an int{whole}")
    return _reject_bool(value)


def _non_blank(value: str) -> str:
    if not value.strip():
        raise _Invalid(f"a non-empty string of at most {MAX_NAME_CHARS} characters")
    if len(value) > MAX_NAME_CHARS:
        raise _Invalid(
            f"a non-empty string of at most {MAX_NAME_CHARS} characters (got {len(value)})"
        )
    return value


def _check_base_url(value: str | None) -> str | None:
    if value is None:
        return value
    if not value.startswith(("http://", "https://")) or len(value) > MAX_URL_CHARS:
        raise _Invalid(
            f"a URL starting with http:// or https:// of at most {MAX_URL_CHARS} characters, "
            "or null"
        )
    return value


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise _Invalid(
            "the NAME of an environment variable (like OPENAI_API_KEY), never the key itself",
            redact=True,
        )
    return value


_JUDGE_ID = re.compile(r"[A-Za-z0-9_.-]+")


def _check_judge_id(value: str) -> str:
    if not _JUDGE_ID.fullmatch(value) or len(value) > MAX_NAME_CHARS:
        raise _Invalid(
            f"a non-empty string of at most {MAX_NAME_CHARS} letters, digits, '_', '.' or '-'"
        )
    return value


_SIZE = re.compile(r"([1-9][0-9]{0,5})x([1-9][0-9]{0,5})")


def _check_size(value: str) -> str:
    if value == "auto":
        return value
    match = _SIZE.fullmatch(value)
    sides = (int(match.group(1)), int(match.group(2))) if match else ()
    if not sides or not all(IMAGE_SIDE_MIN <= side <= IMAGE_SIDE_MAX for side in sides):
        raise _Invalid(
            f"'WxH' with {IMAGE_SIDE_MIN}..{IMAGE_SIDE_MAX} pixels per side "
            "(like '1536x1024') or 'auto'"
        )
    return value


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _non_empty_path(value: object) -> object:
    if isinstance(value, str) and (not value.strip() or len(value) > MAX_PATH_CHARS):
        raise _Invalid(f"a non-empty path of at most {MAX_PATH_CHARS} characters")
    return value


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """Expand ``~`` and ``$VAR``/``${VAR}``, then anchor a relative path at the context root.

    ``info.context`` may carry ``root`` (a Path) and ``env`` (a mapping); without a context
    (a model built in code) ``os.environ`` is used and relative paths stay relative.
    """
    context = info.context if isinstance(info.context, Mapping) else {}
    env: Mapping[str, str] = context.get("env", os.environ)
    root: Path | None = context.get("root")
    text = str(value)

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in env:
            raise _Invalid(f"a path whose variables are set (${name} is not set)")
        return env[name]

    try:
        path = Path(_VAR.sub(substitute, text)).expanduser()
    except RuntimeError as exc:  # "~someone" where someone has no home directory
        raise _Invalid(f"a path whose '~' can be expanded ({exc})") from None
    if len(str(path)) > MAX_PATH_CHARS:
        raise _Invalid(f"a path of at most {MAX_PATH_CHARS} characters once expanded")
    if root is not None and not path.is_absolute():
        path = root / path
    return path


StrictBool = Annotated[bool, BeforeValidator(_validate_strict_bool)]
"""A bool that accepts only what :func:`parse_strict_bool` accepts."""

_Int = Annotated[int, BeforeValidator(_reject_bool_or_float)]
_Float = Annotated[float, BeforeValidator(_reject_bool)]
_Text = Annotated[str, AfterValidator(_non_blank)]
_ConfigPath = Annotated[Path, BeforeValidator(_non_empty_path), AfterValidator(_resolve_path)]


# --------------------------------------------------------------------------- models


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


class _Section(BaseModel):
    """Base of every config model: frozen, unknown keys forbidden, defaults validated.

    A missing sub-section is filled with ``{}`` before validation so that its defaults go
    through the same validators (path resolution in particular) as explicit values.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        validate_default=True,
        allow_inf_nan=False,
        defer_build=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_sections(cls, data: Any) -> Any:
        if isinstance(data, dict):
            missing: dict[str, dict[str, Any]] = {
                name: {}
                for name, field in cls.model_fields.items()
                if name not in data and _is_model(field.annotation)
            }
            if missing:
                data = {**data, **missing}
        return data
