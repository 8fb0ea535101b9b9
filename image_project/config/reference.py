"""The configuration reference, read from the models: one :class:`KeyDoc` per key of
:class:`~image_project.config.models.AppConfig`.

Each row holds the dotted key, what it allows (the words a configuration error uses for it:
the field's own validator's message where it has one, else the type and bounds, as
:mod:`image_project.config.loading` derives them), its default as YAML writes it, and what
it does (the field's ``description``, else the docstring written under the field in its
model). ``scripts/reference.py`` renders the rows into the generated blocks of docs/, and
``tests/test_reference.py`` fails when a block differs or a key has no description.

Sub-sections are walked into (``prompt.scoring.novelty.window``); a list of sections is
shown by its item's keys (``prompt.scoring.judges[i].id``); a mapping of named sections
(``backends``) is one row, since each entry has the keys of ``backend``.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from image_project.config.fields import _Invalid
from image_project.config.loading import _describe, _section_model
from image_project.config.models import _INTERNAL_FIELDS, AppConfig


@dataclass(frozen=True)
class KeyDoc:
    """One key of the configuration: ``allowed`` in the words of its error message,
    ``default`` as YAML (``required`` for a key without one)."""

    key: str
    allowed: str
    default: str
    description: str


@cache
def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the string literal written right under it in ``model``'s class body
    (an attribute docstring), cleaned and joined into one line, its RST ````code```` spans
    written as Markdown's `` `code` ``."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    out: dict[str, str] = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            text = " ".join(inspect.cleandoc(after.value.value).split())
            out[node.target.id] = re.sub(r"``([^`]+)``", r"`\1`", text)
    return out


def _description(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    if field.description:
        return " ".join(field.description.split())
    for cls in model.__mro__:
        if isinstance(cls, type) and issubclass(cls, BaseModel) and name in cls.__annotations__:
            return field_docstrings(cls).get(name, "")
    return ""


def _validators(annotation: Any, metadata: list[Any]) -> Iterator[Any]:
    """The validator functions of a field: those in its metadata, then those inside its
    annotation (``X | None`` of an ``Annotated`` type keeps them there)."""
    for item in metadata:
        func = getattr(item, "func", None)
        if callable(func):
            yield func
    if get_origin(annotation) is Annotated:
        _, *extra = get_args(annotation)
        yield from _validators(get_args(annotation)[0], extra)
    elif get_origin(annotation) in (Union, types.UnionType):
        for arg in get_args(annotation):
            yield from _validators(arg, [])


_PROBES: tuple[object, ...] = ("", 1, object())
_NO_CONTEXT = types.SimpleNamespace(context=None)
"""What a validator taking pydantic's ``ValidationInfo`` is probed with: no root, no env."""


def _validator_must(field: FieldInfo) -> str | None:
    """What the field's own validator says a value must be: the ``must`` of the
    :class:`~image_project.config.fields._Invalid` it raises for a value no key accepts
    (an empty string, ``1``, a bare object), the same text a configuration error shows."""
    for func in _validators(field.annotation, list(field.metadata)):
        takes_info = len(inspect.signature(func).parameters) > 1
        for probe in _PROBES:
            try:
                func(probe, _NO_CONTEXT) if takes_info else func(probe)
            except _Invalid as exc:
                if exc.must:
                    return exc.must
            except Exception:  # a probe of the wrong type: try the next one
                continue
    return None


def _nullable(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation)


def _allowed(field: FieldInfo, is_item: bool) -> str:
    must = _validator_must(field)
    if must is None:
        return _describe(field, is_item)
    if _nullable(field.annotation) and "null" not in must:
        return f"{must} or null"
    return must


def _yaml(value: Any) -> str:
    """A default as the YAML of ``config/config.yaml`` writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (Path, date)):
        return str(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, BaseModel):
        return _yaml(value.model_dump())
    return json.dumps(value)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return _yaml(field.default_factory())  # type: ignore[call-arg]
    if field.default is PydanticUndefined:
        return "required"
    return _yaml(field.default)


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """The section of a list-of-sections field (``tuple[JudgeConfig, ...] | None``)."""
    for arg in (annotation, *get_args(annotation)):
        if get_origin(arg) in (tuple, list):
            return _section_model(arg)
    return None


def _rows(model: type[BaseModel], prefix: str) -> Iterator[KeyDoc]:
    for name, field in model.model_fields.items():
        if name in _INTERNAL_FIELDS:
            continue
        key = f"{prefix}{name}"
        annotation = field.annotation
        section = _section_model(annotation)
        description = _description(model, name, field)
        if get_origin(annotation) is dict and section is not None:
            yield KeyDoc(
                key,
                f"a mapping of names to sections, each with every key of `{section.__name__}`",
                _default(field),
                description,
            )
            continue
        item = _item_model(annotation)
        if item is not None:
            yield KeyDoc(key, _allowed(field, False), _default(field), description)
            yield from _rows(item, f"{key}[i].")
            continue
        if (
            section is not None
            and not _nullable(annotation)
            and section.__module__.startswith("image_project.config")
            and field.default_factory is not None
        ):
            yield from _rows(section, f"{key}.")
            continue
        yield KeyDoc(key, _allowed(field, False), _default(field), description)


def config_reference(prefix: str = "") -> tuple[KeyDoc, ...]:
    """Every key of the configuration, in the order of the models (the order of
    ``config/config.yaml``); with ``prefix``, the keys under that dotted key only."""
    rows = tuple(_rows(AppConfig, ""))
    if not prefix:
        return rows
    return tuple(r for r in rows if r.key.startswith(f"{prefix}.") or r.key == prefix)
