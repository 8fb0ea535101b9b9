from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from image_project.artifacts.generations import (
    GENERATIONS_FIELDS,
    append_generation_row,
    parse_selected_concepts,
    read_generations,
    read_recent_prompts,
)
from image_project.artifacts.locking import FileLock
from image_project.errors import ImageProjectError, InputFileError


def _row(i: int, prompt: str | None = None, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "generation_id": f"gen-{i}",
        "selected_concepts": ["Baroque", "Bird's-Eye View", 'Complémentaire, "vif"'],
        "final_image_prompt": prompt if prompt is not None else f"prompt number {i}",
        "image_path": f"/images/gen-{i}_image.jpg",
        "created_at": "2024-05-01T10:00:00Z",
        "seed": 1000 + i,
    }
    row.update(extra)
    return row


def test_header_written_once_and_concepts_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "generations.csv"
    append_generation_row(path, _row(1))
    append_generation_row(path, _row(2, created_at="", seed=None))
    text = path.read_bytes().decode("utf-8")
    assert text.startswith(",".join(GENERATIONS_FIELDS) + "\r\n")
    assert text.count("generation_id,selected_concepts") == 1
    assert "Complémentaire" in text  # ensure_ascii=False
    rows = read_generations(path)
    assert [r["generation_id"] for r in rows] == ["gen-1", "gen-2"]
    assert parse_selected_concepts(rows[0]["selected_concepts"]) == _row(1)["selected_concepts"]
    assert json.loads(rows[1]["selected_concepts"])[1] == "Bird's-Eye View"
    assert rows[0]["seed"] == "1001"
    assert rows[1]["seed"] == ""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rows[1]["created_at"])
    # The lock file stays on disk (artifacts/locking.py) and is free again: one attempt takes it.
    with FileLock(tmp_path / "deep" / "generations.csv.lock", timeout_s=0):
        pass


def test_selected_concepts_must_be_a_list_of_strings(tmp_path: Path) -> None:
    path = tmp_path / "g.csv"
    with pytest.raises(ValueError, match="selected_concepts"):
        append_generation_row(path, _row(1, selected_concepts=[1, 2]))
    with pytest.raises(ValueError, match="selected_concepts"):
        append_generation_row(path, _row(1, selected_concepts="not json"))
    append_generation_row(path, _row(1, selected_concepts='["Already", "JSON"]'))
    assert read_generations(path)[0]["selected_concepts"] == '["Already", "JSON"]'


def test_missing_required_key_and_header_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "g.csv"
    row = _row(1)
    del row["final_image_prompt"]
    with pytest.raises(KeyError, match="final_image_prompt"):
        append_generation_row(path, row)
    path.write_text("generation_id,prompt\ng0,x\n", encoding="utf-8")
    with pytest.raises(ImageProjectError, match=re.escape(str(path))):
        append_generation_row(path, _row(1))


def test_read_recent_prompts_window(tmp_path: Path) -> None:
    path = tmp_path / "g.csv"
    append_generation_row(path, _row(1, prompt="p1"))
    append_generation_row(path, _row(2, prompt="p2"))
    with open(path, "a", encoding="utf-8", newline="") as fh:  # an older row without a prompt
        fh.write('gen-x,"[]",,,2024-01-01T00:00:00Z,\r\n')
    append_generation_row(path, _row(3, prompt="p3\nwith newline, and comma"))
    append_generation_row(path, _row(4, prompt="p4"))
    assert read_recent_prompts(path, 3) == ["p2", "p3\nwith newline, and comma", "p4"]
    assert read_recent_prompts(path, 25) == ["p1", "p2", "p3\nwith newline, and comma", "p4"]
    assert read_recent_prompts(path, 0) == []


def test_read_recent_prompts_missing_file_empty_file_and_missing_column(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_recent_prompts(tmp_path / "absent.csv", 5)
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    assert read_recent_prompts(empty, 5) == []
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("generation_id,prompt\ng1,hello\n", encoding="utf-8")
    with pytest.raises(InputFileError, match=re.escape(str(wrong))):
        read_recent_prompts(wrong, 5)
