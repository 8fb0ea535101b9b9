"""Strict configuration: pydantic models, YAML loading, ``--set`` overrides.

Contract:

* Every key has a default; ``config/config.yaml`` documents them all.
* :func:`load_config` reads one file (``config_path`` or ``$IMAGE_PROJECT_CONFIG``) or
  ``config/config.yaml`` deep-merged with ``config/config.local.yaml``, applies ``--set``
  overrides, and validates once. Every mistake becomes ONE :class:`ConfigError` whose ``key``
  is the full dotted path (list items as ``judges[1].id``) and whose message quotes the bad
  value and says what is allowed. No pydantic ``ValidationError`` escapes.
* Unknown keys are errors, with the nearest valid key at that level suggested.
* Booleans are strict (:func:`parse_strict_bool`): ``"false"`` is false, ``"maybe"`` is an
  error. Numbers never accept booleans.
* Relative paths resolve against ``root`` after ``~`` and ``$VAR`` expansion. Existence is
  not checked here: files are the business of the code that opens them.
* Every number and string is bounded (counts, seconds, the seed, image sides, name and path
  lengths), so an absurd value fails here, naming the key and the allowed range, instead of
  at run time after model calls. Keys must be strings; a file that is not UTF-8, not YAML,
  nested too deeply or holding an unreadable value is a :class:`ConfigError` as well.
"""

from __future__ import annotations

import copy
import difflib
import logging
import os
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.fields import FieldInfo

from image_project.errors import ConfigError, preview, short_repr

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_CONFIG",
    "IMAGE_SIDE_MAX",
    "IMAGE_SIDE_MIN",
    "LOCAL_CONFIG",
    "MAX_JUDGES",
    "MAX_NAME_CHARS",
    "MAX_NESTING",
    "MAX_PATH_CHARS",
    "MAX_RUN_SEED",
    "MAX_URL_CHARS",
    "AppConfig",
    "BackendConfig",
    "EffectiveJudge",
    "ImageConfig",
    "JudgeConfig",
    "NoveltyConfig",
    "PromptConfig",
    "RunConfig",
    "ScoringConfig",
    "StrictBool",
    "deep_merge",
    "load_config",
    "parse_strict_bool",
]

logger = logging.getLogger(__name__)

CONFIG_ENV_VAR = "IMAGE_PROJECT_CONFIG"
"""Environment variable naming the one config file to use instead of the defaults."""

DEFAULT_CONFIG = Path("config") / "config.yaml"
LOCAL_CONFIG = Path("config") / "config.local.yaml"

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
MAX_NESTING = 32
"""Deepest nesting of mappings and lists in a config value, and most parts of a ``--set``
key (the schema needs 5)."""


# --------------------------------------------------------------------------- validators


class _Invalid(ValueError):
    """Raised by our field validators; the error translator turns it into a message.

    ``must`` replaces the allowed-values text derived from the field; ``note`` is appended;
    ``redact`` hides the input (for keys where a user may paste a secret).
    """

    def __init__(self, must: str | None = None, *, note: str = "", redact: bool = False):
        super().__init__(must or note or "invalid value")
        self.must = must
        self.note = note
        self.redact = redact


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


def _reject_bool(value: object) -> object:
    if isinstance(value, bool):
        raise _Invalid(note="a boolean is not a number")
    return value


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

_Int = Annotated[int, BeforeValidator(_reject_bool)]
_Float = Annotated[float, BeforeValidator(_reject_bool)]
_Text = Annotated[str, AfterValidator(_non_blank)]
_ConfigPath = Annotated[Path, BeforeValidator(_non_empty_path), AfterValidator(_resolve_path)]


# --------------------------------------------------------------------------- models


class _Section(BaseModel):
    """Base of every config model: frozen, unknown keys forbidden, defaults validated.

    A missing sub-section is filled with ``{}`` before validation so that its defaults go
    through the same validators (path resolution in particular) as explicit values.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_default=True, allow_inf_nan=False
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


class BackendConfig(_Section):
    """Which model service to talk to and how hard to try."""

    provider: Literal["auto", "openai", "offline"] = "auto"
    base_url: Annotated[str | None, AfterValidator(_check_base_url)] = None
    api_key_env: Annotated[_Text, AfterValidator(_check_env_name)] = "OPENAI_API_KEY"
    text_model: _Text = "gpt-4.1-mini"
    max_concurrency: _Int = Field(default=8, ge=1, le=256)
    timeout_s: _Float = Field(default=120.0, gt=0.0, le=3600.0)
    max_attempts: _Int = Field(default=4, ge=1, le=20)
    backoff_initial_s: _Float = Field(default=1.0, ge=0.0, le=300.0)
    backoff_max_s: _Float = Field(default=30.0, ge=0.0, le=3600.0)
    structured_outputs: StrictBool = True

    @model_validator(mode="after")
    def _check_backoff(self) -> Self:
        if self.backoff_max_s < self.backoff_initial_s:
            raise _KeyedInvalid(
                "backoff_max_s",
                f"got {_show(self.backoff_max_s)}, must be >= backoff_initial_s "
                f"({_show(self.backoff_initial_s)})",
            )
        return self

    def effective_provider(self, env: Mapping[str, str]) -> Literal["openai", "offline"]:
        """``auto`` means openai when ``env[api_key_env]`` is set and non-empty or ``base_url``
        points at a server (local OpenAI-compatible servers need no key), else offline."""
        if self.provider != "auto":
            return self.provider
        return "openai" if env.get(self.api_key_env, "").strip() or self.base_url else "offline"


class RunConfig(_Section):
    mode: Literal["full", "prompt_only"] = "full"
    concurrency: Literal["concurrent", "sequential"] = "concurrent"
    runs: _Int = Field(default=1, ge=1, le=1000)


class NoveltyConfig(_Section):
    enabled: StrictBool = True
    window: _Int = Field(default=25, ge=0, le=10000)


class JudgeConfig(_Section):
    """One judge of the ensemble; ``None`` fields fall back to the scoring defaults."""

    id: Annotated[str, AfterValidator(_check_judge_id)]
    model: _Text | None = None
    temperature: _Float | None = Field(default=None, ge=0.0, le=2.0)


MAX_JUDGES = 16


def _check_judge_count(value: object) -> object:
    if isinstance(value, (list, tuple)) and not 1 <= len(value) <= MAX_JUDGES:
        raise _Invalid(
            f"a list of 1..{MAX_JUDGES} judges, or null for one judge built from the defaults"
        )
    return value


@dataclass(frozen=True)
class EffectiveJudge:
    """A judge with every fallback applied: what the scoring stage actually runs."""

    id: str
    model: str
    temperature: float


class ScoringConfig(_Section):
    """Black-box scoring (SPEC "Black-box scoring")."""

    enabled: StrictBool = False
    num_ideas: _Int = Field(default=6, ge=2, le=52)
    exploration_rate: _Float = Field(default=0.15, ge=0.0, le=0.5)
    judge_temperature: _Float = Field(default=0.0, ge=0.0, le=2.0)
    judge_model: _Text | None = None
    generator_temperature: _Float = Field(default=0.9, ge=0.0, le=2.0)
    generator_profile_abstraction: StrictBool = True
    max_reasks: _Int = Field(default=1, ge=0, le=5)
    judges: Annotated[tuple[JudgeConfig, ...] | None, BeforeValidator(_check_judge_count)] = None
    min_ok_judges: _Int | None = Field(default=None, ge=1, le=MAX_JUDGES)
    novelty: NoveltyConfig = Field(default_factory=NoveltyConfig)

    @model_validator(mode="after")
    def _check_judges(self) -> Self:
        seen: dict[str, int] = {}
        for index, judge in enumerate(self.judges or ()):
            if judge.id in seen:
                raise _KeyedInvalid(
                    f"judges[{index}].id",
                    f"got {judge.id!r}, must be unique (judges[{seen[judge.id]}] has it too)",
                )
            seen[judge.id] = index
        count = self.judge_count
        if self.min_ok_judges is not None and self.min_ok_judges > count:
            raise _KeyedInvalid(
                "min_ok_judges",
                f"got {self.min_ok_judges}, must be an int in 1..{count} "
                f"(the number of judges) or null",
            )
        return self

    @property
    def judge_count(self) -> int:
        """How many judges run: ``len(judges)``, or 1 when ``judges`` is omitted."""
        return len(self.judges) if self.judges is not None else 1

    @property
    def effective_min_ok_judges(self) -> int:
        """``min_ok_judges``, or a majority of the ensemble (``len // 2 + 1``) when null."""
        if self.min_ok_judges is not None:
            return self.min_ok_judges
        return self.judge_count // 2 + 1

    def effective_judges(self, text_model: str) -> tuple[EffectiveJudge, ...]:
        """Each judge's model (own, else ``judge_model``, else ``text_model``) and temperature.

        With ``judges`` omitted, one judge ``"judge"`` built from the defaults.
        """
        default_model = self.judge_model or text_model
        if self.judges is None:
            return (EffectiveJudge("judge", default_model, self.judge_temperature),)
        return tuple(
            EffectiveJudge(
                judge.id,
                judge.model or default_model,
                judge.temperature if judge.temperature is not None else self.judge_temperature,
            )
            for judge in self.judges
        )


class PromptConfig(_Section):
    categories_path: _ConfigPath = Path("config/categories.csv")
    profile_path: _ConfigPath = Path("config/profile.csv")
    generations_path: _ConfigPath = Path("output/generations.csv")
    titles_manifest_path: _ConfigPath | None = None
    random_seed: _Int | None = Field(default=None, ge=0, le=MAX_RUN_SEED)
    refinement: Literal["final", "per_stage", "none"] = "final"
    text_temperature: _Float = Field(default=0.8, ge=0.0, le=2.0)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)


class ImageConfig(_Section):
    generation_path: _ConfigPath = Path("output/images")
    log_path: _ConfigPath = Path("output/logs")
    model: _Text = "gpt-image-2.6-sunburst"
    size: Annotated[str, AfterValidator(_check_size)] = "1536x1024"
    quality: Literal["low", "medium", "high", "xhigh", "max", "auto"] = "high"
    caption_font_path: _ConfigPath | None = None


class AppConfig(_Section):
    """The whole validated configuration. ``sources``: the files read, in merge order."""

    backend: BackendConfig = Field(default_factory=BackendConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    image: ImageConfig = Field(default_factory=ImageConfig)
    sources: tuple[str, ...] = Field(default=(), exclude=True)

    @property
    def effective_titles_manifest_path(self) -> Path:
        """``prompt.titles_manifest_path``, or ``<image.generation_path>/titles_manifest.csv``."""
        if self.prompt.titles_manifest_path is not None:
            return self.prompt.titles_manifest_path
        return self.image.generation_path / "titles_manifest.csv"

    @property
    def effective_judges(self) -> tuple[EffectiveJudge, ...]:
        return self.prompt.scoring.effective_judges(self.backend.text_model)


_INTERNAL_FIELDS = frozenset({"sources"})


# --------------------------------------------------------------------------- YAML + merging


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects duplicate mapping keys instead of keeping the last."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(text: str) -> Any:
    """``text`` as YAML; every failure is a ``yaml.YAMLError``.

    PyYAML lets a few failures of its value constructors escape as other types: an impossible
    date (``2001-13-01``), a decimal int beyond Python's str-conversion digit limit, and
    nesting deeper than the recursion limit. Aliases can also build values that contain
    themselves (``&a [*a]``) or nest deeply without deep text; both are rejected here, so
    that later steps may recurse over the value.
    """
    try:
        value = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError:
        raise
    except RecursionError:
        raise yaml.YAMLError("the document is nested too deeply") from None
    except (ValueError, OverflowError) as exc:
        raise yaml.YAMLError(f"a value cannot be read: {exc}") from exc
    _check_shape(value)
    return value


def _check_shape(value: object) -> None:
    """Reject a cycle or nesting deeper than :data:`MAX_NESTING`, without recursion; each
    container shared through aliases is visited once."""
    on_path: set[int] = set()
    done: set[int] = set()
    stack: list[tuple[object, int, bool]] = [(value, 1, False)]
    while stack:
        node, depth, leaving = stack.pop()
        if leaving:
            on_path.discard(id(node))
            done.add(id(node))
            continue
        if not isinstance(node, dict | list):
            continue
        if id(node) in on_path:
            raise yaml.YAMLError("a value contains itself (an alias inside its own anchor)")
        if id(node) in done:
            continue
        if depth > MAX_NESTING:
            raise yaml.YAMLError(f"values are nested more than {MAX_NESTING} levels deep")
        on_path.add(id(node))
        stack.append((node, depth, True))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1, False) for child in children)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"config file {path} is not UTF-8 text: {exc}") from exc
    try:
        data = _parse_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError("", f"invalid YAML in config file {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            "",
            f"config file {path} must hold a mapping of keys at the top level, "
            f"got {type(data).__name__}",
        )
    return data


def deep_merge(
    base: Mapping[str, Any], overlay: Mapping[str, Any], *, prefix: str = ""
) -> dict[str, Any]:
    """``overlay`` on top of ``base``, neither modified.

    Mappings merge recursively; lists and scalars replace; an explicit ``None`` in the overlay
    sets ``None``. A mapping meeting a non-mapping (other than ``None``) is a
    :class:`ConfigError` naming the dotted key.
    """
    merged: dict[str, Any] = dict(base)
    for raw_key, value in overlay.items():
        key = str(raw_key)
        dotted = f"{prefix}.{key}" if prefix else key
        old = merged.get(raw_key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            merged[raw_key] = deep_merge(old, value, prefix=dotted)
        elif (
            old is not None
            and value is not None
            and isinstance(old, Mapping) != isinstance(value, Mapping)
        ):
            raise ConfigError(
                dotted,
                f"cannot merge {_kind(value)} {_show(value)} onto {_kind(old)} {_show(old)}; "
                "both files must use the same shape for this key",
            )
        else:
            merged[raw_key] = copy.deepcopy(value)
    return merged


def _apply_override(data: dict[str, Any], item: str) -> dict[str, Any]:
    """A copy of ``data`` with one ``dotted.key=value`` applied (value parsed as YAML)."""
    raw_key, sep, raw_value = item.partition("=")
    key = raw_key.strip()
    parts = key.split(".")
    if not sep or not key or any(not part.strip() for part in parts):
        raise ConfigError("", f"--set {short_repr(item)}: expected dotted.key=value, like runs=3")
    if len(parts) > MAX_NESTING:
        raise ConfigError(
            preview(key, 200), f"a key path of at most {MAX_NESTING} parts, got {len(parts)}"
        )
    parts = [part.strip() for part in parts]
    try:
        value = _parse_yaml(raw_value)
    except yaml.YAMLError as exc:
        shown, problem = short_repr(raw_value), preview(str(exc), 300)
        raise ConfigError(key, f"--set value {shown} is not valid YAML: {problem}") from exc
    node: Any = data
    for depth, part in enumerate(parts[:-1]):
        node = node.get(part)
        if node is None:
            break
        if not isinstance(node, Mapping):
            parent = ".".join(parts[: depth + 1])
            raise ConfigError(
                key,
                f"cannot set a key below {parent!r}, which is {_kind(node)} {_show(node)}, "
                "not a mapping",
            )
    old = _get_path(data, parts)
    if isinstance(old, Mapping) and isinstance(value, Mapping):
        return _set_path(data, parts, deep_merge(old, value, prefix=key))
    return _set_path(data, parts, value)


def _get_path(data: Mapping[str, Any], parts: Sequence[str]) -> Any:
    node: Any = data
    for part in parts:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _set_path(data: Mapping[str, Any], parts: Sequence[str], value: Any) -> dict[str, Any]:
    """A copy of ``data`` with ``value`` at ``parts``, creating mappings on the way."""
    result = dict(data)
    if len(parts) == 1:
        result[parts[0]] = copy.deepcopy(value)
        return result
    child = data.get(parts[0])
    result[parts[0]] = _set_path(child if isinstance(child, Mapping) else {}, parts[1:], value)
    return result


# --------------------------------------------------------------------------- error translation


_show = short_repr


def _check_keys(value: object, key: str = "", seen: set[int] | None = None) -> None:
    """Raise :class:`ConfigError` for the first mapping key that is not a string (YAML turns
    ``1:``, ``null:`` or ``2001-01-01:`` into an int, None or date). Containers shared
    through YAML aliases are checked once."""
    seen = set() if seen is None else seen
    if not isinstance(value, Mapping | list) or id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, Mapping):
        for raw_key, child in value.items():
            if not isinstance(raw_key, str):
                where = f"{key}.{raw_key}" if key else str(raw_key)
                raise ConfigError(
                    preview(where, 200),
                    f"got the key {_show(raw_key)} ({type(raw_key).__name__}), keys must be "
                    "strings; quote it if it is meant as a name",
                )
            _check_keys(child, f"{key}.{raw_key}" if key else raw_key, seen)
    else:
        for index, child in enumerate(value):
            _check_keys(child, f"{key}[{index}]", seen)


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return "a scalar"


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The config model inside ``annotation`` (``X``, ``X | None``, ``tuple[X, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _section_model(arg)
        if found is not None:
            return found
    return None


def _is_item_container(annotation: Any) -> bool:
    return any(get_origin(arg) in (tuple, list) for arg in (annotation, *get_args(annotation)))


def _walk(loc: Sequence[str | int]) -> tuple[type[BaseModel] | None, FieldInfo | None, bool]:
    """Follow ``loc`` from :class:`AppConfig`: the model at the end, the last field, and
    whether the location is an item of a list field (the loc ends with an index)."""
    model: type[BaseModel] | None = AppConfig
    field: FieldInfo | None = None
    is_item = False
    for part in loc:
        if isinstance(part, int):
            is_item = True
            continue
        is_item = False
        if model is None:
            return None, None, False
        field = model.model_fields.get(part)
        if field is None:
            return None, None, False
        model = _section_model(field.annotation)
    return model, field, is_item


def _dotted(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _describe_bounds(metadata: Sequence[Any], number: str) -> str:
    lo: Any = None
    hi: Any = None
    lo_op, hi_op = ">=", "<="
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            lo = item.ge
        elif isinstance(item, annotated_types.Gt):
            lo, lo_op = item.gt, ">"
        elif isinstance(item, annotated_types.Le):
            hi = item.le
        elif isinstance(item, annotated_types.Lt):
            hi, hi_op = item.lt, "<"
    fmt = "{:g}".format
    if lo is not None and hi is not None:
        if lo_op == ">=" and hi_op == "<=":
            if number == "an int":
                return f"{number} in {lo}..{hi}"
            return f"{number} in [{fmt(lo)}, {fmt(hi)}]"
        return f"{number} {lo_op} {fmt(lo)} and {hi_op} {fmt(hi)}"
    if lo is not None:
        return f"{number} {lo_op} {fmt(lo)}"
    if hi is not None:
        return f"{number} {hi_op} {fmt(hi)}"
    return number


def _describe(field: FieldInfo, is_item: bool) -> str:
    """What a field allows, in words, derived from its annotation and constraints."""
    annotation: Any = field.annotation
    nullable = False
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        nullable = len(args) < len(get_args(annotation))
        annotation = args[0] if len(args) == 1 else annotation
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    model = _section_model(annotation)
    if is_item and model is not None:
        return f"a mapping with keys {', '.join(sorted(model.model_fields))}"
    if get_origin(annotation) is Literal:
        text = "one of " + ", ".join(repr(choice) for choice in get_args(annotation))
    elif annotation is bool:
        text = _BOOL_ALLOWED
    elif annotation is int:
        text = _describe_bounds(field.metadata, "an int")
    elif annotation is float:
        text = _describe_bounds(field.metadata, "a number")
    elif annotation is str:
        text = "a string"
    elif annotation is Path:
        text = "a path"
    elif model is not None and _is_item_container(annotation):
        text = f"a list of mappings with keys {', '.join(sorted(model.model_fields))}"
    elif model is not None:
        text = "a mapping"
    else:
        text = "a valid value"
    return f"{text} or null" if nullable and not text.endswith("or null") else text


def _translate_one(error: Mapping[str, Any]) -> tuple[str, str]:
    loc: tuple[str | int, ...] = tuple(error.get("loc", ()))
    kind: str = error["type"]
    value = error.get("input")
    cause = (error.get("ctx") or {}).get("error")

    if isinstance(cause, _KeyedInvalid):
        key = _dotted(loc)
        key = f"{key}.{cause.subkey}" if key else cause.subkey
        return key, cause.message

    key = _dotted(loc)
    if kind == "extra_forbidden":
        parent, _, _ = _walk(loc[:-1])
        valid = sorted(
            name for name in (parent.model_fields if parent else ()) if name not in _INTERNAL_FIELDS
        )
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
        if close:
            return key, f"unknown key; did you mean {close[0]!r}?"
        return key, f"unknown key; valid keys here: {', '.join(valid)}"

    _, field, is_item = _walk(loc)
    allowed = _describe(field, is_item) if field is not None else None
    if kind == "missing":
        return key, "required key is missing" + (f"; must be {allowed}" if allowed else "")

    shown = _show(value)
    if isinstance(cause, _Invalid):
        if cause.redact:
            shown = "a value that is not an environment variable name"
        must = cause.must or allowed or "a valid value"
        note = f" ({cause.note})" if cause.note else ""
        return key, f"got {shown}, must be {must}{note}"
    if allowed is not None:
        return key, f"got {shown}, must be {allowed}"
    return key, f"got {shown}: {error.get('msg', 'invalid value')}"


def _translate(exc: ValidationError) -> ConfigError:
    problems = [_translate_one(error) for error in exc.errors(include_url=False)]
    key, message = problems[0]
    if len(problems) > 1:
        rest = "".join(f"\n  {k or '<top level>'}: {m}" for k, m in problems[1:])
        message = f"{message}\n  ({len(problems) - 1} more problem(s)):{rest}"
    return ConfigError(key, message)


# --------------------------------------------------------------------------- loading


def _config_files(
    root: Path, config_path: Path | None, env: Mapping[str, str]
) -> list[tuple[Path, bool, str]]:
    """``(path, required, where the choice came from)`` triples, in merge order."""
    if config_path is not None:
        return [(Path(config_path).expanduser(), True, "given as the config path")]
    from_env = env.get(CONFIG_ENV_VAR, "").strip()
    if from_env:
        return [(Path(from_env).expanduser(), True, f"named by ${CONFIG_ENV_VAR}")]
    return [(root / DEFAULT_CONFIG, True, "the default config"), (root / LOCAL_CONFIG, False, "")]


def load_config(
    *,
    root: Path,
    config_path: Path | None = None,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> AppConfig:
    """Read, merge, override and validate the configuration; see the module docstring.

    ``root`` anchors relative paths and the default files; ``env`` (default ``os.environ``)
    supplies ``IMAGE_PROJECT_CONFIG`` and ``$VAR`` expansion in paths. Raises
    :class:`ConfigError` for every problem, before anything else runs.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    root = Path(root).expanduser().resolve()
    data: dict[str, Any] = {}
    sources: list[str] = []
    for path, required, origin in _config_files(root, config_path, environ):
        if not path.is_file():
            if required:
                raise ConfigError("", f"config file not found: {path} ({origin})")
            continue
        data = deep_merge(data, _read_yaml(path))
        sources.append(str(path))
    for item in overrides:
        data = _apply_override(data, item)
    _check_keys(data)
    for internal in sorted(_INTERNAL_FIELDS & {str(key) for key in data}):
        valid = ", ".join(n for n in AppConfig.model_fields if n not in _INTERNAL_FIELDS)
        raise ConfigError(internal, f"unknown key; valid keys here: {valid}")
    try:
        config = AppConfig.model_validate(data, context={"root": root, "env": environ})
    except ValidationError as exc:
        raise _translate(exc) from exc
    config = config.model_copy(update={"sources": tuple(sources)})
    _log_scoring(config)
    return config


def _log_scoring(config: AppConfig) -> None:
    scoring = config.prompt.scoring
    judges = config.effective_judges
    if scoring.enabled:
        # A judge without its own model uses backend.text_model, or the offline backend's
        # model when the run falls back to it.
        described = ", ".join(f"{j.id}(model={j.model}, t={j.temperature:g})" for j in judges)
        window = scoring.novelty.window
        novelty = (
            f"on, window={window}"
            if scoring.novelty.enabled and window > 0
            else "off (window 0)"
            if scoring.novelty.enabled
            else "off"
        )
        logger.info(
            "black-box scoring enabled: num_ideas=%d exploration_rate=%g "
            "generator_temperature=%g max_reasks=%d judges=[%s] min_ok_judges=%d novelty=%s",
            scoring.num_ideas,
            scoring.exploration_rate,
            scoring.generator_temperature,
            scoring.max_reasks,
            described,
            scoring.effective_min_ok_judges,
            novelty,
        )
    warm = [j for j in judges if j.temperature != 0]
    if warm:
        logger.warning(
            "NON-ZERO JUDGE TEMPERATURE: %s; judge scores will vary between identical runs, "
            "so selections are not reproducible%s",
            ", ".join(f"judge {j.id!r} at {j.temperature:g}" for j in warm),
            "" if scoring.enabled else " (scoring is disabled, so no judge runs now)",
        )
