"""``docs/transcript.schema.json``: the JSON Schema of a transcript, generated from
:class:`~image_project.record.run.RunRecord`. Regenerate it with ``python -m
image_project.record [PATH]``; a test fails when the committed file is stale."""

from __future__ import annotations

import json
from typing import Any

from image_project.record.run import SCHEMA_VERSION, RunRecord

SCHEMA_ID = "https://image-project.invalid/transcript.schema.json"


def transcript_json_schema() -> dict[str, Any]:
    """The transcript's JSON Schema (draft 2020-12), as the file holds it."""
    schema = RunRecord.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": f"image_project transcript, schema_version {SCHEMA_VERSION}",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def transcript_json_schema_text() -> str:
    return json.dumps(transcript_json_schema(), indent=2, ensure_ascii=False) + "\n"
