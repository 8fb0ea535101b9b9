"""Categories file loading (strict, path-naming errors) and seeded concept selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from image_project.errors import InputFileError
from image_project.stages.concepts import (
    CONCEPT_GROUPS,
    EXPECTED_COLUMNS,
    Categories,
    load_categories,
    select_concepts,
)

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "categories.csv"


def write_csv(tmp_path: Path, text: str, name: str = "categories.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def minimal_csv() -> str:
    header = ",".join(f'"{c}"' for c in EXPECTED_COLUMNS)
    row = ",".join(f'"{c} one: a, b"' for c in EXPECTED_COLUMNS)
    row2 = ",".join(f'"{c} two: c"' for c in EXPECTED_COLUMNS)
    return f"{header}\n{row}\n{row2}\n"


def test_shipped_categories_have_eight_columns_with_ten_concepts_each() -> None:
    cats = load_categories(SHIPPED)
    assert tuple(cats) == EXPECTED_COLUMNS
    for column in EXPECTED_COLUMNS:
        concepts = cats[column]
        assert len(concepts) >= 10, column
        assert len(set(concepts)) == len(concepts), column
        assert all(": " in c and c.strip() == c for c in concepts), column


def test_cells_are_trimmed_blanks_skipped_and_extra_columns_ignored(tmp_path: Path) -> None:
    header = ",".join([*EXPECTED_COLUMNS, "Extra"])
    cells = ["  Baroque: dramatic chiaroscuro  "] + ["x: y"] * 7 + ["ignored"]
    short_row = "a: b"
    path = write_csv(tmp_path, f"\ufeff{header}\n{','.join(cells)}\n{short_row}\n\n")
    cats = load_categories(path)
    assert "Extra" not in cats.columns
    assert cats["Subject Matter"] == ("Baroque: dramatic chiaroscuro", "a: b")
    assert cats["Narrative"] == ("x: y",)
    assert cats.source == str(path)


def test_header_names_match_case_insensitively_after_trimming(tmp_path: Path) -> None:
    header = ",".join(f" {c.upper()} " for c in EXPECTED_COLUMNS)
    path = write_csv(tmp_path, header + "\n" + ",".join(["v: w"] * 8) + "\n")
    assert tuple(load_categories(path)) == EXPECTED_COLUMNS


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    with pytest.raises(InputFileError, match="not found") as info:
        load_categories(path)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="directory") as info:
        load_categories(tmp_path)
    assert str(tmp_path) in str(info.value)


@pytest.mark.parametrize("text", ["", "   \n\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    path = write_csv(tmp_path, text)
    with pytest.raises(InputFileError, match="empty") as info:
        load_categories(path)
    assert str(path) in str(info.value)


def test_non_utf8_bytes(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(minimal_csv().encode("utf-8") + "Café: crème\n".encode("latin-1"))
    with pytest.raises(InputFileError, match="UTF-8") as info:
        load_categories(path)
    assert str(path) in str(info.value)
    assert "0xe9" in str(info.value)


def test_wrong_header_names_missing_and_found_columns(tmp_path: Path) -> None:
    header = "Subject,Narrative,Mood,Composition,Perspective,Style,Era,Color Scheme"
    path = write_csv(tmp_path, header + "\n" + ",".join(["v: w"] * 8) + "\n")
    with pytest.raises(InputFileError) as info:
        load_categories(path)
    message = str(info.value)
    assert str(path) in message
    assert "missing" in message
    assert "'Subject Matter'" in message and "'Time Period_Context'" in message
    assert "found 'Subject'" in message and "'Era'" in message


def test_duplicate_expected_column_is_an_error(tmp_path: Path) -> None:
    header = ",".join([*EXPECTED_COLUMNS, "Mood"])
    path = write_csv(tmp_path, header + "\n" + ",".join(["v: w"] * 9) + "\n")
    with pytest.raises(InputFileError, match="'Mood' appears more than once"):
        load_categories(path)


def test_group_without_concepts_is_an_error(tmp_path: Path) -> None:
    header = ",".join(EXPECTED_COLUMNS)
    # Style, Time Period_Context and Color Scheme (group 3) are all blank.
    row = ",".join(["v: w"] * 5 + ["", " ", ""])
    path = write_csv(tmp_path, f"{header}\n{row}\n")
    with pytest.raises(InputFileError, match="group 3") as info:
        load_categories(path)
    assert str(path) in str(info.value)


def test_header_only_file_is_an_error(tmp_path: Path) -> None:
    path = write_csv(tmp_path, ",".join(EXPECTED_COLUMNS) + "\n")
    with pytest.raises(InputFileError, match="header row but no data rows"):
        load_categories(path)


def test_selection_takes_one_concept_per_group_from_its_columns() -> None:
    cats = load_categories(SHIPPED)
    for seed in range(50):
        chosen = select_concepts(cats, seed)
        assert len(chosen) == len(CONCEPT_GROUPS) == 3
        for concept, group in zip(chosen, CONCEPT_GROUPS, strict=True):
            assert any(concept in cats[column] for column in group)


def test_selection_is_deterministic_per_seed_and_varies_across_seeds() -> None:
    cats = load_categories(SHIPPED)
    assert select_concepts(cats, 1234) == select_concepts(cats, 1234)
    assert len({select_concepts(cats, seed) for seed in range(20)}) > 10


def test_selection_draws_from_every_column_of_a_group() -> None:
    cats = Categories({c: (f"{c}: only",) for c in EXPECTED_COLUMNS})
    seen = {select_concepts(cats, seed)[1] for seed in range(200)}
    assert seen == {"Mood: only", "Composition: only", "Perspective: only"}


def test_selection_with_a_group_pooled_from_one_column(tmp_path: Path) -> None:
    header = ",".join(EXPECTED_COLUMNS)
    row = ",".join(["a: 1", "", "b: 2", "", "", "", "", "c: 3"])
    cats = load_categories(write_csv(tmp_path, f"{header}\n{row}\n"))
    assert select_concepts(cats, 7) == ("a: 1", "b: 2", "c: 3")
