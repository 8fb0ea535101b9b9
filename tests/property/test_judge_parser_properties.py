"""Property tests of the strict-JSON answer parsers (judge scores, idea cards, profile hints).

The contract under test: whatever a model writes, a parser returns a valid value or rejects
the answer in one of two documented ways:

* a plain ``ValueError`` with a short message: the engine's re-ask signal, which the runner
  turns into a :class:`ModelOutputError` once the step's re-asks (``ReaskPolicy.max``) are
  used up (so no subclass such as ``UnicodeError`` or ``json.JSONDecodeError`` may leak, and
  the message must fit in the re-ask);
* a :class:`ModelOutputError` (a :class:`RefusalError` for a refusal) whose
  ``output_preview`` is at most 200 characters.

Anything else (``RecursionError``, ``TypeError``, ``KeyError``, ...) is a crash. The last
property runs the judge's answer through the real runner to check the end-to-end form: a
valid result or a ``ModelOutputError``, nothing else.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep
from image_project.engine.output import ReaskPolicy, extract_json_object, looks_like_refusal
from image_project.engine.runner import ChatRunner
from image_project.errors import PREVIEW_CHARS, ModelOutputError, RefusalError
from image_project.record.scoring import IdeaCard
from image_project.stages.scoring.cards import (
    CARD_OUTPUT,
    card_ids,
    check_card_fields,
    check_card_shape,
    parse_card,
)
from image_project.stages.scoring.hints import parse_hints
from image_project.stages.scoring.judges import (
    SCORE_MAX,
    SCORE_MIN,
    degeneracy,
    judge_output,
    parse_scores,
)
from image_project.testing import FunctionTextBackend

T = TypeVar("T")

MAX_MESSAGE_CHARS = 1000
"""A rejection message must stay readable inside the re-ask (the runner cuts at 2000)."""

LIKES = ["Misty coastal landscapes at dawn", "Teal cats sleeping on windowsills"]
IDS = card_ids(6)


def _rejects_cleanly(parse: Callable[[str], T], text: str) -> T | None:
    """``parse(text)``, or None when it rejected the answer in a documented way."""
    try:
        return parse(text)
    except ModelOutputError as exc:
        assert len(exc.output_preview) <= PREVIEW_CHARS
    except ValueError as exc:
        assert type(exc) is ValueError, f"{type(exc).__name__} leaked: {exc}"
        assert 0 < len(str(exc)) <= MAX_MESSAGE_CHARS, str(exc)[:300]
    return None


PARSERS: dict[str, Callable[[str], object]] = {
    "extract_json_object": extract_json_object,
    "parse_scores": partial(parse_scores, ids=IDS),
    "parse_scores_one_id": partial(parse_scores, ids=("A",)),
    "parse_card": parse_card,
    "parse_hints": parse_hints(LIKES),
}


def _check_all_parsers(text: str) -> None:
    assert isinstance(looks_like_refusal(text), bool)
    for parse in PARSERS.values():
        _rejects_cleanly(parse, text)


# -- strategies -------------------------------------------------------------------------

# Pieces of JSON, fences and refusals, so that joined runs look like near-miss answers.
_TOKENS = [
    "{", "}", "[", "]", '"', ":", ",", " ", "\n", "\\", "\\u", "d800", "0", "1", "-", ".",
    "e", "E+999", "9" * 30, "NaN", "Infinity", "-Infinity", "true", "null", "```", "```json\n",
    '"scores"', '"id"', '"score"', '"A"', '"B"', '"hook"', '"options"', '"adjectives"',
    "I'm sorry", "As an AI", "\x00", "\u2028", "\ufeff", "\U0001f600",
]  # fmt: skip

near_json = st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join)


def _nested(depth: int, opener: str, closer: str, inner: str = "1") -> str:
    return opener * depth + inner + closer * depth


deeply_nested = st.one_of(
    st.integers(1, 50_000).map(lambda n: _nested(n, "[", "]")),
    st.integers(1, 50_000).map(lambda n: _nested(n, '{"a":', "}")),
    st.integers(1, 50_000).map(lambda n: '{"scores": ' + _nested(n, "[", "]", "") + "}"),
    st.integers(1, 50_000).map(lambda n: '{"hook": ' + _nested(n, '{"a":', "}") + "}"),
)

huge_numbers = st.one_of(
    st.integers(1, 20_000).map(lambda n: '{"scores": [{"id": "A", "score": ' + "9" * n + "}]}"),
    st.integers(1, 20_000).map(lambda n: '{"a": 1' + "0" * n + "}"),
    st.integers(1, 2_000).map(lambda n: '{"scores": [{"id": "A", "score": 1e' + "9" * n + "}]}"),
    st.integers().map(lambda n: json.dumps({"scores": [{"id": "A", "score": n}]})),
)

any_text = st.one_of(
    st.text(),
    st.text(st.characters(codec="utf-8")),
    st.text(st.characters(max_codepoint=0x1F)),
    near_json,
    deeply_nested,
    huge_numbers,
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(SCORE_MIN - 2, SCORE_MAX + 2),
    st.floats(),
    st.text(max_size=30),
    st.sampled_from(["A", "B", "scores", "id", "score"]),
)
_KEYS = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["scores", "id", "score", "hook", "narrative", "options", "avoid"]),
    st.sampled_from(["composition", "palette", "medium", "mood", "adjectives"]),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(_KEYS, children, max_size=5),
    max_leaves=25,
)
score_shaped = st.fixed_dictionaries(
    {
        "scores": st.lists(
            st.fixed_dictionaries(
                {"id": st.sampled_from(IDS) | json_values, "score": json_scalars},
                optional={"why": json_values},
            ),
            max_size=8,
        )
    },
    optional={"note": json_values},
)
card_shaped = st.fixed_dictionaries(
    {
        "hook": json_values,
        "narrative": json_values,
        "options": st.dictionaries(_KEYS, st.lists(json_values, max_size=7), max_size=5),
    },
    optional={"avoid": json_values},
)

_WRAPPERS: list[tuple[str, str]] = [
    ("", ""),
    ("  \n", "\n "),
    ("```json\n", "\n```"),
    ("```\n", "\n```"),
    ("```JSON \r\n", "\r\n  ```"),
    ("Here are the scores: ", ""),
    ("", "\nI hope this helps."),
    ("```json\n", "\n```\n```"),
    ("I'm sorry, but ", ""),
]


@st.composite
def wrapped_json(draw: st.DrawFn) -> str:
    value = draw(st.one_of(json_values, score_shaped, card_shaped))
    body = json.dumps(
        value, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans())
    )
    prefix, suffix = draw(st.sampled_from(_WRAPPERS))
    return prefix + body + suffix


# -- (a) arbitrary text ----------------------------------------------------------------


@given(any_text)
@example('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")  # regression: RecursionError
@example('{"scores": ' + "[" * 5_000 + "]" * 5_000 + "}")  # regression: RecursionError
@example('{"a": ' + "1" * 5_000 + "}")  # regression: Python's int digit-limit message, not ours
@example('{"scores": [{"id": "A", "score": ' + "1" * 1_000 + "}]}")  # regression: long message
@example('{"scores": [{"id": "A", "score": NaN}]}')  # NaN / Infinity are not JSON
def test_arbitrary_text_is_parsed_or_rejected_cleanly(text: str) -> None:
    _check_all_parsers(text)


@given(st.sampled_from(["", "```json\n", "```\n"]), any_text, st.sampled_from(["", "\n```"]))
def test_arbitrary_text_in_a_fence_is_parsed_or_rejected_cleanly(
    prefix: str, text: str, suffix: str
) -> None:
    _check_all_parsers(prefix + text + suffix)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"scores": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ('{"scores": [{"id": "A", "score": ' + "1" * 5_000 + "}]}", "more than 4300 digits"),
        ('{"scores": [{"id": "A", "score": NaN}]}', "NaN is not a JSON number"),
        ('{"scores": [{"id": "A", "score": -Infinity}]}', "-Infinity is not a JSON number"),
    ],
)
def test_unreadable_json_is_rejected_with_our_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as info:
        parse_scores(text, ("A",))
    assert type(info.value) is ValueError


# -- (b) arbitrary JSON values ---------------------------------------------------------


@given(wrapped_json())
@example('{"scores": [{"id": "' + "X" * 10_000 + '", "score": 1}]}')  # regression: long message
@example('{"scores": [{"id": "A", "score": "' + "9" * 10_000 + '"}]}')  # regression: long message
@example('{"' + "k" * 10_000 + '": 1}')  # regression: long message from an unexpected key
def test_arbitrary_json_is_parsed_or_rejected_cleanly(text: str) -> None:
    _check_all_parsers(text)


# -- (c) valid answers parse back exactly ------------------------------------------------

judge_ids = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=12, unique=True)


@st.composite
def valid_score_answers(draw: st.DrawFn) -> tuple[str, list[str], dict[str, int]]:
    ids = draw(judge_ids | st.integers(1, 52).map(lambda n: list(card_ids(n))))
    scores = {i: draw(st.integers(SCORE_MIN, SCORE_MAX)) for i in ids}
    answer_order = draw(st.permutations(ids))
    body = json.dumps(
        {"scores": [{"id": i, "score": scores[i]} for i in answer_order]},
        indent=draw(st.sampled_from([None, 1, 4])),
        ensure_ascii=draw(st.booleans()),
    )
    prefix, suffix = draw(
        st.sampled_from([("", ""), (" \n", "\n\t"), ("```json\n", "\n```"), ("```\n", "\n```")])
    )
    return prefix + body + suffix, ids, scores


@given(valid_score_answers())
def test_valid_scores_parse_back_exactly(case: tuple[str, list[str], dict[str, int]]) -> None:
    text, ids, scores = case
    if degeneracy([scores[i] for i in ids]) is not None:
        # Well formed, but no judgement (the quality gate): rejected with the gate's reason.
        with pytest.raises(ModelOutputError) as caught:
            parse_scores(text, ids)
        assert caught.value.reason == "gate:judge_degenerate"
        return
    parsed = parse_scores(text, ids)
    assert parsed == scores
    assert list(parsed) == ids


@given(judge_ids)
def test_judge_schema_lists_every_id_once(ids: list[str]) -> None:
    schema = judge_output(ids).schema
    scores = json.loads(json.dumps(schema.schema))["properties"]["scores"]
    # One required integer property per id, in order, and no other: a grammar writes one
    # score per card.
    assert list(scores["properties"]) == scores["required"] == ids
    assert scores["additionalProperties"] is False
    assert schema.strict


_WORDS = st.text(string.ascii_letters + string.digits + " -',", min_size=1, max_size=40).filter(
    str.strip
)


@given(
    st.fixed_dictionaries(
        {
            "hook": _WORDS,
            "narrative": _WORDS,
            "options": st.fixed_dictionaries(
                {
                    "composition": st.lists(_WORDS, min_size=2, max_size=4),
                    "palette": st.lists(_WORDS, min_size=2, max_size=4),
                    "medium": st.lists(_WORDS, min_size=1, max_size=3),
                    "mood": st.lists(_WORDS, min_size=1, max_size=3),
                }
            ),
            "avoid": st.lists(_WORDS, max_size=4),
        }
    ),
    st.sampled_from([("", ""), ("```json\n", "\n```")]),
)
def test_valid_cards_parse_back_exactly(data: dict[str, Any], fence: tuple[str, str]) -> None:
    expected = IdeaCard.model_validate(json.loads(json.dumps(data)))
    if check_card_fields(expected):
        # Well formed, but a field says nothing (the quality gate): rejected with its reason.
        with pytest.raises(ModelOutputError) as caught:
            parse_card(fence[0] + json.dumps(data) + fence[1])
        assert caught.value.reason == "gate:card_field"
        return
    if check_card_shape(expected):
        # Well formed, but degenerate (repeated options, a loop): rejected with its reason.
        with pytest.raises(ModelOutputError) as caught:
            parse_card(fence[0] + json.dumps(data) + fence[1])
        assert caught.value.reason == "gate:card_degenerate"
        return
    card = parse_card(fence[0] + json.dumps(data) + fence[1])
    assert card == expected
    assert card.hook == data["hook"].strip()


@pytest.mark.parametrize("too_long", [False, True], ids=["too-short", "too-long"])
@pytest.mark.parametrize(
    ("name", "lo", "hi"),
    [("composition", 2, 4), ("palette", 2, 4), ("medium", 1, 3), ("mood", 1, 3)],
)
def test_card_lists_outside_the_schema_bounds_are_rejected(
    name: str, lo: int, hi: int, too_long: bool
) -> None:
    """The card model is also its schema, so it accepts exactly the list sizes the schema
    announces (the old validator accepted up to 6/6/4/4 items while the schema said 4/4/3/3)."""
    options = {"composition": ["a", "b"], "palette": ["c", "d"], "medium": ["e"], "mood": ["f"]}
    options[name] = [f"item {i}" for i in range(hi + 1 if too_long else lo - 1)]
    bounds = CARD_OUTPUT.schema.schema["properties"]["options"]["properties"][name]
    assert (bounds["minItems"], bounds["maxItems"]) == (lo, hi)
    text = json.dumps({"hook": "h", "narrative": "n", "options": options, "avoid": []})
    with pytest.raises(ValueError, match=rf"invalid idea card: options\.{name}: ") as info:
        parse_card(text)
    assert type(info.value) is ValueError


# -- (d) refusals and previews -----------------------------------------------------------


@given(
    st.sampled_from(["I'm sorry", "I cannot", "As an AI", "I can\u2019t"]),
    st.text(max_size=5_000),
)
def test_a_refusal_is_a_refusal_error_with_a_short_preview(opening: str, rest: str) -> None:
    text = f"{opening}, {rest}"
    try:
        parse_scores(text, IDS)
    except RefusalError as exc:
        assert exc.reason == "refused"
        assert len(exc.output_preview) <= PREVIEW_CHARS
    except ValueError as exc:
        # Text that happens to hold a whole JSON object is judged as JSON, not as a refusal.
        assert type(exc) is ValueError
        assert "{" in text
    else:
        raise AssertionError("a refusal parsed as scores")


@given(st.one_of(any_text, wrapped_json(), valid_score_answers().map(lambda case: case[0])))
def test_judge_step_ends_in_scores_or_model_output_error(text: str) -> None:
    """End to end through the runner: after the re-ask, a bad answer is a ModelOutputError."""
    ids = IDS
    step = ChatStep(
        name="judge",
        prompt="score the cards",
        temperature=0.0,
        output=judge_output(ids),
        reask=ReaskPolicy(max=1, style="restate"),
        allow_empty_response=True,
        merge="none",
    )
    backend = FunctionTextBackend(lambda _request: text)

    async def run() -> object:
        return (await ChatRunner(backend).root(Context.with_system("sys")).ask(step)).value

    try:
        scores = anyio.run(run)
    except ModelOutputError as exc:
        assert len(exc.output_preview) <= PREVIEW_CHARS
        assert len(backend.requests) == (1 if isinstance(exc, RefusalError) else 2)
    else:
        assert isinstance(scores, dict) and set(scores) == set(ids)
