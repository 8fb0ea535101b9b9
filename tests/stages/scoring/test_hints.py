"""Generator-safe profile hints: the code check (no colour words, no 3-gram copied from the
likes), the hints parser used by the abstraction step, and its schema generated from the
hints model."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from image_project.engine.output import strict_json_schema
from image_project.stages.scoring.hints import (
    ProfileHints,
    check_hints,
    content_tokens,
    hints_output,
    parse_hints,
    render_hints,
    tokens,
)
from tests.stages.scoring.schema_checks import array_bounds, assert_strict, field_length_bounds

LIKES = ["Misty coastal landscapes at dawn", "Teal cats sleeping on windowsills"]

# -- tokenizer -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("goldsmith", ["goldsmith"]),
        ("burnt-orange", ["burnt", "orange"]),
        ("Misty, coastal \u2014 landscapes!", ["misty", "coastal", "landscapes"]),
        ("Don't", ["dont"]),
        ("Don\u2019t", ["dont"]),
        ("R2D2 42", ["r", "d"]),
    ],
)
def test_tokens(text: str, expected: list[str]) -> None:
    assert tokens(text) == expected


def test_content_tokens_drop_stopwords() -> None:
    assert content_tokens("The misty and the coastal landscapes at dawn") == [
        "misty",
        "coastal",
        "landscapes",
        "dawn",
    ]


# -- check_hints: colours --------------------------------------------------------------


@pytest.mark.parametrize(
    ("phrase", "colour"),
    [
        ("golden", "golden"),
        ("Teal", "teal"),
        ("reddish", "reddish"),
        ("burnt-orange", "orange"),
        ("softly GREY skies", "grey"),
        ("a Crimson, brooding mood", "crimson"),
    ],
)
def test_colour_words_are_rejected(phrase: str, colour: str) -> None:
    assert check_hints([phrase], []) == [f"hint 1 names a colour ({colour})"]


def test_several_colours_in_one_phrase_are_listed_sorted() -> None:
    assert check_hints(["red and blue"], []) == ["hint 1 names a colour (blue, red)"]


@pytest.mark.parametrize(
    "phrase",
    ["redolent", "goldsmith", "bluest", "orangery", "tealight", "quiet", "tactile"],
)
def test_colour_words_match_whole_words_only(phrase: str) -> None:
    assert check_hints([phrase], LIKES) == []


# -- check_hints: copied 3-grams -------------------------------------------------------


@pytest.mark.parametrize(
    "phrase",
    [
        "misty coastal landscapes",
        "MISTY COASTAL LANDSCAPES",
        "misty, coastal \u2014 landscapes",
        "the misty and coastal landscapes",
        "coastal landscapes at dawn",
    ],
)
def test_copied_trigram_is_rejected(phrase: str) -> None:
    problems = check_hints([phrase], LIKES)
    assert len(problems) == 1
    assert problems[0].startswith("hint 1 copies words from the likes (")


def test_copied_trigram_message_shows_the_words() -> None:
    assert check_hints(["misty, coastal \u2014 landscapes"], LIKES) == [
        "hint 1 copies words from the likes (misty coastal landscapes)"
    ]


@pytest.mark.parametrize(
    "phrase",
    [
        "misty coastal feel",
        "coastal landscapes",
        "landscapes misty coastal",
        "cats sleeping peacefully",
    ],
)
def test_two_copied_words_are_fine(phrase: str) -> None:
    assert check_hints([phrase], LIKES) == []


@pytest.mark.parametrize(
    ("phrase", "shown"),
    [
        ("sleeping on windowsills", "sleeping on windowsills"),
        ("landscapes at dawn", "landscapes at dawn"),
    ],
)
def test_a_trigram_copied_as_written_counts_even_with_a_stopword(phrase: str, shown: str) -> None:
    assert check_hints([phrase], LIKES) == [f"hint 1 copies words from the likes ({shown})"]


def test_a_two_word_like_copied_whole_is_rejected() -> None:
    likes = ["Autumn forests", "Foxes", "Rain on windows"]
    assert check_hints(["autumn forests"], likes) == [
        "hint 1 copies words from the likes (autumn forests)"
    ]
    # One-word items are broad adjectives; a two-word item's words apart are fine.
    assert check_hints(["foxes", "autumn calm", "forests of feeling"], likes) == []
    assert len(check_hints(["rain on windows"], likes)) == 1


def test_trigram_must_be_within_one_like_item() -> None:
    likes = ["quiet harbour dawn", "sleeping cats indoors"]
    # "dawn sleeping cats" would only match if the likes were run together
    assert check_hints(["dawn sleeping cats"], likes) == []
    assert len(check_hints(["sleeping cats indoors"], likes)) == 1


def test_safe_hints_give_no_problems() -> None:
    phrases = ["quiet", "tactile", "atmospheric", "gently nostalgic", "no gore"]
    assert check_hints(phrases, LIKES) == []


def test_both_violations_are_reported() -> None:
    assert check_hints(["misty coastal landscapes in gold", "calm"], LIKES) == [
        "hint 1 names a colour (gold)",
        "hint 1 copies words from the likes (misty coastal landscapes)",
    ]


def test_no_likes_only_colours_matter() -> None:
    assert check_hints(["misty coastal landscapes"], []) == []


# -- parse_hints -----------------------------------------------------------------------


def _parser() -> Callable[[str], ProfileHints]:
    parse = parse_hints(LIKES)
    assert callable(parse)
    return parse


def test_parse_hints_valid() -> None:
    text = json.dumps({"adjectives": [" quiet ", "tactile", "airy"], "avoid": ["no gore"]})
    hints = _parser()(text)
    assert isinstance(hints, ProfileHints)
    assert hints.adjectives == ["quiet", "tactile", "airy"]
    assert hints.avoid == ["no gore"]
    assert hints.phrases() == ("quiet", "tactile", "airy", "no gore")
    assert render_hints(hints) == "Feel: quiet, tactile, airy\nAvoid: no gore"


def test_parse_hints_avoid_optional() -> None:
    hints = _parser()(json.dumps({"adjectives": ["quiet", "tactile", "airy"]}))
    assert hints.avoid == []
    assert render_hints(hints) == "Feel: quiet, tactile, airy"


@pytest.mark.parametrize("adjectives", [[], ["quiet"], ["quiet", "tactile"]])
def test_parse_hints_too_few_adjectives(adjectives: list[str]) -> None:
    with pytest.raises(ValueError, match="invalid hints: adjectives: List should have at least 3"):
        _parser()(json.dumps({"adjectives": adjectives, "avoid": []}))


def test_parse_hints_extra_key() -> None:
    text = json.dumps({"adjectives": ["a", "b", "c"], "avoid": [], "likes": ["x"]})
    with pytest.raises(ValueError, match=r"\(top level\): a key that is not in the schema"):
        _parser()(text)


def test_parse_hints_colour_in_avoid() -> None:
    text = json.dumps({"adjectives": ["quiet", "tactile", "airy"], "avoid": ["no crimson skies"]})
    with pytest.raises(ValueError) as info:
        _parser()(text)
    message = str(info.value)
    assert message.startswith("the hints must be broad and must not reveal the likes: ")
    assert "avoid[0] names a colour (crimson)" in message
    assert "no crimson skies" not in message


def test_parse_hints_lists_every_violation() -> None:
    text = json.dumps(
        {"adjectives": ["golden", "misty coastal landscapes", "airy"], "avoid": ["no teal"]}
    )
    with pytest.raises(ValueError) as info:
        _parser()(text)
    message = str(info.value)
    assert "adjectives[0] names a colour (golden)" in message
    assert "adjectives[1] copies words from the likes" in message
    assert "avoid[0] names a colour (teal)" in message
    assert "no teal" not in message


def test_parse_hints_rejects_prose() -> None:
    with pytest.raises(ValueError, match="ONLY the JSON object"):
        _parser()('Sure! {"adjectives": ["a", "b", "c"], "avoid": []}')


# -- the answer schema comes from the model ---------------------------------------------

HINT_BOUNDS = {"adjectives": (3, 8), "avoid": (0, 6)}
SAFE_WORDS = ["quiet", "tactile", "airy", "calm", "soft", "spare", "still", "gentle", "warm"]


def test_hints_schema_is_generated_from_the_hints_model() -> None:
    output = hints_output(LIKES)
    js = output.schema
    assert output.model is ProfileHints
    assert js == strict_json_schema(ProfileHints)
    assert (js.name, js.strict) == ("generator_profile_hints", True)
    schema = js.schema
    assert_strict(schema)
    assert schema["required"] == list(HINT_BOUNDS)
    for name, bounds in HINT_BOUNDS.items():
        node = schema["properties"][name]
        assert node["items"] == {"type": "string"}
        assert array_bounds(node) == bounds == field_length_bounds(ProfileHints, name), name


@pytest.mark.parametrize("field", list(HINT_BOUNDS))
def test_hint_bounds_of_the_schema_are_what_the_parser_enforces(field: str) -> None:
    low, high = HINT_BOUNDS[field]
    base = {"adjectives": ["luminous", "weathered", "serene"], "avoid": []}  # no avoid overlap
    at_max = _parser()(json.dumps({**base, field: SAFE_WORDS[:high]}))
    assert len(getattr(at_max, field)) == high
    at_min = _parser()(json.dumps({**base, field: SAFE_WORDS[:low]}))
    assert len(getattr(at_min, field)) == low
    with pytest.raises(ValueError, match=f"{field}: List should have at most {high}"):
        _parser()(json.dumps({**base, field: SAFE_WORDS[: high + 1]}))
