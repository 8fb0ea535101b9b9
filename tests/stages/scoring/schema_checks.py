"""Checks shared by the scoring tests: a generated answer schema is in OpenAI's strict subset,
and its list bounds agree with the pydantic model that validates the answer."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import annotated_types
from pydantic import BaseModel

from image_project.backends.base import STRICT_KEYWORDS


def schema_nodes(node: Mapping[str, Any], where: str = "$") -> Iterator[tuple[str, Any]]:
    """Every schema node under ``node`` (itself included), with a readable location."""
    yield where, node
    for name, sub in node.get("properties", {}).items():
        yield from schema_nodes(sub, f"{where}.{name}")
    if "items" in node:
        yield from schema_nodes(node["items"], f"{where}[]")


def assert_strict(schema: Mapping[str, Any]) -> None:
    """Every object lists all its properties as required and forbids others; only strict
    keywords are used anywhere."""
    objects = 0
    for where, node in schema_nodes(schema):
        unknown = set(node) - STRICT_KEYWORDS
        assert not unknown, f"{where}: keywords outside the strict subset: {sorted(unknown)}"
        if node.get("type") == "object":
            objects += 1
            assert node["required"] == list(node["properties"]), where
            assert node["additionalProperties"] is False, where
    assert objects >= 1


def array_bounds(node: Mapping[str, Any]) -> tuple[int, int]:
    """``(minItems, maxItems)`` of an array schema node."""
    assert node["type"] == "array"
    return node["minItems"], node["maxItems"]


def field_length_bounds(model: type[BaseModel], field: str) -> tuple[int, int]:
    """The ``min_length`` / ``max_length`` a model declares for a list field."""
    metadata = model.model_fields[field].metadata
    low = next(m.min_length for m in metadata if isinstance(m, annotated_types.MinLen))
    high = next(m.max_length for m in metadata if isinstance(m, annotated_types.MaxLen))
    return low, high
