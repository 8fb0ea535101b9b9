"""The generations CSV: one row per run, also the history the novelty penalty reads.

Columns: ``generation_id, selected_concepts, final_image_prompt, image_path, created_at,
seed``. ``selected_concepts`` is a JSON list (``ensure_ascii=False``). Appends take their own
``<path>.lock`` and are a single ``write`` + ``fsync``; reads take no lock.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

from image_project.artifacts.locking import DEFAULT_TIMEOUT_S, FileLock
from image_project.artifacts.manifest import (
    append_csv_row,
    lock_path_for,
    prepare_row,
    read_csv_header,
    read_csv_rows,
)
from image_project.errors import InputFileError

GENERATIONS_FIELDS: tuple[str, ...] = (
    "generation_id",
    "selected_concepts",
    "final_image_prompt",
    "image_path",
    "created_at",
    "seed",
)
GENERATIONS_REQUIRED_FIELDS: tuple[str, ...] = (
    "generation_id",
    "selected_concepts",
    "final_image_prompt",
)

_PathLike = str | os.PathLike[str]


def _concepts_json(path: _PathLike, value: object) -> str:
    if isinstance(value, str):
        parse_selected_concepts(value, path=path)
        return value
    if isinstance(value, Sequence) and all(isinstance(item, str) for item in value):
        return json.dumps(list(value), ensure_ascii=False)
    raise ValueError(
        f"{path}: selected_concepts must be a list of strings (or its JSON), got {value!r}"
    )


def parse_selected_concepts(text: str, *, path: _PathLike = "<generations>") -> list[str]:
    """Decode a ``selected_concepts`` cell; anything but a JSON list of strings is an error."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: selected_concepts is not JSON: {text!r}") from exc
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{path}: selected_concepts is not a JSON list of strings: {text!r}")
    return value


def append_generation_row(
    path: _PathLike,
    row: Mapping[str, object],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, str]:
    """Append one run's record under ``<path>.lock``; returns the row as written.

    ``generation_id``, ``selected_concepts`` (a list of strings, stored as JSON) and
    ``final_image_prompt`` are required; ``image_path`` and ``seed`` default to ``""`` and an
    empty ``created_at`` is filled with the current UTC time. A file whose header differs is
    refused with an error naming it and both headers.
    """
    values = dict(row)
    if "selected_concepts" in values:
        values["selected_concepts"] = _concepts_json(path, values["selected_concepts"])
    out = prepare_row(
        path, GENERATIONS_FIELDS, GENERATIONS_REQUIRED_FIELDS, values, kind="generations"
    )
    with FileLock(lock_path_for(path), timeout_s=timeout_s):
        append_csv_row(path, GENERATIONS_FIELDS, out)
    return out


def read_generations(path: _PathLike) -> list[dict[str, str]]:
    """All rows, oldest first (cells as stored); a missing file gives ``[]``."""
    return read_csv_rows(path)


def read_recent_prompts(path: _PathLike, window: int) -> list[str]:
    """The last ``window`` non-empty ``final_image_prompt`` values, oldest first.

    A missing file raises :class:`FileNotFoundError` (the caller decides whether that is
    the allowed "no history" fallback); a file without a ``final_image_prompt`` column, or
    one that is not UTF-8 CSV, raises :class:`~image_project.errors.InputFileError` naming
    it. An empty file gives ``[]``; so does ``window <= 0``.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"generations history not found: {p}")
    if window <= 0:
        return []
    header = read_csv_header(p)
    if header is None:
        return []
    if "final_image_prompt" not in header:
        raise InputFileError(p, f"no 'final_image_prompt' column (header: {header})")
    recent: deque[str] = deque(maxlen=window)
    for row in read_csv_rows(p):
        prompt = row.get("final_image_prompt", "")
        if prompt.strip():
            recent.append(prompt)
    return list(recent)
