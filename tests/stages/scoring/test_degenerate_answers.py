"""The gates for what a small real model writes once it has stopped saying anything, with the
answers it gave (Gemma 3 270M and Qwen2.5-Coder 0.5B on llama-server, grammar dialect) as
fixtures: a card string cut by its length limit, a few words over and over, options that
repeat or copy the hook (``card_degenerate``); prose caught in a loop (``prose_loop``);
judges keyed by card id, re-asked with their own seed, or not at all."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest

from image_project.errors import ModelOutputError
from image_project.record.gates import GATES
from image_project.record.textshape import repetition_loop
from image_project.stages.scoring.cards import check_card_shape, parse_card
from image_project.stages.scoring.judges import (
    REASK_TEMPERATURE,
    degenerate_reask_sampling,
    degenerate_reask_skip,
    judge_output,
    parse_scores,
)
from image_project.stages.standard import PROSE_OUTPUT
from tests.backends.test_offline import assert_valid


def is_valid(value: Any, schema: Mapping[str, Any]) -> bool:
    try:
        assert_valid(value, schema)
    except Exception:
        return False
    return True


GOOD: dict[str, Any] = {
    "hook": "A lighthouse keeper's last night",
    "narrative": "The keeper lights the lamp one final time while a cat watches the sea.",
    "options": {
        "composition": ["low angle from the rocks", "keeper framed in the lamp room window"],
        "palette": ["teal and burnt orange", "grey dawn"],
        "medium": ["oil on canvas"],
        "mood": ["wistful"],
    },
    "avoid": ["text"],
}

# Gemma 3 270M, grammar dialect: the narrative ran to the schema's maxLength mid-word.
TACTILE = ("The luminous, tactile, tactile, airy, tactile, " * 20)[:600].rstrip()


def card(**changes: Any) -> str:
    data = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if key in data["options"]:
            data["options"][key] = value
        else:
            data[key] = value
    return json.dumps(data)


def test_the_good_card_passes() -> None:
    assert parse_card(card()).hook == GOOD["hook"]


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"narrative": TACTILE}, "cut off at its 600-character limit"),
        ({"narrative": TACTILE}, "repeats itself"),
        ({"composition": ["sunset", "sunset", "sunset"]}, "repeats options.composition[0]"),
        (
            {
                "hook": "A lighthouse at dusk",
                **{
                    k: ["A lighthouse at dusk"] * n for k, n in (("composition", 4), ("palette", 4))
                },
            },
            "the hook again",
        ),
        ({"narrative": "the composition of the composition of the painting"}, "repetition loop"),
    ],
    ids=["cut-at-limit", "few-distinct-words", "repeated-option", "hook-copied", "loop"],
)
def test_a_degenerate_card_is_rejected_by_card_degenerate(
    changes: dict[str, Any], says: str
) -> None:
    with pytest.raises(ModelOutputError) as info:
        parse_card(card(**changes))
    assert info.value.reason == "gate:card_degenerate"
    assert says in str(info.value)


def test_a_word_as_both_composition_and_mood_is_a_choice_not_a_repeat() -> None:
    assert not check_card_shape(
        parse_card(card(composition=["baroque", "low angle"], mood=["baroque"]))
    )
    everywhere = card(
        composition=["baroque", "low angle"],
        palette=["baroque", "teal"],
        medium=["baroque"],
        mood=["baroque"],
    )
    with pytest.raises(ModelOutputError, match=r"repeats options\.composition"):
        parse_card(everywhere)


def test_the_new_gates_are_counted() -> None:
    assert {"card_degenerate", "prose_loop"} <= set(GATES)


@pytest.mark.parametrize(
    "text",
    [
        "A still life: the composition of the composition of the painting, in oil.",
        "Mood: tactile, tactile, tactile, tactile light over the bay.",
    ],
)
def test_prose_caught_in_a_loop_is_rejected_by_prose_loop(text: str) -> None:
    assert repetition_loop(text) is not None
    with pytest.raises(ModelOutputError) as info:
        PROSE_OUTPUT.parse(text)
    assert info.value.reason == "gate:prose_loop"


@pytest.mark.parametrize(
    "text",
    [
        "A very, very quiet harbour at dawn; gulls, gulls and the first light on the water.",
        "Subject: a cat. Setting: a cat's favourite sill. Palette: teal, orange, teal accents.",
    ],
)
def test_ordinary_prose_is_no_loop(text: str) -> None:
    assert repetition_loop(text) is None
    assert PROSE_OUTPUT.parse(text) == text


# -- judges ------------------------------------------------------------------------------

IDS = ("C", "A", "B")


def test_an_answer_scoring_one_card_three_times_cannot_pass_the_keyed_schema() -> None:
    """A list of ``{"id": <enum>}`` items let a grammar write ``C`` three times; keyed by id,
    every id is a required property, so the schema itself refuses it."""
    schema = judge_output(IDS).schema.schema
    three_c = {"scores": [{"id": "C", "score": s} for s in (75, 85, 90)]}
    assert not is_valid(three_c, schema)
    assert_valid({"scores": {"C": 75, "A": 85, "B": 90}}, schema)
    with pytest.raises(ValueError, match="scored twice"):
        parse_scores(json.dumps(three_c), IDS)


def _degenerate(scores: dict[str, int]) -> ModelOutputError:
    with pytest.raises(ModelOutputError) as info:
        parse_scores(json.dumps({"scores": scores}), IDS)
    assert info.value.reason == "gate:judge_degenerate"
    return info.value


def test_an_all_equal_judge_is_not_reasked() -> None:
    why = degenerate_reask_skip(_degenerate({"C": 0, "A": 0, "B": 0}))
    assert why is not None and why.startswith("not re-asked")


def test_a_judge_scoring_by_position_is_reasked_with_its_own_seed_and_a_small_temperature() -> None:
    exc = _degenerate({"C": 1, "A": 2, "B": 3})
    assert degenerate_reask_skip(exc) is None
    resample = degenerate_reask_sampling(1234, 0.0)
    first, second = resample(exc, 1), resample(exc, 2)
    assert first is not None and second is not None
    assert first[0] not in (1234, second[0])
    assert first[1] == second[1] == REASK_TEMPERATURE == 0.3
    hot = degenerate_reask_sampling(1234, 0.7)(exc, 1)
    assert hot is not None and hot[1] == 0.7  # at least 0.3: a warmer judge keeps its own
    assert resample(ValueError("malformed"), 1) is None  # other errors: the step's own
