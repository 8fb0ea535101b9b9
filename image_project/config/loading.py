"""Loading the configuration: file choice, YAML, local overlay, ``--set``, error translation.

Contract:

* :func:`load_config` reads, in this order of choice: the file ``config_path`` (``--config``),
  else the file ``$IMAGE_PROJECT_CONFIG``, else ``<root>/config/config.yaml`` (``root``: the
  current directory for the console script) deep-merged with ``<root>/config/
  config.local.yaml``, else the built-in defaults shipped in the package
  (:mod:`.defaults`: the same documented config.yaml, its categories and profile files
  shipped beside it; the local overlay still applies, and the outputs land under
  ``root``). It then applies ``--set`` overrides and validates once against
  :class:`~image_project.config.models.AppConfig`, and refuses a key that would do nothing
  because another key is off (:mod:`.dependencies`).
  Every mistake becomes ONE :class:`ConfigError` whose ``key`` is the full dotted path (list
  items as ``judges[1].id``) and whose message quotes the bad value and says what is allowed.
  No pydantic ``ValidationError`` escapes.
* Unknown keys are errors, with the nearest valid key at that level suggested.
* Keys must be strings; a file that is not UTF-8, not YAML, nested too deeply or holding an
  unreadable value is a :class:`ConfigError` as well.
* A judge at a non-zero temperature is warned about loudly at load time (logger
  ``image_project.config``). The judges' models depend on the backend a run picks, so the
  run logs the ensemble when it starts.
"""

from __future__ import annotations

import copy
import difflib
import logging
import os
import re
import types
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from image_project.config.defaults import BUILTIN_CONFIG, BUILTIN_INPUTS
from image_project.config.dependencies import check_dependencies
from image_project.config.fields import _BOOL_ALLOWED, _Invalid, _KeyedInvalid
from image_project.config.models import _INTERNAL_FIELDS, AppConfig
from image_project.errors import ConfigError, preview, short_repr

# The name the single-module config used, kept so log lines and logging setups stay the same.
logger = logging.getLogger("image_project.config")

CONFIG_ENV_VAR = "IMAGE_PROJECT_CONFIG"
"""Environment variable naming the one config file to use instead of the defaults."""

DEFAULT_CONFIG = Path("config") / "config.yaml"
LOCAL_CONFIG = Path("config") / "config.local.yaml"

MAX_NESTING = 32
"""Deepest nesting of mappings and lists in a config value, and most parts of a ``--set``
key (the schema needs 5)."""


# --------------------------------------------------------------------------- YAML + merging


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that rejects duplicate mapping keys instead of keeping the last,
    and reads only true/false/yes/no (in YAML's spellings) as booleans: YAML 1.1 also reads
    ``on`` / ``off`` as booleans, which the strict-bool rule does not accept, so they stay
    strings here and a bool key then rejects them (a string key keeps them as text)."""


_BOOL_TAG = "tag:yaml.org,2002:bool"
_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    _BOOL_TAG,
    re.compile(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE)$"),
    list("yYnNtTfF"),
)


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


def _yaml_problem(exc: yaml.YAMLError, path: str | None = None) -> str:
    """A YAML error on one line: ``PATH:LINE:COLUMN: invalid YAML: what`` (1-based, where
    the parser stopped; PyYAML's own message spans several lines with source excerpts),
    with what it was doing and where that began in brackets. Without ``path`` (a ``--set``
    value): ``line L, column C: what``."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        what = " ".join(str(exc).split())
        return f"{path}: invalid YAML: {what}" if path is not None else what
    mark = exc.problem_mark or exc.context_mark
    what = " ".join((exc.problem or exc.context or "cannot be parsed").split())
    if exc.context and exc.problem:
        context = " ".join(exc.context.split())
        started = exc.context_mark
        if started is not None and started is not mark:
            context += f" started at line {started.line + 1}, column {started.column + 1}"
        what += f" ({context})"
    if mark is None:
        return f"{path}: invalid YAML: {what}" if path is not None else what
    if path is None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}"
    return f"{path}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {what}"


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
        raise ConfigError("", _yaml_problem(exc, str(path))) from exc
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
        raise ConfigError(
            "", f"--set {short_repr(item)}: expected dotted.key=value, like run.runs=3"
        )
    if len(parts) > MAX_NESTING:
        raise ConfigError(
            preview(key, 200), f"a key path of at most {MAX_NESTING} parts, got {len(parts)}"
        )
    parts = [part.strip() for part in parts]
    try:
        value = _parse_yaml(raw_value)
    except yaml.YAMLError as exc:
        shown, problem = short_repr(raw_value), preview(_yaml_problem(exc), 300)
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
    is_item = named = False
    for part in loc:
        if isinstance(part, int) or named:  # a list index, or a name in ``backends:``
            is_item, named = True, False
            continue
        is_item = False
        if model is None:
            return None, None, False
        field = model.model_fields.get(part)
        if field is None:
            return None, None, False
        model = _section_model(field.annotation)
        named = get_origin(field.annotation) is dict
    return model, field, is_item


def _dotted(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _bounds(metadata: Sequence[Any]) -> tuple[Any, str, Any, str]:
    """``(low, its operator, high, its operator)`` from a field's annotated-types bounds."""
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
    return lo, lo_op, hi, hi_op


def _describe_bounds(metadata: Sequence[Any], number: str) -> str:
    lo, lo_op, hi, hi_op = _bounds(metadata)
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


_PLAIN_KINDS: dict[Any, str] = {bool: _BOOL_ALLOWED, str: "a string", Path: "a path"}


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
    text = _describe_kind(annotation, field, model)
    return f"{text} or null" if nullable and not text.endswith("or null") else text


def _describe_kind(annotation: Any, field: FieldInfo, model: type[BaseModel] | None) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(choice) for choice in get_args(annotation))
    if annotation in (int, float):
        return _describe_bounds(field.metadata, "an int" if annotation is int else "a number")
    if annotation in _PLAIN_KINDS:
        return _PLAIN_KINDS[annotation]
    if model is not None and _is_item_container(annotation):
        return f"a list of mappings with keys {', '.join(sorted(model.model_fields))}"
    return "a mapping" if model is not None else "a valid value"


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

    shown = _show(value.isoformat() if isinstance(value, date) else value)
    if isinstance(cause, _Invalid):
        if cause.redact:
            shown = cause.shown or "a value that is not an environment variable name"
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
    default = root / DEFAULT_CONFIG
    if not default.exists():
        default = BUILTIN_CONFIG
    return [(default, True, "the default config"), (root / LOCAL_CONFIG, False, "")]


def _not_a_file(path: Path, origin: str) -> str:
    if path.is_dir():
        inside = path / DEFAULT_CONFIG.name
        hint = f", like {inside}" if inside.is_file() else ""
        return f"config path {path} is a directory ({origin}); name the YAML file itself{hint}"
    return f"config file not found: {path} ({origin})"


def load_config(
    *,
    root: Path,
    config_path: Path | None = None,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    base: Mapping[str, Any] | None = None,
) -> AppConfig:
    """Read, merge, override and validate the configuration; see the module docstring.

    ``base``: a configuration already read and validated elsewhere (a campaign's, as its
    queue carries it: :mod:`image_project.campaign`), used instead of the files; the
    ``overrides`` still apply on top (a worker's own ``backend.base_url``, say).

    ``root`` anchors relative paths and the default files; ``env`` (default ``os.environ``)
    supplies ``IMAGE_PROJECT_CONFIG`` and ``$VAR`` expansion in paths. Raises
    :class:`ConfigError` for every problem, before anything else runs.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    root = Path(root).expanduser().resolve()
    data: dict[str, Any] = {}
    sources: list[str] = []
    files = [] if base is not None else _config_files(root, config_path, environ)
    if base is not None:
        data = copy.deepcopy(dict(base))
        sources.append("the campaign's configuration")
    for path, required, origin in files:
        if not path.is_file():
            if required:
                raise ConfigError("", _not_a_file(path, origin))
            continue
        data = deep_merge(data, _read_yaml(path))
        if path == BUILTIN_CONFIG:  # its input files are shipped beside it
            shipped = {key: str(file) for key, file in BUILTIN_INPUTS.items()}
            data = deep_merge(data, {"prompt": shipped})
        sources.append(str(path))
    from_files = data if base is None else {}
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
    overridden = [".".join(p.strip() for p in o.partition("=")[0].split(".")) for o in overrides]
    check_dependencies(config, from_files, overridden)
    config = config.model_copy(update={"sources": tuple(sources)})
    _log_scoring(config)
    return config


def _log_scoring(config: AppConfig) -> None:
    """The loud load-time warning for judges at a non-zero temperature. (Which models the
    judges use depends on the backend the run picks, so the app logs the ensemble when the
    run starts.)"""
    scoring = config.prompt.scoring
    warm = [(judge_id, t) for judge_id, t in scoring.judge_temperatures() if t != 0]
    if warm:
        logger.warning(
            "NON-ZERO JUDGE TEMPERATURE: %s; judge scores will vary between identical runs, "
            "so selections are not reproducible%s",
            ", ".join(f"judge {judge_id!r} at {t:g}" for judge_id, t in warm),
            "" if scoring.enabled else " (scoring is disabled, so no judge runs now)",
        )
