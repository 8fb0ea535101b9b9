"""The run transcript: one JSON document per generation, written on success and on failure.

The file is ``<log_dir>/<generation_id>_transcript.json``: UTF-8, ``indent=2``,
``ensure_ascii=False``, a trailing newline, replaced atomically. A failing run must still
leave its transcript, so serialisation never raises on content: values JSON cannot hold are
converted (:func:`to_jsonable`) instead of aborting the write.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
from collections.abc import Mapping, Sequence, Set
from datetime import date, datetime, time
from pathlib import Path, PurePath
from typing import TypeAlias

from image_project.artifacts.atomic import atomic_write_text

__all__ = ["JSONValue", "to_jsonable", "transcript_path", "write_transcript"]

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def _sort_key(value: object) -> str:
    try:
        return repr(value)
    except Exception:
        return type(value).__name__


def to_jsonable(value: object) -> JSONValue:
    """A JSON-safe copy of ``value``; never raises.

    Mappings become objects (non-string keys via ``str()``), sequences and sets arrays (sets
    sorted for stable output), dataclasses and objects with ``model_dump()`` objects,
    dates ISO strings, paths strings, enums their value, non-finite floats strings, bytes a
    size summary, a reference cycle ``"<circular reference>"``, anything else ``str()``.
    """
    return _convert(value, set())


def _convert(value: object, active: set[int]) -> JSONValue:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, enum.Enum):
        return _convert(value.value, active)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if id(value) in active:
        return "<circular reference>"
    active.add(id(value))
    try:
        if isinstance(value, Mapping):
            return {
                k if isinstance(k, str) else _safe_str(k): _convert(v, active)
                for k, v in value.items()
            }
        if isinstance(value, Sequence):
            return [_convert(item, active) for item in value]
        if isinstance(value, Set):
            return [_convert(item, active) for item in sorted(value, key=_sort_key)]
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {
                f.name: _convert(getattr(value, f.name, None), active)
                for f in dataclasses.fields(value)
            }
        model_dump = getattr(value, "model_dump", None)
        if callable(model_dump) and not isinstance(value, type):
            try:
                dumped = model_dump(mode="json")
            except Exception:
                return _safe_str(value)
            return _convert(dumped, active)
        return _safe_str(value)
    except Exception:
        return _safe_str(value)
    finally:
        active.discard(id(value))


def transcript_path(log_dir: str | os.PathLike[str], generation_id: str) -> Path:
    """``<log_dir>/<generation_id>_transcript.json``; the id must be a plain file-name part."""
    if (
        not generation_id.strip()
        or generation_id in {".", ".."}
        or any(sep in generation_id for sep in ("/", "\\", "\0"))
    ):
        raise ValueError(f"generation_id {generation_id!r} cannot be used in a file name")
    return Path(log_dir) / f"{generation_id}_transcript.json"


def write_transcript(path: str | os.PathLike[str], data: Mapping[str, object]) -> Path:
    """Write ``data`` as the transcript at ``path`` atomically (parents created)."""
    text = json.dumps(to_jsonable(data), indent=2, ensure_ascii=False, allow_nan=False)
    return atomic_write_text(path, text + "\n", encoding="utf-8")
