"""The quality gates of the scoring wing, each on its own: a schema-valid answer that is
still nonsense (a weak real model's) is rejected with a ``gate:<name>`` reason, and a
sensible one passes. The runs that record the outcomes are tested in tests/test_scoring_run.py
and tests/test_evolution_run.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from image_project.errors import ModelOutputError
from image_project.record.events import ChatEvent, ChatParams, Reask, StepError
from image_project.record.gates import GATES, gate_counts
from image_project.record.run import RunError, RunRecord
from image_project.record.scoring import IdeaCard, ScoreRow
from image_project.stages.scoring.cards import CARD_OUTPUT, check_card_fields
from image_project.stages.scoring.evolution import card_mentions, selector_output
from image_project.stages.scoring.hints import ProfileHints, check_avoid, hints_output
from image_project.stages.scoring.judges import degeneracy, judge_output, status_of

CARD: dict[str, Any] = {
    "hook": "A lighthouse keeper's last night",
    "narrative": "The keeper lights the lamp one final time.",
    "options": {
        "composition": ["low horizon", "figure off-centre"],
        "palette": ["warm lamplight", "cold sea"],
        "medium": ["oil on canvas"],
        "mood": ["wistful"],
    },
    "avoid": ["text", "logos"],
}


# -- judge_degenerate ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "scores",
    [
        [0, 1, 2],
        [1, 2, 3, 4, 5],
        [3, 2, 1],
        [0, 1],
        [50, 50, 50],
        [2, 0, 1],  # ranks, not the 0-100 scale
        [4, 1, 3, 2],
    ],
)
def test_scores_that_carry_no_judgement_are_degenerate(scores: list[int]) -> None:
    assert degeneracy(scores) is not None


@pytest.mark.parametrize(
    "scores",
    [
        [80, 40, 65],
        [74, 72, 72, 74],
        [72, 73, 74, 75],  # a near-tie that happens to follow the order shown
        [10, 20, 30],
        [70, 70],
        [60, 61],
        [5, 3, 90],
        [3],
    ],
)
def test_scores_that_may_be_a_judgement_pass(scores: list[int]) -> None:
    assert degeneracy(scores) is None


def test_a_degenerate_judge_answer_is_a_gate_rejection_with_its_own_status() -> None:
    output = judge_output(["C", "A", "B"])
    positions = json.dumps({"scores": [{"id": i, "score": n} for n, i in enumerate("CAB")]})
    with pytest.raises(ModelOutputError) as caught:
        output.parse(positions)
    assert caught.value.reason == "gate:judge_degenerate"
    assert str(caught.value).startswith("gate:judge_degenerate: ")
    assert status_of(caught.value) == "degenerate"
    assert status_of(ModelOutputError("invalid_output", "x")) == "parse_error"
    # The same scores in another presentation order are a judgement.
    assert output.parse(
        json.dumps(
            {
                "scores": [
                    {"id": "C", "score": 80},
                    {"id": "A", "score": 20},
                    {"id": "B", "score": 55},
                ]
            }
        )
    ) == {"C": 80, "A": 20, "B": 55}


# -- card_field ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("hook",), '":{"'),
        (("hook",), "image"),
        (("hook",), "Hook"),
        (("narrative",), "..."),
        (("narrative",), "The narrative"),
        (("options", "palette", 1), "palette"),
        (("options", "mood", 0), "N/A"),
        (("avoid", 0), "string"),
    ],
)
def test_a_card_field_that_says_nothing_is_a_gate_rejection(
    path: tuple[str | int, ...], value: str
) -> None:
    data = copy.deepcopy(CARD)
    node: Any = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ModelOutputError) as caught:
        CARD_OUTPUT.parse(json.dumps(data))
    assert caught.value.reason == "gate:card_field"
    where = ".".join(str(p) for p in path[:-1]) + (
        f"[{path[-1]}]" if isinstance(path[-1], int) else str(path[-1])
    )
    assert f"gate:card_field: {where} " in str(caught.value)
    assert repr(value) not in str(caught.value)


def test_a_card_with_content_in_every_field_passes_the_gate() -> None:
    card = CARD_OUTPUT.parse(json.dumps(CARD))
    assert check_card_fields(card) == []
    assert (
        check_card_fields(IdeaCard.model_validate({**CARD, "hook": "The image of a keeper"})) == []
    )


# -- hints_avoid ---------------------------------------------------------------------------


def test_an_avoid_list_that_repeats_the_adjectives_is_a_gate_rejection() -> None:
    weak = {"adjectives": ["quiet", "tactile", "airy"], "avoid": ["quiet", "no tactile, airy"]}
    with pytest.raises(ModelOutputError) as caught:
        hints_output(["Lighthouses"]).parse(json.dumps(weak))
    assert caught.value.reason == "gate:hints_avoid"
    assert "avoid[0] only repeats" in str(caught.value)
    assert "avoid[1] only repeats" in str(caught.value)
    assert "no tactile, airy" not in str(caught.value)


def test_an_avoid_list_of_its_own_passes() -> None:
    hints = ProfileHints(
        adjectives=["quiet", "soft light", "airy"], avoid=["no gore", "harsh light"]
    )
    assert check_avoid(hints) == []
    good = {"adjectives": ["quiet", "tactile", "airy"], "avoid": ["no gore"]}
    assert hints_output(["Lighthouses"]).parse(json.dumps(good)).avoid == ["no gore"]


# -- selector_reason -----------------------------------------------------------------------


def _row(card_id: str, score: int) -> ScoreRow:
    return ScoreRow(
        id=card_id,
        judge_scores={"strict": score, "warm": score + 4},
        median=score + 2,
        aggregate=score + 2,
        spread=4,
        n_ok=2,
        effective_score=float(score + 2),
    )


def _selection(reasons: dict[str, str]) -> str:
    return json.dumps(
        {
            "selections": [
                {"id": i, "category": c, "reason": reasons[i]}
                for i, c in zip(reasons, ("performance", "diversity"), strict=False)
            ],
            "summary": "kept two",
        }
    )


def test_a_selector_reason_that_mentions_nothing_of_its_card_is_a_gate_rejection() -> None:
    cards = {
        "A": IdeaCard.model_validate(CARD),
        "B": IdeaCard.model_validate({**CARD, "hook": "Orchard under frost"}),
    }
    mentions = {i: card_mentions(_row(i, 60 + n * 10), cards[i]) for n, i in enumerate("AB")}
    output = selector_output(["A", "B"], ("performance", "diversity"), mentions)
    with pytest.raises(ModelOutputError) as caught:
        output.parse(_selection({"A": "I want to be a clown", "B": "the orchard in frost"}))
    assert caught.value.reason == "gate:selector_reason"
    assert "for A" in str(caught.value) and "for B" not in str(caught.value)
    # A word of the card, or one of its numbers in the table, is about the card.
    answer = output.parse(_selection({"A": "the keeper's lamp", "B": "median 72, a fresh idea"}))
    assert [p.id for p in answer.selections] == ["A", "B"]
    # Without mentions (a caller that has no cards), the reasons are not checked.
    assert selector_output(["A", "B"], ("performance", "diversity")).parse(
        _selection({"A": "clown", "B": "clown"})
    )


# -- the transcript's counts ---------------------------------------------------------------


def _chat(path: str, reasks: list[str], reason: str | None = None) -> ChatEvent:
    return ChatEvent(
        name=path.rsplit("/", 1)[-1],
        path=path,
        prompt="p",
        response="r",
        params=ChatParams(temperature=0.0, model="m", seed=1),
        context_messages=0,
        created_at="2026-01-01T00:00:00Z",
        latency_ms=1.0,
        attempts=1,
        answers=len(reasks) + 1,
        reasks=tuple(Reask.of("x", e) for e in reasks),
        error=StepError(type="ModelOutputError", message="m", reason=reason) if reason else None,
    )


def test_gate_counts_reads_reasks_step_errors_and_the_run_error() -> None:
    record = RunRecord.model_validate(
        {
            "schema_version": 2,
            "generation_id": "g",
            "seed": 1,
            "created_at": "2026-01-01T00:00:00Z",
            "run_mode": "prompt_only",
            "backend": {
                "provider": "offline",
                "description": "d",
                "text_model": "t",
                "image_model": "i",
                "execution_mode": "concurrent",
            },
            "steps": [
                _chat("a/judges/j1", ["gate:judge_degenerate: x"] * 2, "gate:judge_degenerate"),
                _chat("a/ideas/idea_A", ["gate:card_field: y", "invalid idea card: z"]),
                _chat("a/judges/j2", ["not json"], "invalid_output"),
            ],
            "error": RunError(
                type="ModelOutputError",
                message="m",
                phase="concept_filter",
                path="dislike_rewrite",
                reason="gate:rewrite_dislike",
            ),
        }
    )
    counts = gate_counts(record)
    assert set(counts) == set(GATES)
    got = {k: (v.rejected, v.failed, v.paths) for k, v in counts.items() if v.rejected or v.failed}
    assert got == {
        "judge_degenerate": (2, 1, ["a/judges/j1"]),
        "card_field": (1, 0, []),
        "rewrite_dislike": (0, 1, ["dislike_rewrite"]),
    }
