"""Run records from transcript files: the review's input when there is no store (tests, a
directory of old transcripts)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from image_project.artifacts.transcript import read_transcript
from image_project.record.run import RunRecord


def newest_first(records: Iterable[RunRecord]) -> list[RunRecord]:
    """``records`` sorted newest first (by ``created_at``, then generation id), as the store
    returns them."""
    return sorted(records, key=lambda r: (r.created_at, r.generation_id), reverse=True)


def records_from_transcripts(paths: Iterable[str | os.PathLike[str]]) -> list[RunRecord]:
    """The record of every transcript file in ``paths``, newest first. A file that is not a
    transcript of this schema version raises pydantic's ``ValidationError`` naming it."""
    return newest_first(read_transcript(p) for p in paths)
