"""The titles manifest's 4K columns (``upscaled_path, upscaled_size, upscale_method``, at the
end) and a manifest written before them: it is still read, still appended to, upgraded in
place only when a row has a 4K image, and an append is undone exactly either way."""

from __future__ import annotations

import codecs
import csv
import io
from pathlib import Path

import pytest

from image_project.artifacts.manifest import (
    MANIFEST_FIELDS,
    MANIFEST_LEGACY_FIELDS,
    MANIFEST_UPSCALE_FIELDS,
    append_manifest_row,
    existing_titles,
    mark_manifest,
    next_seq,
    read_manifest,
    restore_manifest,
)
from image_project.errors import InputFileError
from image_project.preflight import check_csv_record_file

OLD_ROWS = [
    [
        *("1", "Quiet Harbor", "gen-1", 'a "quoted", prompt', "/img/gen-1_image.jpg"),
        *("2026-01-01T00:00:00Z", "m", "1536x1024", "high", "7", "llm", "Quiet Harbor"),
    ],
    [
        *("2", "Night Ferry", "gen-2", "second\nline", "/img/gen-2_image.jpg"),
        *("2026-01-02T00:00:00Z", "m", "1536x1024", "high", "8", "fallback", ""),
    ],
]
UPSCALED = {
    "upscaled_path": "/img/gen-3_image_4k.jpg",
    "upscaled_size": "3840x2560",
    "upscale_method": "lanczos_resize",
}


def old_manifest(path: Path, *, bom: bool = False) -> bytes:
    """A manifest as the code before the 4K columns wrote it: twelve columns, CRLF rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(MANIFEST_LEGACY_FIELDS)
    writer.writerows(OLD_ROWS)
    data = (codecs.BOM_UTF8 if bom else b"") + buffer.getvalue().encode("utf-8")
    path.write_bytes(data)
    return data


def row(seq: int, **extra: str) -> dict[str, object]:
    return {
        "seq": seq,
        "title": f"Title {seq}",
        "generation_id": f"gen-{seq}",
        "image_prompt": f"prompt {seq}",
        "image_path": f"/img/gen-{seq}_image.jpg",
        **extra,
    }


def header(path: Path) -> list[str]:
    with path.open(encoding="utf-8-sig", newline="") as fh:
        return next(csv.reader(fh))


def test_the_4k_columns_come_last() -> None:
    assert MANIFEST_FIELDS[: len(MANIFEST_LEGACY_FIELDS)] == MANIFEST_LEGACY_FIELDS
    assert MANIFEST_FIELDS[len(MANIFEST_LEGACY_FIELDS) :] == MANIFEST_UPSCALE_FIELDS


def test_an_old_manifest_is_read_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "titles_manifest.csv"
    old_manifest(path)
    rows = read_manifest(path)
    assert [list(r) for r in rows] == [list(MANIFEST_LEGACY_FIELDS)] * 2
    assert rows[1]["image_prompt"] == "second\nline"
    assert next_seq(rows) == 3 and existing_titles(rows) == ["Night Ferry", "Quiet Harbor"]
    # The run's pre-flight check accepts it, and still refuses any other header.
    key, fields = "image.generation_path", MANIFEST_FIELDS
    check_csv_record_file(path, key, "titles manifest", fields, also=[MANIFEST_LEGACY_FIELDS])
    with pytest.raises(InputFileError, match="has the header"):
        check_csv_record_file(path, key, "titles manifest", fields)


def test_a_row_without_a_4k_image_is_appended_in_the_old_columns(tmp_path: Path) -> None:
    path = tmp_path / "titles_manifest.csv"
    before = old_manifest(path)
    append_manifest_row(path, row(3))
    data = path.read_bytes()
    assert data.startswith(before)  # nothing rewritten
    assert header(path) == list(MANIFEST_LEGACY_FIELDS)
    added = list(csv.reader(io.StringIO(data[len(before) :].decode("utf-8"))))
    assert len(added) == 1 and len(added[0]) == len(MANIFEST_LEGACY_FIELDS)
    assert [r["seq"] for r in read_manifest(path)] == ["1", "2", "3"]


@pytest.mark.parametrize("bom", [False, True], ids=["plain", "bom"])
def test_a_row_with_a_4k_image_upgrades_the_header_and_keeps_the_old_rows(
    tmp_path: Path, bom: bool
) -> None:
    path = tmp_path / "titles_manifest.csv"
    before = old_manifest(path, bom=bom)
    old_header_line = before.index(b"\r\n") + 2
    append_manifest_row(path, row(3, **UPSCALED))
    data = path.read_bytes()
    assert header(path) == list(MANIFEST_FIELDS)
    new_header_line = data.index(b"\r\n") + 2
    # The old rows are kept byte for byte after the new header line.
    assert data[new_header_line:].startswith(before[old_header_line:])
    rows = read_manifest(path)
    assert [list(r) for r in rows] == [list(MANIFEST_FIELDS)] * 3
    assert [r["upscaled_path"] for r in rows] == ["", "", UPSCALED["upscaled_path"]]
    assert rows[2]["upscale_method"] == "lanczos_resize" and rows[0]["title_raw"] == "Quiet Harbor"
    # From then on it is an ordinary current manifest.
    append_manifest_row(path, row(4))
    assert [r["seq"] for r in read_manifest(path)] == ["1", "2", "3", "4"]


@pytest.mark.parametrize("which", ["none", "old", "current"])
def test_restoring_a_mark_undoes_the_append_and_the_upgrade_exactly(
    tmp_path: Path, which: str
) -> None:
    path = tmp_path / "titles_manifest.csv"
    if which == "old":
        old_manifest(path)
    elif which == "current":
        append_manifest_row(path, row(1, **UPSCALED))
    before = path.read_bytes() if path.exists() else None
    mark = mark_manifest(path)
    append_manifest_row(path, row(9, **UPSCALED))
    assert path.read_bytes() != before
    restore_manifest(path, mark)
    assert (path.read_bytes() if path.exists() else None) == before
