"""Idea cards: strict parsing of one card per answer, the answer schema generated from the
card model, code-assigned ids, and the seeded diversity directions of the generators."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from image_project.engine.output import strict_json_schema
from image_project.record.scoring import CandidateRecord, CardOptions, IdeaCard
from image_project.seeding import derive_seed
from image_project.stages.scoring.cards import (
    CARD_OUTPUT,
    DIRECTIONS,
    card_ids,
    directions_for,
    parse_card,
)
from tests.stages.scoring.schema_checks import array_bounds, assert_strict, field_length_bounds

GOOD: dict[str, Any] = {
    "hook": "  A lighthouse keeper's last night  ",
    "narrative": " The keeper lights the lamp one final time. ",
    "options": {
        "composition": [" low horizon ", "figure off-centre"],
        "palette": ["warm lamplight", "cold sea"],
        "medium": ["oil on canvas"],
        "mood": ["wistful"],
    },
    "avoid": ["text", " logos "],
}


def _card(mutate: Callable[[dict[str, Any]], object] | None = None) -> str:
    data = copy.deepcopy(GOOD)
    if mutate is not None:
        mutate(data)
    return json.dumps(data)


# -- parse_card: accepted --------------------------------------------------------------


def test_valid_card_parses_with_strings_stripped() -> None:
    card = parse_card(_card())
    assert card.hook == "A lighthouse keeper's last night"
    assert card.narrative == "The keeper lights the lamp one final time."
    assert card.options.composition == ["low horizon", "figure off-centre"]
    assert card.options.palette == ["warm lamplight", "cold sea"]
    assert card.options.medium == ["oil on canvas"]
    assert card.options.mood == ["wistful"]
    assert card.avoid == ["text", "logos"]


def test_avoid_may_be_omitted() -> None:
    card = parse_card(_card(lambda d: d.pop("avoid")))
    assert card.avoid == []
    assert card.hook == "A lighthouse keeper's last night"


def test_surrounding_whitespace_is_accepted() -> None:
    assert parse_card("\n\n  " + _card() + "  \n").options.mood == ["wistful"]


@pytest.mark.parametrize("tag", ["json", ""])
def test_single_code_fence_is_accepted(tag: str) -> None:
    card = parse_card(f"```{tag}\n{_card()}\n```")
    assert card.options.palette == ["warm lamplight", "cold sea"]


def test_code_fence_with_crlf_line_endings_is_accepted() -> None:
    card = parse_card("```json\r\n" + _card() + "\r\n```")
    assert card.options.palette == ["warm lamplight", "cold sea"]


# -- parse_card: rejected --------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("hook"), "hook"),
        (lambda d: d.pop("narrative"), "narrative"),
        (lambda d: d.pop("options"), "options"),
        (lambda d: d["options"].pop("palette"), "options.palette"),
        (lambda d: d["options"].pop("composition"), "options.composition"),
    ],
)
def test_missing_field_is_named(mutate: Callable[[dict[str, Any]], object], field: str) -> None:
    with pytest.raises(ValueError, match="invalid idea card") as info:
        parse_card(_card(mutate))
    assert f"{field}: required key is missing" in str(info.value)


@pytest.mark.parametrize("field", ["composition", "palette"])
@pytest.mark.parametrize("items", [[], ["only one"]])
def test_composition_and_palette_need_two_items(field: str, items: list[str]) -> None:
    with pytest.raises(ValueError, match=f"options\\.{field}: List should have at least 2"):
        parse_card(_card(lambda d: d["options"].__setitem__(field, items)))


@pytest.mark.parametrize("field", ["medium", "mood"])
def test_medium_and_mood_must_not_be_empty(field: str) -> None:
    with pytest.raises(ValueError, match=f"options\\.{field}: List should have at least 1"):
        parse_card(_card(lambda d: d["options"].__setitem__(field, [])))


@pytest.mark.parametrize("field", ["medium", "mood"])
@pytest.mark.parametrize("blank", ["", "   "])
def test_medium_and_mood_items_must_not_be_blank(field: str, blank: str) -> None:
    with pytest.raises(ValueError, match=f"options\\.{field}\\.0: String should have at least 1"):
        parse_card(_card(lambda d: d["options"].__setitem__(field, [blank])))


@pytest.mark.parametrize("field", ["hook", "narrative"])
def test_blank_text_is_rejected(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field}: String should have at least 1"):
        parse_card(_card(lambda d: d.__setitem__(field, "  ")))


@pytest.mark.parametrize(
    ("mutate", "loc"),
    [
        (lambda d: d.__setitem__("id_x", "A"), "(top level)"),
        (lambda d: d.__setitem__("title_x", "x"), "(top level)"),
        (lambda d: d["options"].__setitem__("lighting_x", ["soft"]), "options"),
    ],
)
def test_extra_keys_are_rejected_without_naming_them(
    mutate: Callable[[dict[str, Any]], object], loc: str
) -> None:
    with pytest.raises(ValueError) as info:
        parse_card(_card(mutate))
    assert f"{loc}: a key that is not in the schema (not allowed)" in str(info.value)
    assert "_x" not in str(info.value)


@pytest.mark.parametrize(
    ("mutate", "loc"),
    [
        (lambda d: d["options"]["composition"].__setitem__(1, 1), "options.composition.1"),
        (lambda d: d["options"]["palette"].__setitem__(0, None), "options.palette.0"),
        (lambda d: d["options"]["medium"].__setitem__(0, True), "options.medium.0"),
        (lambda d: d.__setitem__("avoid", [1]), "avoid.0"),
        (lambda d: d.__setitem__("hook", 7), "hook"),
        (lambda d: d["options"].__setitem__("mood", "wistful"), "options.mood"),
    ],
)
def test_non_string_items_are_rejected(
    mutate: Callable[[dict[str, Any]], object], loc: str
) -> None:
    with pytest.raises(ValueError) as info:
        parse_card(_card(mutate))
    assert str(info.value).startswith(f"invalid idea card: {loc}: ")


@pytest.mark.parametrize(
    ("text", "extra", "where"),
    [
        ("Here is my card: " + _card(), "Here is my card:", "before"),
        (_card() + "\nI hope you like it!", "I hope you like it!", "after"),
        ("Sure.\n```json\n" + _card() + "\n```", "Sure.", "before"),
    ],
)
def test_prose_around_the_json_is_rejected(text: str, extra: str, where: str) -> None:
    with pytest.raises(ValueError, match="ONLY the JSON object") as info:
        parse_card(text)
    assert f"found text {where} the object" in str(info.value)
    assert extra not in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"hook": "a",}', "the answer is not valid JSON"),
        ("{hook: 'a'}", "the answer is not valid JSON"),
        ("{}}", "the answer is not valid JSON"),
        ('{"hook": "a"', "expected a JSON object, found no {...}"),
        ("no json here", "expected a JSON object, found no {...}"),
    ],
)
def test_invalid_json_is_rejected(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_card(text)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("text", ["[" + _card() + "]", "[1, 2]", '"a card"', "42"])
def test_top_level_non_object_is_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_card(text)


@pytest.mark.parametrize("text", ["", "   \n", "```json\n\n```"])
def test_empty_answer_is_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        parse_card(text)


def test_duplicate_keys_are_rejected() -> None:
    text = _card().replace('"hook":', '"hook": "first", "hook":', 1)
    assert text.count('"hook"') == 2
    with pytest.raises(ValueError, match=r"a key appears twice .*\(duplicate keys\)"):
        parse_card(text)


def test_duplicate_nested_keys_are_rejected() -> None:
    text = _card().replace('"medium":', '"medium": ["x"], "medium":', 1)
    with pytest.raises(ValueError, match=r"\(duplicate keys\)"):
        parse_card(text)


# -- the answer schema comes from the model ---------------------------------------------

OPTION_BOUNDS = {"composition": (2, 4), "palette": (2, 4), "medium": (1, 3), "mood": (1, 3)}
AVOID_BOUNDS = (0, 4)


def test_card_schema_is_generated_from_the_idea_card_model() -> None:
    js = CARD_OUTPUT.schema
    assert CARD_OUTPUT.model is IdeaCard
    assert js == strict_json_schema(IdeaCard)
    assert (js.name, js.strict) == ("idea_card", True)
    schema = js.schema
    assert_strict(schema)
    assert schema["required"] == ["hook", "narrative", "options", "avoid"]
    assert schema["properties"]["hook"] == schema["properties"]["narrative"] == {"type": "string"}
    options = schema["properties"]["options"]
    assert options["required"] == list(OPTION_BOUNDS)
    for name, bounds in OPTION_BOUNDS.items():
        node = options["properties"][name]
        assert node["items"] == {"type": "string"}
        assert array_bounds(node) == bounds == field_length_bounds(CardOptions, name), name
    avoid = schema["properties"]["avoid"]
    assert array_bounds(avoid) == AVOID_BOUNDS == field_length_bounds(IdeaCard, "avoid")


@pytest.mark.parametrize("field", list(OPTION_BOUNDS))
def test_option_bounds_of_the_schema_are_what_the_parser_enforces(field: str) -> None:
    low, high = OPTION_BOUNDS[field]
    distinct = [f"{field} choice {i}" for i in range(high)]  # the same option twice is a gate
    at_max = parse_card(_card(lambda d: d["options"].__setitem__(field, distinct)))
    assert len(getattr(at_max.options, field)) == high
    at_min = parse_card(_card(lambda d: d["options"].__setitem__(field, distinct[:low])))
    assert len(getattr(at_min.options, field)) == low
    with pytest.raises(ValueError, match=f"options\\.{field}: List should have at most {high}"):
        parse_card(_card(lambda d: d["options"].__setitem__(field, ["x"] * (high + 1))))


def test_avoid_bounds_of_the_schema_are_what_the_parser_enforces() -> None:
    low, high = AVOID_BOUNDS
    assert len(parse_card(_card(lambda d: d.__setitem__("avoid", ["x"] * high))).avoid) == high
    assert len(parse_card(_card(lambda d: d.__setitem__("avoid", ["x"] * low))).avoid) == low
    with pytest.raises(ValueError, match=f"avoid: List should have at most {high}"):
        parse_card(_card(lambda d: d.__setitem__("avoid", ["x"] * (high + 1))))


def test_idea_card_rejects_five_composition_items() -> None:
    # The model used to allow 6 while the schema asked for at most 4.
    data = copy.deepcopy(GOOD)
    data["options"]["composition"] = ["a", "b", "c", "d", "e"]
    with pytest.raises(ValidationError, match="at most 4"):
        IdeaCard.model_validate(data)
    data["options"]["composition"] = ["a", "b", "c", "d"]
    assert IdeaCard.model_validate(data).options.composition == ["a", "b", "c", "d"]


# -- card_ids --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, ()),
        (1, ("A",)),
        (3, ("A", "B", "C")),
    ],
)
def test_card_ids_small(n: int, expected: tuple[str, ...]) -> None:
    assert card_ids(n) == expected


def test_card_ids_roll_over_after_z() -> None:
    ids = card_ids(52)
    assert len(ids) == 52
    assert ids[25] == "Z"
    assert card_ids(26)[-1] == "Z"
    assert card_ids(27)[-1] == "AA"
    assert ids[26:29] == ("AA", "AB", "AC")
    assert ids[-1] == "AZ"
    assert card_ids(53)[-1] == "BA"
    assert len(set(card_ids(1000))) == 1000


# -- directions_for --------------------------------------------------------------------


def test_directions_are_deterministic_for_a_seed() -> None:
    ids = card_ids(8)
    assert directions_for(1234, ids) == directions_for(1234, ids)


def test_different_seeds_give_different_assignments() -> None:
    ids = card_ids(8)
    a = [c.direction for c in directions_for(1, ids)]
    b = [c.direction for c in directions_for(2, ids)]
    assert a != b


def test_directions_are_distinct_for_48_ids() -> None:
    ids = card_ids(48)
    cands = directions_for(99, ids)
    assert len(DIRECTIONS) == 48
    assert [c.id for c in cands] == list(ids)
    assert {c.direction for c in cands} == set(DIRECTIONS)


def test_directions_cycle_beyond_48() -> None:
    cands = directions_for(5, card_ids(50))
    assert cands[48].direction == cands[0].direction
    assert cands[49].direction == cands[1].direction


@pytest.mark.parametrize("run_seed", [0, 7, 2**31 - 1])
def test_candidate_seeds_are_derived_per_id(run_seed: int) -> None:
    ids = card_ids(5)
    cands = directions_for(run_seed, ids)
    assert [c.seed for c in cands] == [derive_seed(run_seed, "step", "idea", i) for i in ids]
    assert len({c.seed for c in cands}) == 5
    assert all(isinstance(c, CandidateRecord) and c.card is None for c in cands)
    assert cands[0].model_dump() == {
        "id": "A",
        "seed": derive_seed(run_seed, "step", "idea", "A"),
        "direction": cands[0].direction,
        "card": None,
    }
