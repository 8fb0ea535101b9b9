"""The titles manifest CSV, and the CSV record helpers the generations CSV shares.

One row per captioned image::

    seq, title, generation_id, image_prompt, image_path, created_at,
    model, size, quality, seed, title_source, title_raw,
    upscaled_path, upscaled_size, upscale_method

The last three describe the 4K image (``upscale.enabled``; empty without one). They were
added at the end, so a manifest written before them (:data:`MANIFEST_LEGACY_FIELDS`, the
first twelve) keeps working: it is read as it is (its rows have no ``upscaled_*`` keys), a row
without a 4K image is appended to it in its own twelve columns, and the first row with one
rewrites its header line to the full one (atomically, under the lock; the old rows stay as
they are and read back with the new columns empty). :func:`mark_manifest` /
:func:`restore_manifest` undo an append either way.

``seq`` is unique across processes only if the whole sequence *read rows -> allocate seq ->
caption and save the image -> append the row* runs under :func:`manifest_lock`::

    with manifest_lock(path):
        rows = read_manifest(path)
        seq = next_seq(rows)
        ...  # title, caption, save
        append_manifest_row(path, {...})

:func:`append_manifest_row` does not take the lock itself (the lock is not re-entrant and
the caller already holds it). Every append is a single ``write`` in append mode followed by
``fsync``, so a reader or a killed writer never leaves a torn line; the header is written in
the same write as the first row.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from image_project.artifacts.atomic import (
    append_bytes,
    atomic_write_bytes,
    file_size,
    truncate_back,
)
from image_project.artifacts.locking import DEFAULT_TIMEOUT_S, FileLock
from image_project.errors import ImageProjectError, InputFileError

MANIFEST_LEGACY_FIELDS: tuple[str, ...] = (
    "seq",
    "title",
    "generation_id",
    "image_prompt",
    "image_path",
    "created_at",
    "model",
    "size",
    "quality",
    "seed",
    "title_source",
    "title_raw",
)
"""The manifest's columns before the 4K image's were added (still read and appended to)."""
MANIFEST_UPSCALE_FIELDS: tuple[str, ...] = ("upscaled_path", "upscaled_size", "upscale_method")
"""The 4K image's columns, at the end: its path, ``WxH`` size and method (empty without one)."""
MANIFEST_FIELDS: tuple[str, ...] = MANIFEST_LEGACY_FIELDS + MANIFEST_UPSCALE_FIELDS
MANIFEST_HEADERS: tuple[tuple[str, ...], ...] = (MANIFEST_FIELDS, MANIFEST_LEGACY_FIELDS)
"""The headers an existing manifest may have: the current one, or the one before the 4K
columns."""
MANIFEST_REQUIRED_FIELDS: tuple[str, ...] = (
    "seq",
    "title",
    "generation_id",
    "image_prompt",
    "image_path",
)

_PathLike = str | os.PathLike[str]


def utc_now_iso() -> str:
    """Current UTC time as ISO 8601 with a ``Z`` suffix, second precision."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def lock_path_for(path: _PathLike) -> Path:
    """The lock file guarding ``path``: ``<path>.lock``."""
    p = Path(path)
    return p.with_name(p.name + ".lock")


def manifest_lock(
    path: _PathLike,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> FileLock:
    """A :class:`FileLock` on ``<path>.lock``; hold it from reading rows to appending one."""
    return FileLock(lock_path_for(path), timeout_s=timeout_s)


# --- generic CSV records -------------------------------------------------------------------


def _reader(path: Path) -> Iterable[list[str]]:
    """Non-blank CSV rows of ``path`` (utf-8-sig); decode and syntax errors name the file."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            for row in csv.reader(fh):
                if any(cell.strip() for cell in row):
                    yield row
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not valid UTF-8 ({exc})") from exc
    except csv.Error as exc:
        raise InputFileError(path, f"malformed CSV ({exc})") from exc


def read_csv_header(path: _PathLike) -> list[str] | None:
    """The header of an existing CSV file (cells stripped), or None if it has no rows.

    A missing file raises :class:`FileNotFoundError`.
    """
    for row in _reader(Path(path)):
        return [cell.strip() for cell in row]
    return None


def read_csv_rows(path: _PathLike) -> list[dict[str, str]]:
    """All data rows of a CSV file as dicts keyed by its header; missing file -> ``[]``.

    Short rows are padded with ``""``; cells beyond the header are dropped; blank lines are
    skipped.
    """
    p = Path(path)
    if not p.exists():
        return []
    rows = iter(_reader(p))
    header = next(rows, None)
    if header is None:
        return []
    keys = [cell.strip() for cell in header]
    out: list[dict[str, str]] = []
    for row in rows:
        padded = list(row[: len(keys)]) + [""] * (len(keys) - len(row))
        out.append(dict(zip(keys, padded, strict=True)))
    return out


def _csv_line(values: Sequence[str]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\r\n").writerow(values)
    return buf.getvalue().encode("utf-8")


def _ends_with_newline(path: Path, size: int) -> bool:
    if size == 0:
        return True
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def append_csv_row(path: _PathLike, fieldnames: Sequence[str], row: Mapping[str, str]) -> None:
    """Append ``row`` (all ``fieldnames`` keys) to the CSV at ``path`` in a single write.

    The header is written (in the same write) when the file is missing or has no rows. An
    existing header that differs from ``fieldnames`` is refused with an
    :class:`~image_project.errors.ImageProjectError` naming the file and both headers. If a
    previous writer left the last line unterminated, the new row starts on a fresh line.
    Callers serialise appends to one file with a lock.
    """
    p = Path(path)
    expected = list(fieldnames)
    payload = b""
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        size = 0
    header = read_csv_header(p) if size else None
    if header is None:
        if not _ends_with_newline(p, size):
            payload += b"\r\n"
        payload += _csv_line(expected)
    elif header != expected:
        raise ImageProjectError(
            f"{p}: existing CSV header {header} differs from the expected header {expected}; "
            "move the file aside (or fix its header) and run again"
        )
    elif not _ends_with_newline(p, size):
        payload += b"\r\n"
    payload += _csv_line([row[name] for name in expected])
    append_bytes(p, payload)


def prepare_row(
    path: _PathLike,
    fieldnames: Sequence[str],
    required: Sequence[str],
    row: Mapping[str, object],
    *,
    kind: str,
) -> dict[str, str]:
    """Validate ``row`` against the columns and stringify it (None -> ``""``).

    Unknown keys raise :class:`ValueError`, missing required keys :class:`KeyError`, and a
    required value that is None or blank :class:`ValueError`; every message names ``path``.
    An empty ``created_at`` (when that column exists) is filled with the current UTC time.
    """
    unknown = sorted(set(row) - set(fieldnames))
    if unknown:
        raise ValueError(
            f"{path}: unknown {kind} column(s) {unknown}; columns are {list(fieldnames)}"
        )
    missing = [name for name in required if name not in row]
    if missing:
        raise KeyError(f"{path}: {kind} row is missing required column(s) {missing}")
    out = {name: "" if row.get(name) is None else str(row.get(name)) for name in fieldnames}
    blank = [name for name in required if not out[name].strip()]
    if blank:
        raise ValueError(f"{path}: {kind} row has empty required column(s) {blank}")
    if "created_at" in out and not out["created_at"].strip():
        out["created_at"] = utc_now_iso()
    return out


# --- the titles manifest -------------------------------------------------------------------


def read_manifest(path: _PathLike) -> list[dict[str, str]]:
    """The manifest's rows in file order (oldest first); a missing file gives ``[]``."""
    return read_csv_rows(path)


def existing_titles(rows: Iterable[Mapping[str, str]]) -> list[str]:
    """Non-empty titles, most recent first (the "avoid" list for title generation)."""
    titles = [(row.get("title") or "").strip() for row in rows]
    return [title for title in reversed(titles) if title]


def next_seq(rows: Iterable[Mapping[str, str]]) -> int:
    """``max(seq) + 1`` over rows whose ``seq`` parses as an int; 1 when there are none."""
    highest = 0
    for row in rows:
        try:
            seq = int((row.get("seq") or "").strip())
        except ValueError:
            continue
        highest = max(highest, seq)
    return highest + 1


def _is_legacy(path: _PathLike) -> bool:
    """Whether ``path`` exists with the header from before the 4K columns."""
    return bool(file_size(path)) and read_csv_header(path) == list(MANIFEST_LEGACY_FIELDS)


def append_manifest_row(path: _PathLike, row: Mapping[str, object]) -> dict[str, str]:
    """Append one manifest row; the caller holds :func:`manifest_lock` for ``path``.

    ``seq, title, generation_id, image_prompt, image_path`` are required and ``seq`` must be
    an integer; other columns default to ``""`` and an empty ``created_at`` is filled in.
    On a manifest with the old twelve-column header, a row whose 4K columns are empty is
    appended in those twelve columns; one with a 4K image first upgrades the header
    (:func:`upgrade_manifest_header`). Returns the row as written (all the columns).
    """
    out = prepare_row(path, MANIFEST_FIELDS, MANIFEST_REQUIRED_FIELDS, row, kind="manifest")
    try:
        int(out["seq"].strip())
    except ValueError:
        raise ValueError(f"{path}: manifest seq must be an integer, got {out['seq']!r}") from None
    if _is_legacy(path):
        if not any(out[name] for name in MANIFEST_UPSCALE_FIELDS):
            append_csv_row(path, MANIFEST_LEGACY_FIELDS, out)
            return out
        upgrade_manifest_header(path)
    append_csv_row(path, MANIFEST_FIELDS, out)
    return out


def _blank_line(line: bytes) -> bool:
    """A line the CSV reader skips (no cell with anything but spaces)."""
    return not line.strip(b' \t\r\n,"')


def upgrade_manifest_header(path: _PathLike) -> bool:
    """Give a manifest with the old twelve-column header the full header, replacing only its
    header line (atomically; the rows are kept byte for byte, so they read back with the 4K
    columns empty). The caller holds the lock. Returns whether the file was changed."""
    if not _is_legacy(path):
        return False
    data = Path(path).read_bytes()
    bom = codecs.BOM_UTF8 if data.startswith(codecs.BOM_UTF8) else b""
    body = data[len(bom) :]
    start = 0
    while True:
        end = body.find(b"\n", start)
        end = len(body) if end == -1 else end + 1
        if not _blank_line(body[start:end]) or end >= len(body):
            break
        start = end
    atomic_write_bytes(path, bom + body[:start] + _csv_line(MANIFEST_FIELDS) + body[end:])
    return True


@dataclass(frozen=True)
class ManifestMark:
    """Where a manifest stood before a run appended to it (:func:`mark_manifest`): its size
    (None: no file), and its whole content when the append may rewrite its header (an old
    manifest), so that :func:`restore_manifest` can put it back exactly."""

    size: int | None
    content: bytes | None = None


def mark_manifest(path: _PathLike) -> ManifestMark:
    """Mark ``path`` before appending to it; the caller holds the lock until it restores or
    is done."""
    size = file_size(path)
    content = Path(path).read_bytes() if _is_legacy(path) else None
    return ManifestMark(size, content)


def restore_manifest(path: _PathLike, mark: ManifestMark) -> None:
    """Undo what was appended to ``path`` (and a header upgrade) since ``mark``; only for
    the caller that has held the lock since then."""
    if mark.content is not None:
        atomic_write_bytes(path, mark.content)
    else:
        truncate_back(path, mark.size)
