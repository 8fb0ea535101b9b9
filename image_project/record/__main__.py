"""``python -m image_project.record [PATH]``: write the transcript JSON Schema
(default ``docs/transcript.schema.json``)."""

from __future__ import annotations

import sys
from pathlib import Path

from image_project.record.schema import transcript_json_schema_text

path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/transcript.schema.json")
path.write_text(transcript_json_schema_text(), encoding="utf-8")
print(f"wrote {path}")
