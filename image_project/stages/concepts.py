"""The categories file and concept selection.

The categories file is a CSV with one column per category; every non-blank cell is one
free-text concept, conventionally ``"Name: short description"`` (``Baroque: dramatic
chiaroscuro, ornate movement``). The eight expected columns fall into three fixed groups
(:data:`CONCEPT_GROUPS`); a run draws exactly one concept per group, pooled over the group's
columns, with a private RNG derived from the run seed, so the same seed and the same file
always give the same concepts.

:func:`read_csv_rows` is the strict reader shared by the data-loading stages (this module and
:mod:`image_project.stages.profile`): every problem with the file is an
:class:`~image_project.errors.InputFileError` that names the path.
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from image_project.errors import InputFileError
from image_project.seeding import rng_for

CONCEPT_GROUPS: tuple[tuple[str, ...], ...] = (
    ("Subject Matter", "Narrative"),
    ("Mood", "Composition", "Perspective"),
    ("Style", "Time Period_Context", "Color Scheme"),
)
EXPECTED_COLUMNS: tuple[str, ...] = tuple(col for group in CONCEPT_GROUPS for col in group)


def read_csv_rows(path: str | Path, *, what: str) -> list[list[str]]:
    """All rows of a UTF-8 CSV file (a BOM is allowed), header first.

    Raises :class:`InputFileError` naming ``path`` when the file is missing, is a directory
    (or another non-regular file), cannot be read, is empty (no bytes, only a BOM, or only
    whitespace), is not valid UTF-8 (the message gives the byte offset, and says so when the
    file looks like UTF-16), contains NUL bytes (a binary file), or is not parseable CSV.
    ``what`` ("categories file", ...) is used in the messages.
    """
    p = Path(path)
    if not p.exists():
        raise InputFileError(p, f"{what} not found; check the configured path")
    if p.is_dir():
        raise InputFileError(p, f"{what} is a directory, expected a CSV file")
    if not p.is_file():
        raise InputFileError(p, f"{what} is not a regular file, expected a CSV file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputFileError(p, f"cannot read {what}: {exc}") from exc
    unmarked = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = unmarked.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + len(data) - len(unmarked)
        utf16 = (
            " (it looks like UTF-16)"
            if data[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
            else ""
        )
        raise InputFileError(
            p,
            f"{what} is not valid UTF-8 (byte 0x{data[offset]:02x} at offset {offset})"
            f"{utf16}; save it as UTF-8",
        ) from exc
    if not text.strip():
        raise InputFileError(p, f"{what} is empty; expected a header row and data rows")
    if "\x00" in text:
        raise InputFileError(p, f"{what} contains NUL bytes (a binary file?); expected a UTF-8 CSV")
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error as exc:
        raise InputFileError(p, f"{what} is not valid CSV: {exc}") from exc
    # Drop fully blank rows (trailing newlines, spacer lines) so the header is rows[0].
    return [row for row in rows if any(cell.strip() for cell in row)]


@dataclass(frozen=True)
class Categories:
    """The concepts of each expected column, in file order (blank cells dropped).

    ``columns`` is a read-only mapping ``column name -> tuple of concepts`` with exactly the
    :data:`EXPECTED_COLUMNS`, in that order. ``source`` is the path it was loaded from.
    """

    columns: Mapping[str, tuple[str, ...]]
    source: str = ""

    def __post_init__(self) -> None:
        frozen = MappingProxyType({k: tuple(v) for k, v in self.columns.items()})
        object.__setattr__(self, "columns", frozen)

    def __getitem__(self, column: str) -> tuple[str, ...]:
        return self.columns[column]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    def pool(self, group_index: int) -> tuple[str, ...]:
        """Every concept of group ``group_index``: its columns' concepts, column by column."""
        return tuple(c for col in CONCEPT_GROUPS[group_index] for c in self.columns.get(col, ()))


def _header_key(name: str) -> str:
    return " ".join(name.split()).casefold()


def load_categories(path: str | Path) -> Categories:
    """Load and check a categories CSV.

    The header must contain every one of :data:`EXPECTED_COLUMNS` (matched after trimming
    surrounding whitespace, case-insensitively); unknown extra columns are allowed and
    ignored. Cells are trimmed and blank cells skipped; a short row simply has blank cells.
    Every group of :data:`CONCEPT_GROUPS` must have at least one concept in total.

    Raises :class:`InputFileError` (naming the path) for a missing file, a directory, an
    empty file, non-UTF-8 or NUL bytes, invalid CSV, a header lacking expected columns (the
    message lists the missing and the found columns), an expected column given twice, a
    header without data rows, or a group with no concepts.
    """
    p = Path(path)
    rows = read_csv_rows(p, what="categories file")
    header, body = rows[0], rows[1:]
    wanted = {_header_key(col): col for col in EXPECTED_COLUMNS}
    index: dict[str, int] = {}
    for i, raw_name in enumerate(header):
        col = wanted.get(_header_key(raw_name))
        if col is None:
            continue
        if col in index:
            raise InputFileError(p, f"the column {col!r} appears more than once in the header")
        index[col] = i
    missing = [col for col in EXPECTED_COLUMNS if col not in index]
    if missing:
        found = [h.strip() for h in header if h.strip()]
        raise InputFileError(
            p,
            "categories header is missing column(s) "
            + ", ".join(repr(c) for c in missing)
            + "; found "
            + (", ".join(repr(f) for f in found) if found else "no column names")
            + "; expected "
            + ", ".join(repr(c) for c in EXPECTED_COLUMNS),
        )
    if not body:
        raise InputFileError(
            p,
            "categories file has a header row but no data rows; add at least one concept "
            "per group: " + "; ".join(", ".join(group) for group in CONCEPT_GROUPS),
        )
    columns: dict[str, tuple[str, ...]] = {}
    for col in EXPECTED_COLUMNS:
        i = index[col]
        cells = (" ".join(row[i].split()) for row in body if i < len(row))
        columns[col] = tuple(c for c in cells if c)
    categories = Categories(columns, source=str(p))
    for gi, group in enumerate(CONCEPT_GROUPS):
        if not categories.pool(gi):
            raise InputFileError(
                p,
                f"concept group {gi + 1} ({', '.join(group)}) has no concepts; "
                "add at least one value to one of these columns",
            )
    return categories


def select_concepts(categories: Categories, run_seed: int) -> tuple[str, ...]:
    """One concept per group of :data:`CONCEPT_GROUPS`, in group order.

    Group ``i`` draws uniformly from its pooled concepts (:meth:`Categories.pool`) with
    ``rng_for(run_seed, "concepts", i)``: deterministic for a seed, and independent of the
    other groups and of every other random choice of the run. A group without concepts is
    an error (``load_categories`` never returns one).
    """
    chosen: list[str] = []
    for gi, group in enumerate(CONCEPT_GROUPS):
        pool = categories.pool(gi)
        if not pool:
            raise ValueError(f"concept group {gi + 1} ({', '.join(group)}) has no concepts")
        chosen.append(rng_for(run_seed, "concepts", gi).choice(pool))
    return tuple(chosen)
