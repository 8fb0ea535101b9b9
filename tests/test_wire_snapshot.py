"""What a run sends and records, against saved snapshots.

The three scenarios of ``scripts/wire_snapshot.py`` (a one-round three-judge scoring run, a
three-round run, a three-round run with the LLM selector) run through the real client against
the local offline server; their request bodies and scrubbed transcripts must equal the
snapshots in ``tests/data/wire/``. A refactor that changes a prompt, a seed, a schema or the
record fails here. After a deliberate change, regenerate the snapshots with
``python scripts/wire_snapshot.py tests/data/wire`` and say why in the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import wire_snapshot  # noqa: E402

SAVED = REPO / "tests" / "data" / "wire"


def saved(name: str, suffix: str) -> object:
    return json.loads((SAVED / f"{name}.{suffix}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", list(wire_snapshot.SCENARIOS))
def test_a_run_sends_and_records_what_the_snapshot_holds(
    name: str, tmp_path: Path, allow_loopback: None
) -> None:
    bodies, transcript = wire_snapshot.run_scenario(name, tmp_path / "work")
    # Through JSON, as the snapshot was written (tuples become lists).
    assert json.loads(json.dumps(bodies)) == saved(name, "requests")
    assert json.loads(json.dumps(transcript)) == saved(name, "transcript")
