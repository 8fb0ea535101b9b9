"""Profile loading in both layouts, guidance rendering, the avoid list and error cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from image_project.errors import InputFileError
from image_project.stages.profile import Profile, avoid_list, load_profile, render_guidance

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "profile.csv"

COLUMN_LAYOUT = """\
likes,DISLIKE,Hates,note,Loves
Misty harbours,"Clowns, mimes",Gore,Prefers teal,Foxes
Lamplight,Neon,,,
,Plastic renders,,,
"""

ROW_LAYOUT = """\
Category,Item,Notes
love,Foxes,
Likes,Misty harbours,
LIKE,Lamplight,
dislike,Clowns,mimes
dislikes,Neon,
dislike,Plastic renders,
Hate,Gore,
NOTES,Prefers teal,
"""

EXPECTED_SECTIONS = (
    ("Loves", ("Foxes",)),
    ("Likes", ("Misty harbours", "Lamplight")),
    ("Dislikes", ("Clowns — mimes", "Neon", "Plastic renders")),
    ("Hates", ("Gore",)),
    ("Notes", ("Prefers teal",)),
)


def write(tmp_path: Path, text: str, name: str = "profile.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_row_layout_buckets_categories_and_joins_notes(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, ROW_LAYOUT))
    assert profile.sections == EXPECTED_SECTIONS


def test_column_layout_normalises_names_and_orders_sections(tmp_path: Path) -> None:
    text = COLUMN_LAYOUT.replace('"Clowns, mimes"', '"Clowns — mimes"')
    profile = load_profile(write(tmp_path, text))
    assert profile.sections == EXPECTED_SECTIONS


def test_both_layouts_give_the_same_profile(tmp_path: Path) -> None:
    rows = load_profile(write(tmp_path, ROW_LAYOUT, "rows.csv"))
    cols = load_profile(
        write(tmp_path, COLUMN_LAYOUT.replace('"Clowns, mimes"', '"Clowns — mimes"'), "c.csv")
    )
    assert rows.sections == cols.sections
    assert render_guidance(rows) == render_guidance(cols)


def test_properties_and_avoid_list(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, ROW_LAYOUT))
    assert profile.loves == ("Foxes",)
    assert profile.likes == ("Misty harbours", "Lamplight")
    assert profile.dislikes == ("Clowns — mimes", "Neon", "Plastic renders")
    assert profile.hates == ("Gore",)
    assert profile.notes == ("Prefers teal",)
    assert profile.section("note") == ("Prefers teal",)
    assert avoid_list(profile) == ("Clowns — mimes", "Neon", "Plastic renders", "Gore")
    # taste: everything that is not an avoid item
    assert profile.taste == ("Foxes", "Misty harbours", "Lamplight", "Prefers teal")


def test_render_guidance_format() -> None:
    profile = Profile((("Likes", ("a", "b")), ("Dislikes", ("c",))))
    assert render_guidance(profile) == "Likes:\n- a\n- b\n\nDislikes:\n- c"


def test_shipped_profile_is_a_column_layout_with_likes_and_dislikes() -> None:
    profile = load_profile(SHIPPED)
    assert [name for name, _ in profile.sections] == ["Likes", "Dislikes"]
    assert 8 <= len(profile.likes) <= 12
    assert 8 <= len(profile.dislikes) <= 12
    assert avoid_list(profile) == profile.dislikes
    guidance = render_guidance(profile)
    assert guidance.startswith("Likes:\n- ")
    assert "\n\nDislikes:\n- " in guidance


def test_cells_are_cleaned_and_blank_cells_dropped(tmp_path: Path) -> None:
    text = 'Likes,Dislikes\n"  soft\n  light ",\n,\n , x \n'
    profile = load_profile(write(tmp_path, text))
    assert profile.sections == (("Likes", ("soft light",)), ("Dislikes", ("x",)))


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.csv"
    with pytest.raises(InputFileError, match="not found") as info:
        load_profile(path)
    assert str(path) in str(info.value)


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="directory"):
        load_profile(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    with pytest.raises(InputFileError, match="empty") as info:
        load_profile(path)
    assert str(path) in str(info.value)


def test_non_utf8_bytes(tmp_path: Path) -> None:
    path = tmp_path / "profile.csv"
    path.write_bytes(b"Likes,Dislikes\n" + "Crème brûlée,Noise\n".encode("cp1252"))
    with pytest.raises(InputFileError, match="UTF-8") as info:
        load_profile(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "text",
    ["Likes,Dislikes\n", "Likes,Dislikes\n,\n , \n", "category,item,notes\nlike,,\n"],
)
def test_no_usable_items(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputFileError, match="no items") as info:
        load_profile(path)
    assert str(path) in str(info.value)


def test_row_layout_item_without_category_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "category,item\nlike,Fog\n,Orphan\n")
    with pytest.raises(InputFileError, match="row 3 has the item 'Orphan' but no category"):
        load_profile(path)


def test_value_under_a_nameless_column_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "Likes,\nFog,stray\n")
    with pytest.raises(InputFileError, match="column 2 has values but no name"):
        load_profile(path)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("Likes,Avoid\nFoxes,Clowns\n", "column 2 'Avoid'"),
        ("Likes,Dislikes,Colour Notes\nFoxes,Clowns,teal\n", "column 3 'Colour Notes'"),
        ("category,item\nlike,Foxes\navoid,Clowns\n", "row 3 category 'avoid'"),
    ],
)
def test_unknown_section_names_are_rejected_with_the_allowed_names(
    tmp_path: Path, text: str, where: str
) -> None:
    """``Likes,Avoid`` used to load with ``Avoid`` read as taste (its items never kept out
    of the image)."""
    path = write(tmp_path, text)
    with pytest.raises(InputFileError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message and where in message
    assert "Loves, Likes, Dislikes, Hates, Notes" in message
