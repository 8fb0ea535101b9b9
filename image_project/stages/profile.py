"""The user's taste profile: what they love, like, dislike and hate.

Two CSV layouts are accepted and give the same :class:`Profile`:

* **column layout** — one column per section, one item per cell::

      Likes,Dislikes
      Misty coastal mornings,Clowns

  Column names are normalised case-insensitively (singular or plural) to ``Loves``,
  ``Likes``, ``Dislikes``, ``Hates`` and ``Notes``; any other name is an input-file error
  listing these (a column ``Avoid`` would otherwise be read as taste, and its items never
  kept out of the image).

* **row layout** — a header ``category,item`` with an optional third column ``notes``, one
  item per row::

      category,item,notes
      like,Misty coastal mornings,
      dislike,Clowns,any circus imagery

  Categories are normalised the same way, and an unknown one is an error likewise; an item
  with notes becomes ``"item — notes"`` (an em dash).

Sections come in the order Loves, Likes, Dislikes, Hates, Notes; empty sections are dropped;
cells are trimmed and their internal whitespace collapsed to single spaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from image_project.errors import InputFileError
from image_project.stages.concepts import read_csv_rows

KNOWN_SECTIONS: tuple[str, ...] = ("Loves", "Likes", "Dislikes", "Hates", "Notes")
_ALIASES: dict[str, str] = {}
for _name in KNOWN_SECTIONS:
    _ALIASES[_name.casefold()] = _name
    _ALIASES[_name[:-1].casefold()] = _name

_ROW_HEADER_OPTIONAL = {"note", "notes"}


@dataclass(frozen=True)
class Profile:
    """Named sections of profile items, in display order (see the module docstring)."""

    sections: tuple[tuple[str, tuple[str, ...]], ...]
    source: str = ""

    def section(self, name: str) -> tuple[str, ...]:
        """The items of section ``name`` (matched like a column name); ``()`` if absent."""
        key = _section_name(name)
        return next((items for n, items in self.sections if n == key), ())

    @property
    def loves(self) -> tuple[str, ...]:
        return self.section("Loves")

    @property
    def likes(self) -> tuple[str, ...]:
        """The ``Likes`` section only (``loves`` is separate)."""
        return self.section("Likes")

    @property
    def dislikes(self) -> tuple[str, ...]:
        """The ``Dislikes`` section only (``hates`` is separate; see :func:`avoid_list`)."""
        return self.section("Dislikes")

    @property
    def hates(self) -> tuple[str, ...]:
        return self.section("Hates")

    @property
    def notes(self) -> tuple[str, ...]:
        return self.section("Notes")

    @property
    def taste(self) -> tuple[str, ...]:
        """Every item that tells what the person enjoys: all sections but ``Dislikes`` and
        ``Hates`` (so ``Loves``, ``Likes`` and ``Notes``)."""
        return tuple(
            item
            for name, items in self.sections
            if name not in ("Dislikes", "Hates")
            for item in items
        )


def _clean(cell: str) -> str:
    return " ".join(cell.split())


def _section_name(raw: str) -> str:
    name = _clean(raw)
    return _ALIASES.get(name.casefold(), name)


_ALLOWED = ", ".join(KNOWN_SECTIONS) + " (singular or plural, any case)"


def _known_section(p: Path, raw: str, where: str) -> str:
    """The section ``raw`` names, or an InputFileError naming ``where`` and the allowed
    names."""
    name = _section_name(raw)
    if name not in KNOWN_SECTIONS:
        raise InputFileError(
            p, f"profile {where} {_clean(raw)!r} is not a profile section; use {_ALLOWED}"
        )
    return name


def _is_row_layout(header: list[str]) -> bool:
    keys = [_clean(h).casefold() for h in header]
    while keys and not keys[-1]:
        keys.pop()
    return (
        len(keys) >= 2
        and keys[0] in ("category", "categories")
        and keys[1] in ("item", "items")
        and all(k in _ROW_HEADER_OPTIONAL for k in keys[2:])
        and len(keys) <= 3
    )


def _ordered(buckets: dict[str, list[str]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    names = [n for n in KNOWN_SECTIONS if n in buckets]
    return tuple((n, tuple(buckets[n])) for n in names if buckets[n])


def _from_columns(p: Path, header: list[str], body: list[list[str]]) -> dict[str, list[str]]:
    buckets: dict[str, list[str]] = {}
    for i, raw_name in enumerate(header):
        cells = [_clean(row[i]) for row in body if i < len(row)]
        items = [c for c in cells if c]
        if not _section_name(raw_name):
            if items:
                raise InputFileError(
                    p, f"profile column {i + 1} has values but no name in the header row"
                )
            continue
        name = _known_section(p, raw_name, f"column {i + 1}")
        buckets.setdefault(name, []).extend(items)
    width = len(header)
    for n, row in enumerate(body, start=2):
        if any(_clean(c) for c in row[width:]):
            raise InputFileError(
                p, f"profile row {n} has more cells than the header has columns ({width})"
            )
    return buckets


def _from_rows(p: Path, body: list[list[str]]) -> dict[str, list[str]]:
    buckets: dict[str, list[str]] = {}
    for n, row in enumerate(body, start=2):
        cells = [_clean(c) for c in row]
        category = cells[0] if cells else ""
        item = cells[1] if len(cells) > 1 else ""
        notes = cells[2] if len(cells) > 2 else ""
        if any(cells[3:]):
            raise InputFileError(
                p, f"profile row {n} has more than 3 cells; expected category,item[,notes]"
            )
        if not item:
            if notes:
                raise InputFileError(p, f"profile row {n} has notes but no item")
            continue
        if not category:
            raise InputFileError(p, f"profile row {n} has the item {item!r} but no category")
        buckets.setdefault(_known_section(p, category, f"row {n} category"), []).append(
            f"{item} — {notes}" if notes else item
        )
    return buckets


def load_profile(path: str | Path) -> Profile:
    """Load a profile CSV in either layout (see the module docstring).

    Raises :class:`InputFileError` naming the path for a missing file, a directory, an empty
    file, non-UTF-8 or NUL bytes, invalid CSV, a file with no usable items (a header row
    alone included), and for malformed rows (a value under a nameless column, a row-layout
    row without a category), and a column or category that names no known section.
    """
    p = Path(path)
    rows = read_csv_rows(p, what="profile file")
    header, body = rows[0], rows[1:]
    row_layout = _is_row_layout(header)
    buckets = _from_rows(p, body) if row_layout else _from_columns(p, header, body)
    sections = _ordered(buckets)
    if not sections:
        problem = "has a header row but no items below it" if not body else "has no items"
        raise InputFileError(
            p,
            f"profile {problem}; add values under columns such as Likes and Dislikes "
            "(or rows of category,item)",
        )
    return Profile(sections, source=str(p))


def render_guidance(profile: Profile) -> str:
    """The profile as prompt text: ``"<Name>:"`` then ``- item`` lines per section, sections
    separated by one blank line (no trailing newline)."""
    return "\n\n".join(
        "\n".join([f"{name}:", *(f"- {item}" for item in items)])
        for name, items in profile.sections
    )


def check_profile_size(profile: Profile, path: str | Path, max_chars: int) -> None:
    """Raise :class:`InputFileError` naming the file and ``prompt.max_profile_chars`` when
    the profile, as the text the prompts carry (:func:`render_guidance`), is longer than
    ``max_chars``: every prompt that carries it would be that long (and cost that much)."""
    size = len(render_guidance(profile))
    if size > max_chars:
        items = sum(len(items) for _, items in profile.sections)
        raise InputFileError(
            Path(path),
            f"the profile is {size:,} characters as prompt text ({items:,} items), more than "
            f"prompt.max_profile_chars ({max_chars:,}); every prompt carries it, so keep it to "
            "what matters (or raise prompt.max_profile_chars)",
        )


def avoid_list(profile: Profile) -> tuple[str, ...]:
    """Everything the images must avoid: the ``Dislikes`` items, then the ``Hates`` items."""
    return profile.dislikes + profile.hates
