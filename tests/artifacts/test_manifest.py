from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from image_project.artifacts.manifest import (
    MANIFEST_FIELDS,
    append_manifest_row,
    existing_titles,
    manifest_lock,
    next_seq,
    read_manifest,
)
from image_project.errors import ImageProjectError, InputFileError

TRICKY_PROMPT = 'A harbour at dawn, "quiet" boats;\nsecond line — café, 東京, naïve\r\nthird'


def _row(seq: int, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "seq": seq,
        "title": f"Quiet Harbor {seq}",
        "generation_id": f"gen-{seq}",
        "image_prompt": f"prompt {seq}",
        "image_path": f"/images/gen-{seq}_image.jpg",
    }
    row.update(extra)
    return row


def test_missing_manifest_reads_empty_and_seq_starts_at_one(tmp_path: Path) -> None:
    rows = read_manifest(tmp_path / "nope.csv")
    assert rows == []
    assert next_seq(rows) == 1
    assert existing_titles(rows) == []


def test_next_seq_skips_malformed_rows() -> None:
    rows = [{"seq": "3"}, {"seq": "abc"}, {"seq": ""}, {"seq": " 7 "}, {"seq": "2.5"}, {}]
    assert next_seq(rows) == 8
    assert next_seq([{"seq": "x"}]) == 1


def test_existing_titles_most_recent_first() -> None:
    rows = [{"title": "Old One"}, {"title": ""}, {"title": " New One "}]
    assert existing_titles(rows) == ["New One", "Old One"]


def test_round_trip_with_commas_quotes_newlines_and_non_ascii(tmp_path: Path) -> None:
    path = tmp_path / "out" / "titles_manifest.csv"
    written = append_manifest_row(path, _row(1, image_prompt=TRICKY_PROMPT, seed=42, model=None))
    append_manifest_row(path, _row(2, created_at="2024-05-01T00:00:00Z"))
    rows = read_manifest(path)
    assert [list(r) for r in rows] == [list(MANIFEST_FIELDS)] * 2
    assert rows[0]["image_prompt"] == TRICKY_PROMPT
    assert rows[0] == written
    assert rows[0]["seed"] == "42"
    assert rows[0]["model"] == ""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rows[0]["created_at"])
    assert rows[1]["created_at"] == "2024-05-01T00:00:00Z"
    assert next_seq(rows) == 3
    assert existing_titles(rows) == ["Quiet Harbor 2", "Quiet Harbor 1"]
    assert path.read_text(encoding="utf-8").count("seq,title,generation_id") == 1


def test_read_manifest_handles_bom_blank_and_short_rows(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_bytes("\ufeff".encode() + b"seq,title,generation_id\r\n1,,g1\r\n\r\n2,Short Row\r\n")
    rows = read_manifest(path)
    assert rows == [
        {"seq": "1", "title": "", "generation_id": "g1"},
        {"seq": "2", "title": "Short Row", "generation_id": ""},
    ]


def test_read_manifest_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes("seq,title\n1,caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputFileError, match=re.escape(str(path))):
        read_manifest(path)


def test_header_mismatch_error_names_path_and_both_headers(tmp_path: Path) -> None:
    path = tmp_path / "titles_manifest.csv"
    path.write_text("seq,title,something_else\n1,A Title,x\n", encoding="utf-8")
    with pytest.raises(ImageProjectError) as info:
        append_manifest_row(path, _row(2))
    message = str(info.value)
    assert str(path) in message
    assert "something_else" in message
    assert "title_raw" in message
    assert path.read_text(encoding="utf-8") == "seq,title,something_else\n1,A Title,x\n"


def test_missing_required_key_raises(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    row = _row(1)
    del row["image_path"]
    with pytest.raises(KeyError, match="image_path"):
        append_manifest_row(path, row)
    assert not path.exists()


def test_blank_required_value_unknown_column_and_bad_seq_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    with pytest.raises(ValueError, match="title"):
        append_manifest_row(path, _row(1, title="  "))
    with pytest.raises(ValueError, match="colour"):
        append_manifest_row(path, _row(1, colour="red"))
    with pytest.raises(ValueError, match="seq"):
        append_manifest_row(path, {**_row(1), "seq": "one"})
    assert not path.exists()


def test_unterminated_last_line_does_not_swallow_the_new_row(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    append_manifest_row(path, _row(1))
    with open(path, "ab") as fh:
        fh.write(b"2,Torn Ro")  # a writer killed mid-line (not ours, but possible)
    append_manifest_row(path, _row(3))
    rows = read_manifest(path)
    assert [r["seq"] for r in rows] == ["1", "2", "3"]
    assert rows[2]["generation_id"] == "gen-3"


def test_manifest_lock_uses_dot_lock_file(tmp_path: Path) -> None:
    path = tmp_path / "titles_manifest.csv"
    with manifest_lock(path) as lock:
        assert lock.path == tmp_path / "titles_manifest.csv.lock"
        assert lock.path.exists()
    assert not lock.is_held
    with manifest_lock(path, timeout_s=0):  # free again; its file stays (artifacts/locking.py)
        pass


_WORKER = r"""
import sys
from image_project.artifacts.manifest import append_manifest_row, manifest_lock, next_seq, read_manifest

path, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
for i in range(count):
    with manifest_lock(path, timeout_s=60):
        seq = next_seq(read_manifest(path))
        append_manifest_row(path, {
            "seq": seq,
            "title": f"Worker {worker} Row {i}",
            "generation_id": f"w{worker}-{i}",
            "image_prompt": sys.argv[4],
            "image_path": f"/images/w{worker}-{i}.jpg",
        })
"""


def test_concurrent_processes_allocate_unique_consecutive_seqs(tmp_path: Path) -> None:
    path = tmp_path / "titles_manifest.csv"
    workers, per_worker = 4, 10
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), str(w), str(per_worker), TRICKY_PROMPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    try:
        for proc in procs:  # every worker has imported everything: start them together
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    total = workers * per_worker
    with open(path, encoding="utf-8", newline="") as fh:
        raw_rows = list(csv.reader(fh))
    assert raw_rows[0] == list(MANIFEST_FIELDS)
    assert len(raw_rows) == 1 + total
    assert all(len(r) == len(MANIFEST_FIELDS) for r in raw_rows)  # no torn or merged lines
    rows = read_manifest(path)
    assert sorted(int(r["seq"]) for r in rows) == list(range(1, total + 1))
    assert [int(r["seq"]) for r in rows] == list(range(1, total + 1))  # file order = seq order
    assert {r["generation_id"] for r in rows} == {
        f"w{w}-{i}" for w in range(workers) for i in range(per_worker)
    }
    assert all(r["image_prompt"] == TRICKY_PROMPT for r in rows)
    with manifest_lock(path, timeout_s=0):  # every worker let go of the lock
        pass
