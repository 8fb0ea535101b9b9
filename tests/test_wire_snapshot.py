"""What a run sends and records, against saved snapshots.

The three scenarios of ``scripts/wire_snapshot.py`` (a one-round three-judge scoring run, a
three-round run, a three-round run with the LLM selector) run through the real client against
the local offline server; their request bodies and scrubbed transcripts must equal the
snapshots in ``tests/data/wire/``. A refactor that changes a prompt, a seed, a schema or the
record fails here. After a deliberate change, regenerate the snapshots with
``python scripts/wire_snapshot.py tests/data/wire`` and say why in the commit.

``tests/data/wire/before_issue_23/`` keeps the transcripts of the same scenarios as the code
recorded them before the scoring wing moved onto typed steps (issue 23): they differ only in
the LLM selector's model (recorded as null before, the model the step sent now). The request
bodies were byte-identical then (``diff -r`` of the two snapshot directories), so only the
current ones are kept.

``tests/data/wire/before_keyed_judges/`` keeps the request bodies from before the judge
answer was keyed by card id: only the judges' bodies differ
(:func:`test_keying_the_judge_answer_by_card_id_changed_only_the_judge_bodies`).

``tests/data/wire/before_issue_24/`` keeps the bodies and transcripts as issue 23 left them;
issue 24 added a token limit to every chat body and made the one request that did not
alternate do so (:func:`test_issue_24_added_token_limits_and_made_the_one_odd_conversation_alternate`).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from image_project.record import IdeaCard
from image_project.stages.scoring.cards import check_card_fields

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import wire_snapshot  # noqa: E402

SAVED = REPO / "tests" / "data" / "wire"


def saved(name: str, suffix: str, where: Path = SAVED) -> object:
    return json.loads((where / f"{name}.{suffix}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", list(wire_snapshot.SCENARIOS))
def test_a_run_sends_and_records_what_the_snapshot_holds(
    name: str, tmp_path: Path, allow_loopback: None
) -> None:
    bodies, transcript = wire_snapshot.run_scenario(name, tmp_path / "work")
    # Through JSON, as the snapshot was written (tuples become lists).
    assert json.loads(json.dumps(bodies)) == saved(name, "requests")
    assert json.loads(json.dumps(transcript)) == saved(name, "transcript")


ADDED_SINCE_ISSUE_23 = {"context": {"enabled": False}, "upscale": None}
"""Transcript fields added after issue 23, with their value in these runs (context and the
4K image off)."""


def test_before_the_typed_scoring_wing_only_the_selector_model_differed() -> None:
    before = SAVED / "before_issue_23"
    after = SAVED / "before_issue_24"  # the snapshots as issue 23 left them
    for name in wire_snapshot.SCENARIOS:
        old, new = saved(name, "transcript", before), saved(name, "transcript", after)
        assert isinstance(old, dict) and isinstance(new, dict)
        for key, value in ADDED_SINCE_ISSUE_23.items():
            assert key not in old and new.pop(key) == value
        if name != "three_rounds_llm_selector":
            assert old == new
            continue
        for data in (old, new):
            for r in data["blackbox_scoring"]["evolution"]["rounds"]:
                if r["selector"] is not None:
                    r["selector"]["model"] = None
            for step in data["steps"]:
                if step.get("type") == "action" and step["name"] == "survivors":
                    step["result"]["selector"]["model"] = None
        assert old == new


def _roles(body: dict[str, Any]) -> list[str]:
    return [m["role"] for m in body.get("messages", [])]


GATED_BY_ISSUE_24 = ("three_rounds", "three_rounds_llm_selector")
"""Scenarios whose offline answers issue 24's quality gates changed: a variant card of the
saved runs used the card schema's own field names as values (``"avoid"``, ``"palette"``),
which the ``card_field`` gate rejects, so the offline backend no longer draws them; the
offline selector's diversity reason now quotes its card (the ``selector_reason`` gate)."""


@pytest.mark.parametrize("name", GATED_BY_ISSUE_24)
def test_issue_24_quality_gates_changed_the_three_round_runs_offline_cards(name: str) -> None:
    """Why the three-round scenarios are not compared body by body with ``before_issue_24``:
    a saved card held field names as values; none of the current cards does, and the wire
    facts of issue 24 (token limits, alternation) hold for them too."""

    def cards(data: object) -> list[IdeaCard]:
        assert isinstance(data, dict)
        rounds = data["blackbox_scoring"]["evolution"]["rounds"]
        return [
            IdeaCard.model_validate(c["card"])
            for r in rounds
            for c in r["candidates"]
            if c["card"] is not None
        ]

    old = cards(saved(name, "transcript", SAVED / "before_issue_24"))
    assert any(check_card_fields(card) for card in old)
    assert not any(check_card_fields(card) for card in cards(saved(name, "transcript")))
    new = saved(name, "requests")
    assert isinstance(new, list)
    chats = [b for b in new if "messages" in b]
    assert all(isinstance(b.get("max_completion_tokens"), int) for b in chats)
    assert ["system", "assistant", "user"] not in [_roles(b) for b in new]


@pytest.mark.parametrize("name", [n for n in wire_snapshot.SCENARIOS if n not in GATED_BY_ISSUE_24])
def test_issue_24_added_token_limits_and_made_the_one_odd_conversation_alternate(
    name: str,
) -> None:
    """What issue 24 changed on the wire (``before_issue_24/`` holds the bodies as issue 23
    left them): every chat body gained ``max_completion_tokens``; the one request that did
    not alternate (``dalle_prompt_creation``'s draft after the selected card's stage:
    ``[system, assistant, user]``) now sends that stage as its prompt and its answer
    (``[system, user, assistant, user]``); the offline answer to it, hence the image prompt
    and the title request, changed with it. Nothing else."""
    old = saved(name, "requests", SAVED / "before_issue_24")
    new = saved(name, "requests", SAVED / "before_keyed_judges")  # as issue 24 left them
    assert isinstance(old, list) and isinstance(new, list) and len(old) == len(new)
    chats = [b for b in new if "messages" in b]
    assert all(isinstance(b.get("max_completion_tokens"), int) for b in chats)
    stripped = {
        json.dumps({k: v for k, v in b.items() if k != "max_completion_tokens"}, sort_keys=True)
        for b in new
    }
    before = {json.dumps(b, sort_keys=True) for b in old}
    gone = [json.loads(b) for b in before - stripped]
    came = [json.loads(b) for b in stripped - before]
    assert sorted(map(_roles, gone)) == [[], ["system", "assistant", "user"], ["system", "user"]]
    assert sorted(map(_roles, came)) == [
        [],
        ["system", "user"],
        ["system", "user", "assistant", "user"],
    ]
    assert ["system", "assistant", "user"] not in [_roles(b) for b in new]


JUDGE_SCHEMA_BEFORE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "scores": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "enum": None},
                    "score": {"type": "integer", "minimum": 0, "maximum": 100},
                },
                "required": ["id", "score"],
                "additionalProperties": False,
            },
            "minItems": None,
            "maxItems": None,
        }
    },
    "required": ["scores"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("name", list(wire_snapshot.SCENARIOS))
def test_keying_the_judge_answer_by_card_id_changed_only_the_judge_bodies(name: str) -> None:
    """What keying the judge answer by card id changed on the wire: in every judge body (and
    nowhere else) the schema's ``scores`` went from a list of ``{"id": <enum>, "score"}``
    items to an object with one required integer property per id (in the order shown), the
    system prompt's answer format and the prompt's last line say the same. The offline
    judges' answers (and with them a few scores, as their jitter is seeded by the request)
    changed accordingly in the transcripts."""
    old = saved(name, "requests", SAVED / "before_keyed_judges")
    new = saved(name, "requests")
    assert isinstance(old, list) and isinstance(new, list) and len(old) == len(new)
    changed = [(i, a, b) for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
    judges = [(i, a, b) for i, a, b in changed if _schema_name(b) == "idea_scores"]
    assert judges and len(judges) == sum(_schema_name(b) == "idea_scores" for b in new)
    # What the judges decided (their scores moved by the offline jitter) is all that any
    # other body reads differently (the selector's table, the survivors' variants, the
    # selected card's stages); nothing sent before the first judge changed.
    before_judges = ("concept_rewrite", "generator_profile_hints")
    assert not any(_schema_name(b) in before_judges for _, _, b in changed)
    for _, a, b in judges:
        fmt = b["response_format"]["json_schema"]
        assert {k for k in b if a[k] != b[k]} == {"messages", "response_format"}
        ids = fmt["schema"]["properties"]["scores"]["required"]
        before = copy.deepcopy(JUDGE_SCHEMA_BEFORE)
        scores = before["properties"]["scores"]
        scores["items"]["properties"]["id"]["enum"] = ids
        scores["minItems"] = scores["maxItems"] = len(ids)
        assert a["response_format"]["json_schema"]["schema"] == before
        keyed = fmt["schema"]["properties"]["scores"]  # (the snapshot sorts keys)
        assert sorted(keyed["properties"]) == sorted(ids)
        assert keyed["additionalProperties"] is False
        assert _roles(a) == _roles(b) == ["system", "user"]
        (sa, ua), (sb, ub) = ([m["content"] for m in x["messages"]] for x in (a, b))
        assert sa.replace(_FORMAT_BEFORE, _FORMAT_NOW) == sb
        assert ua.rsplit("\n", 1)[0] == ub.rsplit("\n", 1)[0]
        assert ub.rsplit("\n", 1)[1].endswith(
            'Output ONLY {"scores": {' + ", ".join(f'"{i}": ...' for i in ids) + "}}."
        )


def _schema_name(body: dict[str, Any]) -> str | None:
    fmt = body.get("response_format")
    return fmt["json_schema"]["name"] if isinstance(fmt, dict) else None


_FORMAT_BEFORE = '{"scores": [{"id": "<card id>", "score": <0-100>}, ...]}'
_FORMAT_NOW = '{"scores": {"<card id>": <0-100>, ...}}'
