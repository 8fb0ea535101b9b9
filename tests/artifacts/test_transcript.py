from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from image_project.artifacts.transcript import to_jsonable, transcript_path, write_transcript


class Opaque:
    def __str__(self) -> str:
        return "<opaque thing>"


@dataclass(frozen=True)
class Card:
    id: str
    score: float


def test_transcript_keeps_non_ascii_indent_and_trailing_newline(tmp_path: Path) -> None:
    path = transcript_path(tmp_path / "logs", "20240501_abc")
    assert path == tmp_path / "logs" / "20240501_abc_transcript.json"
    write_transcript(path, {"generation_id": "20240501_abc", "prompt": "Café — 東京"})
    text = path.read_text(encoding="utf-8")
    assert "Café — 東京" in text
    assert text.endswith("}\n")
    assert '\n  "prompt": ' in text
    assert json.loads(text)["prompt"] == "Café — 東京"
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_non_serialisable_values_are_converted_not_fatal(tmp_path: Path) -> None:
    loop: dict[str, object] = {"name": "loop"}
    loop["self"] = loop
    data = {
        "error": {"type": "ValueError", "exc": ValueError("boom")},
        "opaque": Opaque(),
        "path": Path("/tmp/x.jpg"),
        "when": datetime(2024, 5, 1, tzinfo=UTC),
        "tags": {"b", "a"},
        "pair": ("x", 1),
        "nan": math.nan,
        "card": Card("A", 0.5),
        "blob": b"\x89PNG....",
        "loop": loop,
        (1, 2): "tuple key",
    }
    path = tmp_path / "t.json"
    write_transcript(path, data)  # type: ignore[arg-type]
    loaded = json.loads(path.read_text(encoding="utf-8"))
    assert loaded["error"]["exc"] == "boom"
    assert loaded["opaque"] == "<opaque thing>"
    assert loaded["path"] == "/tmp/x.jpg"
    assert loaded["when"] == "2024-05-01T00:00:00+00:00"
    assert loaded["tags"] == ["a", "b"]
    assert loaded["pair"] == ["x", 1]
    assert loaded["nan"] == "nan"
    assert loaded["card"] == {"id": "A", "score": 0.5}
    assert loaded["blob"] == "<8 bytes>"
    assert loaded["loop"]["self"] == "<circular reference>"
    assert loaded["(1, 2)"] == "tuple key"


def test_to_jsonable_keeps_plain_json_unchanged() -> None:
    plain = {"a": [1, 2.5, True, None, "s"], "b": {"c": []}}
    assert to_jsonable(plain) == plain


@pytest.mark.parametrize("bad", ["", "  ", "a/b", "a\\b", "..", "."])
def test_transcript_path_rejects_ids_that_are_not_file_names(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError):
        transcript_path(tmp_path, bad)
