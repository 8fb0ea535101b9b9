"""Judge answers: strict numeric-only parsing, refusal detection, statuses, the quorum and
the structured-output schema generated from the answer model."""

from __future__ import annotations

import json
from typing import Any

import annotated_types
import pytest

from image_project.errors import (
    BackendTimeoutError,
    EmptyResponseError,
    ModelOutputError,
    RefusalError,
    ServerError,
)
from image_project.record.scoring import JudgeResult, JudgeStatus
from image_project.record.scoring import JudgeResult as RecordJudgeResult
from image_project.stages.scoring.judges import (
    SCORE_MAX,
    SCORE_MIN,
    JudgeAnswer,
    JudgeScore,
    judge_output,
    parse_scores,
    require_quorum,
    status_of,
)
from tests.stages.scoring.schema_checks import assert_strict

IDS = ("A", "B", "C")


def _answer(items: Any, **extra: Any) -> str:
    return json.dumps({"scores": items, **extra})


def _items(*pairs: tuple[Any, Any]) -> list[dict[str, Any]]:
    return [{"id": i, "score": s} for i, s in pairs]


# -- parse_scores: accepted ------------------------------------------------------------


def test_valid_answer_in_ids_order_regardless_of_answer_order() -> None:
    text = _answer(_items(("C", 12), ("A", 90), ("B", 55)))
    scores = parse_scores(text, IDS)
    assert scores == {"A": 90, "B": 55, "C": 12}
    assert list(scores) == ["A", "B", "C"]


def test_order_follows_the_ids_argument() -> None:
    text = _answer(_items(("A", 71), ("B", 20), ("C", 43)))
    assert list(parse_scores(text, ("C", "A", "B"))) == ["C", "A", "B"]


@pytest.mark.parametrize("score", [0, 100, 50])
def test_bounds_are_accepted(score: int) -> None:
    text = _answer(_items(("A", score), ("B", 31), ("C", 72)))
    assert parse_scores(text, IDS)["A"] == score


@pytest.mark.parametrize("tag", ["json", ""])
def test_code_fence_is_accepted(tag: str) -> None:
    text = f"```{tag}\n{_answer(_items(('A', 61), ('B', 12), ('C', 83)))}\n```"
    assert parse_scores(text, IDS) == {"A": 61, "B": 12, "C": 83}


# -- parse_scores: rejected ------------------------------------------------------------


def test_missing_id_is_named() -> None:
    with pytest.raises(ValueError, match=r"no score for id\(s\) \['B'\]"):
        parse_scores(_answer(_items(("A", 1), ("C", 3))), IDS)


def test_an_unknown_id_is_rejected_naming_the_ids() -> None:
    text = _answer(_items(("A", 1), ("B", 2), ("C", 3), ("D", 4)))
    with pytest.raises(
        ValueError, match=r"scores\[3\]: 'id' is not one of the card ids \['A', 'B', 'C'\]"
    ):
        parse_scores(text, IDS)


@pytest.mark.parametrize("bad_id", [1, None, "a"])
def test_non_string_or_wrong_case_id_is_unknown(bad_id: object) -> None:
    text = _answer(_items((bad_id, 1), ("B", 2), ("C", 3)))
    with pytest.raises(ValueError, match=r"scores\[0\]: 'id' is not one of the card ids"):
        parse_scores(text, IDS)


def test_duplicate_id_is_rejected() -> None:
    text = _answer(_items(("A", 1), ("B", 2), ("A", 3), ("C", 4)))
    with pytest.raises(ValueError, match=r"scores\[2\]: id 'A' is scored twice"):
        parse_scores(text, IDS)


@pytest.mark.parametrize("score", ["78", 78.5, 78.0, True, False, None, [78]])
def test_non_integer_score_is_rejected(score: object) -> None:
    text = _answer(_items(("A", score), ("B", 2), ("C", 3)))
    with pytest.raises(ValueError, match=r"scores\[0\]: score for 'A' must be an integer"):
        parse_scores(text, IDS)


def test_json_true_literal_is_rejected() -> None:
    text = (
        '{"scores": [{"id": "A", "score": true}, {"id": "B", "score": 1}, {"id": "C", "score": 2}]}'
    )
    with pytest.raises(ValueError, match="must be an integer, got a boolean"):
        parse_scores(text, IDS)


@pytest.mark.parametrize("score", [-1, 101, 1000])
def test_out_of_range_score_is_rejected(score: int) -> None:
    text = _answer(_items(("A", 1), ("B", score), ("C", 3)))
    with pytest.raises(ValueError, match=r"score for 'B' is out of range; it must be in 0\.\.100$"):
        parse_scores(text, IDS)


def test_extra_key_per_item_is_rejected() -> None:
    items = _items(("A", 1), ("B", 2), ("C", 3))
    items[1]["reason"] = "because it is nice"
    with pytest.raises(
        ValueError, match=r"scores\[1\]: 1 unexpected key\(s\) \(only 'id' and 'score'"
    ):
        parse_scores(_answer(items), IDS)


def test_missing_key_per_item_is_rejected() -> None:
    items: list[dict[str, Any]] = [{"id": "A"}, {"id": "B", "score": 2}, {"id": "C", "score": 3}]
    with pytest.raises(ValueError, match=r"scores\[0\]: missing \['score'\]"):
        parse_scores(_answer(items), IDS)


def test_non_object_item_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"scores\[0\] must be an object"):
        parse_scores(_answer([["A", 1]]), IDS)


def test_extra_top_level_key_is_rejected() -> None:
    text = _answer(_items(("A", 1), ("B", 2), ("C", 3)), rationale="A is best")
    with pytest.raises(
        ValueError, match=r"1 unexpected top-level key\(s\); only 'scores' is allowed"
    ):
        parse_scores(text, IDS)


@pytest.mark.parametrize("value", ["A=1", None, 3])
def test_scores_must_be_keyed_by_id_or_a_list(value: object) -> None:
    with pytest.raises(ValueError, match="'scores' must be an object with one integer score"):
        parse_scores(json.dumps({"scores": value}), IDS)


def test_scores_key_missing_is_rejected() -> None:
    with pytest.raises(ValueError, match="'scores' must be an object with one integer score"):
        parse_scores("{}", IDS)


@pytest.mark.parametrize(
    "text",
    [
        "Here are the scores: " + _answer(_items(("A", 1), ("B", 2), ("C", 3))),
        _answer(_items(("A", 1), ("B", 2), ("C", 3))) + "\nA is strongest because...",
    ],
)
def test_prose_around_json_is_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="ONLY the JSON object") as info:
        parse_scores(text, IDS)
    assert not isinstance(info.value, RefusalError)


@pytest.mark.parametrize(
    "text",
    [
        "I'm sorry, but I can't help with that.",
        "I\u2019m sorry, but I can\u2019t help with that.",
        "I cannot comply with this request",
        "As an AI, I am not able to score these",
        "Sorry — I can't do that",
        "I am unable to assist with rating artwork.",
    ],
)
def test_refusal_raises_refusal_error(text: str) -> None:
    with pytest.raises(RefusalError) as info:
        parse_scores(text, IDS)
    assert info.value.reason == "refused"
    assert info.value.output_preview == text


def test_non_json_non_refusal_is_a_plain_value_error() -> None:
    with pytest.raises(ValueError) as info:
        parse_scores("Here are my thoughts...", IDS)
    assert not isinstance(info.value, RefusalError)
    assert not isinstance(info.value, ModelOutputError)
    assert "expected a JSON object" in str(info.value)


def test_valid_json_mentioning_sorry_is_not_a_refusal() -> None:
    # refusal heuristics are only consulted for answers that are not valid JSON
    text = _answer(_items(("A", 61), ("B", 12), ("C", 83)))
    assert parse_scores(text, IDS) == {"A": 61, "B": 12, "C": 83}
    bad = json.dumps({"scores": [], "note": "sorry, I cannot"})
    with pytest.raises(ValueError) as info:
        parse_scores(bad, IDS)
    assert not isinstance(info.value, RefusalError)


@pytest.mark.parametrize(
    "text",
    [
        _answer(_items(("A", 1), ("B", 2), ("C", 3))) + "\nSorry if these seem low.",
        "I cannot be sure, but: " + _answer(_items(("A", 1), ("B", 2), ("C", 3))),
        "I'm sorry, here they are: {scores: [A=1]}",
    ],
    ids=["apology_after", "hedge_before", "broken_json_with_apology"],
)
def test_an_apology_around_an_attempted_json_answer_is_malformed_not_a_refusal(
    text: str,
) -> None:
    # The model tried to answer; a re-ask with the error can fix it, a refusal would not be
    # re-asked.
    with pytest.raises(ValueError) as info:
        parse_scores(text, IDS)
    assert not isinstance(info.value, RefusalError)


# -- status_of -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (RefusalError("declined"), "refused"),
        (ModelOutputError("invalid_json", "bad"), "parse_error"),
        (EmptyResponseError("blank"), "parse_error"),
        (ServerError("HTTP 500", status=500, attempts=3), "error"),
        (BackendTimeoutError("timeout"), "error"),
        (RuntimeError("boom"), "error"),
        (ValueError("odd"), "error"),
    ],
)
def test_status_of(exc: Exception, status: JudgeStatus) -> None:
    assert status_of(exc) == status


# -- require_quorum --------------------------------------------------------------------


def _result(
    judge_id: str,
    status: JudgeStatus,
    *,
    error: str | None = None,
    output_preview: str | None = None,
) -> JudgeResult:
    return JudgeResult(
        id=judge_id,
        status=status,
        scores={"A": 50, "B": 60} if status == "ok" else None,
        attempts=1,
        model="gpt-test",
        temperature=0.0,
        order=("A", "B"),
        path=f"pipeline/blackbox_scoring/judges/{judge_id}",
        error=error,
        output_preview=output_preview,
    )


def test_quorum_met_returns_only_ok_results() -> None:
    results = [
        _result("j1", "ok"),
        _result("j2", "refused", output_preview="I'm sorry"),
        _result("j3", "ok"),
    ]
    ok = require_quorum(results, 2)
    assert [r.id for r in ok] == ["j1", "j3"]


def test_quorum_all_ok() -> None:
    results = [_result("j1", "ok"), _result("j2", "ok")]
    assert require_quorum(results, 1) == results


def test_quorum_not_met_names_every_judge() -> None:
    results = [
        _result("j1", "ok"),
        _result("j2", "refused", error="declined", output_preview="I'm sorry, no."),
        _result("j3", "parse_error", error="not JSON", output_preview="blah"),
        _result("j4", "error", error="HTTP 500"),
    ]
    with pytest.raises(ModelOutputError) as info:
        require_quorum(results, 2)
    exc = info.value
    assert exc.reason == "invalid_judge_output"
    message = str(exc)
    for part in ("j1=ok", "j2=refused", "j3=parse_error", "j4=error"):
        assert part in message
    for judge in ("j2", "j3", "j4"):
        assert f"pipeline/blackbox_scoring/judges/{judge}" in message
    assert "pipeline/blackbox_scoring/judges/j1" not in message
    assert "only 1 of 4 judge(s)" in message
    assert "at least 2 required" in message
    assert "first error: declined" in message
    assert exc.output_preview == "I'm sorry, no."


def test_quorum_output_preview_is_capped_at_200_chars() -> None:
    bad = "x" * 5000
    results = [_result("j1", "parse_error", error="e" * 5000, output_preview=bad)]
    with pytest.raises(ModelOutputError) as info:
        require_quorum(results, 1)
    assert len(info.value.output_preview) <= 200
    assert info.value.output_preview.startswith("xxx")
    assert len(str(info.value)) < 1000


def test_quorum_with_no_results() -> None:
    with pytest.raises(ModelOutputError, match="only 0 of 0") as info:
        require_quorum([], 1)
    assert info.value.output_preview == ""


# -- judge_output(...).schema ----------------------------------------------------------


SINGLE_ID = pytest.param(("A",), id="single-id")  # a one-value Literal is a one-value enum


@pytest.mark.parametrize("ids", [SINGLE_ID, ("C", "A", "B"), tuple("ABCDEFGH")])
def test_judge_schema(ids: tuple[str, ...]) -> None:
    js = judge_output(ids).schema
    assert js.strict is True
    schema = js.schema
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["scores"]
    scores = schema["properties"]["scores"]
    # Keyed by card id: every id a required property, no other, so a grammar writes one
    # score per card (an id list item admitted [{"id": "C"}, {"id": "C"}, {"id": "C"}]).
    assert list(scores["properties"]) == scores["required"] == list(ids)
    assert scores["additionalProperties"] is False
    for card_id in ids:
        assert scores["properties"][card_id] == {"type": "integer", "minimum": 0, "maximum": 100}


def test_judge_result_is_the_record_model() -> None:
    assert JudgeResult is RecordJudgeResult
    assert _result("j1", "ok").model_dump()["id"] == "j1"


@pytest.mark.parametrize("ids", [("A", "B"), ("C", "A", "B")])
def test_judge_schema_is_generated_from_the_answer_model(ids: tuple[str, ...]) -> None:
    output = judge_output(ids)
    assert issubclass(output.model, JudgeAnswer)
    js = output.schema
    assert js.name == "idea_scores"
    schema = js.schema
    assert_strict(schema)
    scores = schema["properties"]["scores"]
    assert scores["required"] == list(ids)
    # The score bounds are the answer model's own field constraints.
    score = scores["properties"][ids[0]]
    metadata = JudgeScore.model_fields["score"].metadata
    ge = next(m.ge for m in metadata if isinstance(m, annotated_types.Ge))
    le = next(m.le for m in metadata if isinstance(m, annotated_types.Le))
    assert (score["minimum"], score["maximum"]) == (ge, le) == (SCORE_MIN, SCORE_MAX) == (0, 100)
    # What the schema says is what the parser enforces: every id, in range, nothing else.
    answer = json.dumps(
        {"scores": [{"id": i, "score": SCORE_MAX - 37 * (n % 2)} for n, i in enumerate(ids)]}
    )
    assert set(parse_scores(answer, ids).values()) <= {SCORE_MAX, SCORE_MAX - 37}
    too_many = json.dumps({"scores": [{"id": i, "score": 1} for i in (*ids, "Z")]})
    with pytest.raises(ValueError, match="is not one of the card ids"):
        parse_scores(too_many, ids)
    keyed = json.dumps({"scores": {i: SCORE_MAX - 37 * (n % 2) for n, i in enumerate(ids)}})
    assert parse_scores(keyed, ids) == parse_scores(answer, ids)
    with pytest.raises(ValueError, match="1 key\\(s\\) that are not card ids"):
        parse_scores(json.dumps({"scores": {**json.loads(keyed)["scores"], "Z": 1}}), ids)
