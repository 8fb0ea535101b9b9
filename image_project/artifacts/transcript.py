"""The run transcript: one JSON document per generation, written on success and on failure.

The file is ``<log_dir>/<generation_id>_transcript.json``: the JSON of the run's
:class:`~image_project.record.run.RunRecord` (UTF-8, ``indent=2``, a trailing newline),
replaced atomically. :func:`read_transcript` reads any transcript this version writes back
into the same model. A failing run must still leave its transcript, so writing never fails
on content: a string JSON cannot encode (a lone surrogate from a model answer) is written
with a replacement character instead of aborting the write.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic_core import PydanticSerializationError

from image_project.artifacts.atomic import atomic_write_bytes
from image_project.record.run import RunRecord


def transcript_path(log_dir: str | os.PathLike[str], generation_id: str) -> Path:
    """``<log_dir>/<generation_id>_transcript.json``; the id must be a plain file-name part."""
    if (
        not generation_id.strip()
        or generation_id in {".", ".."}
        or any(sep in generation_id for sep in ("/", "\\", "\0"))
    ):
        raise ValueError(f"generation_id {generation_id!r} cannot be used in a file name")
    return Path(log_dir) / f"{generation_id}_transcript.json"


def write_transcript(path: str | os.PathLike[str], record: RunRecord) -> Path:
    """Write ``record`` as the transcript at ``path`` atomically (parents created)."""
    try:
        data = record.model_dump_json(indent=2).encode("utf-8")
    except PydanticSerializationError:
        text = json.dumps(record.model_dump(mode="json"), indent=2, ensure_ascii=False)
        # Lone surrogates become U+FFFD (a UTF-16 round trip replaces exactly those).
        cleaned = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        data = cleaned.encode("utf-8")
    return atomic_write_bytes(path, data + b"\n")


def read_transcript(path: str | os.PathLike[str]) -> RunRecord:
    """The :class:`RunRecord` a transcript file holds (pydantic's ``ValidationError`` when
    the file is not a transcript of this version)."""
    return RunRecord.model_validate_json(Path(path).read_bytes())
