"""``python -m image_project.record [PATH]``: write the transcript JSON Schema
(default ``docs/transcript.schema.json``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from image_project.record.schema import transcript_json_schema_text

__all__ = ["main"]


def main(argv: Sequence[str]) -> int:
    path = Path(argv[0] if argv else "docs/transcript.schema.json")
    path.write_text(transcript_json_schema_text(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
