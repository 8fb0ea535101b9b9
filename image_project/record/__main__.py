"""``python -m image_project.record [PATH]``: write the transcript JSON Schema
(default ``docs/transcript.schema.json``). Exit codes: 0 written; 2 a usage error (argparse:
``--help`` prints the usage and writes nothing; an unknown option) or a path that cannot be
written (one line naming it)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from image_project.record.schema import transcript_json_schema_text

_DEFAULT = Path("docs/transcript.schema.json")


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m image_project.record",
        description="Write the transcript's JSON Schema (RunRecord, schema_version 2).",
    )
    parser.add_argument(
        "path", nargs="?", type=Path, default=_DEFAULT, metavar="PATH", help=f"({_DEFAULT})"
    )
    path: Path = parser.parse_args(list(argv)).path
    try:
        path.write_text(transcript_json_schema_text(), encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
