"""The titles manifest CSV, and the CSV record helpers the generations CSV shares.

One row per captioned image::

    seq, title, generation_id, image_prompt, image_path, created_at,
    model, size, quality, seed, title_source, title_raw

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

import csv
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from image_project.artifacts.atomic import append_bytes
from image_project.artifacts.locking import DEFAULT_TIMEOUT_S, FileLock
from image_project.errors import ImageProjectError, InputFileError

__all__ = [
    "MANIFEST_FIELDS",
    "MANIFEST_REQUIRED_FIELDS",
    "append_csv_row",
    "append_manifest_row",
    "existing_titles",
    "lock_path_for",
    "manifest_lock",
    "next_seq",
    "prepare_row",
    "read_csv_header",
    "read_csv_rows",
    "read_manifest",
    "utc_now_iso",
]

MANIFEST_FIELDS: tuple[str, ...] = (
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


def append_manifest_row(path: _PathLike, row: Mapping[str, object]) -> dict[str, str]:
    """Append one manifest row; the caller holds :func:`manifest_lock` for ``path``.

    ``seq, title, generation_id, image_prompt, image_path`` are required and ``seq`` must be
    an integer; other columns default to ``""`` and an empty ``created_at`` is filled in.
    Returns the row as written.
    """
    out = prepare_row(path, MANIFEST_FIELDS, MANIFEST_REQUIRED_FIELDS, row, kind="manifest")
    try:
        int(out["seq"].strip())
    except ValueError:
        raise ValueError(f"{path}: manifest seq must be an integer, got {out['seq']!r}") from None
    append_csv_row(path, MANIFEST_FIELDS, out)
    return out
