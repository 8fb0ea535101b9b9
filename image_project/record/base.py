"""The base every record model shares: frozen, strict about keys."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RecordModel(BaseModel):
    """A frozen pydantic model that rejects unknown keys, so a transcript written by another
    version (or edited by hand) fails loudly when read back instead of losing fields. Every
    field is always written (None included), so the generated JSON Schema marks every key of
    a serialised record as required."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_serialization_defaults_required=True,
        defer_build=True,
    )
