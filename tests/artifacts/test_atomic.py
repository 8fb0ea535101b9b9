from __future__ import annotations

import os
from pathlib import Path

import pytest

from image_project.artifacts.atomic import (
    append_bytes,
    atomic_write_bytes,
    atomic_write_text,
    file_size,
    truncate_back,
)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    atomic_write_bytes(target, b"first")
    atomic_write_bytes(target, b"second")
    assert target.read_bytes() == b"second"
    assert _leftovers(tmp_path) == []


def test_atomic_write_text_creates_parents_and_keeps_utf8(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "note.txt"
    returned = atomic_write_text(target, "café\nline two\n")
    assert returned == target
    assert target.read_bytes() == "café\nline two\n".encode()


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_failed_write_keeps_old_file_and_removes_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old content")

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError(f"simulated {failing} failure")

    monkeypatch.setattr(os, failing, boom)  # the os module that atomic.py calls into
    with pytest.raises(OSError, match="simulated"):
        atomic_write_text(target, "new content")
    monkeypatch.undo()
    assert target.read_text() == "old content"
    assert _leftovers(tmp_path) == []
    assert sorted(os.listdir(tmp_path)) == ["out.txt"]


def test_append_bytes_creates_then_appends(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "log.csv"
    append_bytes(target, b"one\n")
    append_bytes(target, b"two\n")
    assert target.read_bytes() == b"one\ntwo\n"


def test_truncate_back_undoes_appends_and_removes_a_file_that_did_not_exist(
    tmp_path: Path,
) -> None:
    existing, fresh = tmp_path / "a.csv", tmp_path / "b.csv"
    existing.write_bytes(b"h\r\n1\r\n")
    sizes = file_size(existing), file_size(fresh)
    assert sizes == (6, None)
    for path in (existing, fresh):
        append_bytes(path, b"2\r\n")
    truncate_back(existing, sizes[0])
    truncate_back(fresh, sizes[1])
    assert existing.read_bytes() == b"h\r\n1\r\n"
    assert not fresh.exists()
