"""Bad answers over the wire: malformed JSON, JSON in prose or code fences, missing ids,
refusals (phrase or the API's refusal field), empty strings, floods of garbage. Each gives
its documented judge status or error, with a preview of at most 200 characters and the step
path, and the run either completes within the quorum rules or fails cleanly (transcript, no
image, no rows). The real openai client talks to the scripted local server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.seeding import derive_seed
from tests.faults.common import http_backends, images, make_cfg, read_rows, transcripts
from tests.support import RecordingSleep
from tests.support.openai_server import OpenAIServer, RecordedRequest, Reply, chat_completion

pytestmark = pytest.mark.anyio

SEED = 77
ENSEMBLE = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.num_ideas=3",
    "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel}]",
    "prompt.scoring.max_reasks=1",
)
VALID_SCORES = {"scores": [{"id": c, "score": 50 + i} for i, c in enumerate("ABC")]}


Match = Callable[[RecordedRequest], bool]


def judge(judge_id: str) -> Match:
    seed = derive_seed(SEED, "step", "judge", judge_id)
    return lambda r: r.schema_name == "idea_scores" and r.seed == seed


def idea(card_id: str) -> Match:
    seed = derive_seed(SEED, "step", "idea", card_id)
    return lambda r: r.schema_name == "idea_card" and r.seed == seed


def said(text: str | None, *, refusal: str | None = None) -> Reply:
    return Reply(body=chat_completion(text, refusal=refusal))


async def run(tmp: Path, server: OpenAIServer, *extra: str) -> dict[str, Any]:
    async with http_backends(server, RecordingSleep()) as b:
        await run_generation(make_cfg(tmp, *ENSEMBLE, *extra), b)
    (t,) = transcripts(tmp)
    return t


def calls(server: OpenAIServer, when: Match) -> list[RecordedRequest]:
    return [r for r in server.requests if when(r)]


GARBAGE = "Sure! " + "blah " * 1000

# (answers the "warm" judge gives, status, calls made, error type of its step)
CASES = {
    "malformed_json": (['{"scores": [{"id": "A", "score": 50}'] * 2, "parse_error", 2),
    "json_in_prose": (
        [f"My scores: {json.dumps(VALID_SCORES)} Hope this helps."] * 2,
        "parse_error",
        2,
    ),
    "code_fence": ([f"```json\n{json.dumps(VALID_SCORES)}\n```"], "ok", 1),
    "missing_ids": ([json.dumps({"scores": VALID_SCORES["scores"][:2]})] * 2, "parse_error", 2),
    "unknown_id": (
        [json.dumps({"scores": [*VALID_SCORES["scores"][:2], {"id": "Z", "score": 1}]})] * 2,
        "parse_error",
        2,
    ),
    "refusal_phrase": (["I'm sorry, but I can't help with rating these."], "refused", 1),
    "empty_string": ([""] * 2, "parse_error", 2),
    "garbage_flood": ([GARBAGE] * 2, "parse_error", 2),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_bad_judge_answer_gets_its_status_and_the_quorum_carries_the_run(
    tmp_path: Path, allow_loopback: None, case: str
) -> None:
    answers, status, expected_calls = CASES[case]
    with OpenAIServer(offline=True) as server:
        server.rule(judge("warm"), *[said(a) for a in answers])
        t = await run(tmp_path, server)
        assert len(calls(server, judge("warm"))) == expected_calls
    statuses = {j["id"]: j["status"] for j in t["blackbox_scoring"]["judges"]}
    assert statuses == {"strict": "ok", "warm": status, "novel": "ok"}
    step = next(s for s in t["steps"] if s["path"] == "pipeline/blackbox_scoring/judges/warm")
    if status == "ok":
        assert step["error"] is None
    else:
        error = step["error"]
        assert set(error) == {"type", "message", "reason", "output_preview", "status"}, error
        assert error["type"] in ("ModelOutputError", "RefusalError", "EmptyResponseError")
        assert "pipeline/blackbox_scoring/judges/warm" in error["message"]
        assert len(error.get("output_preview") or "") <= 200
    others = {
        s["path"]: s["error"]
        for s in t["steps"]
        if s["path"].startswith("pipeline/blackbox_scoring/judges/") and "/warm" not in s["path"]
    }
    assert others == {f"pipeline/blackbox_scoring/judges/{j}": None for j in ("strict", "novel")}
    assert t["error"] is None and len(images(tmp_path)) == 1  # the run completed


async def test_the_api_refusal_field_is_a_refusal_and_never_reasked(
    tmp_path: Path, allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(judge("novel"), said(None, refusal="I can't assist with that."))
        t = await run(tmp_path, server)
        assert len(calls(server, judge("novel"))) == 1
    assert [j["status"] for j in t["blackbox_scoring"]["judges"]] == ["ok", "ok", "refused"]


async def test_below_the_quorum_the_run_fails_cleanly(tmp_path: Path, allow_loopback: None) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(judge("strict"), said(GARBAGE), said(GARBAGE))
        server.rule(judge("warm"), said("I cannot help with that request."))
        with pytest.raises(RunFailed) as caught:
            await run(tmp_path, server)
    (t,) = transcripts(tmp_path)
    error = t["error"]
    assert (error["type"], error["reason"]) == ("ModelOutputError", "invalid_judge_output")
    assert error["path"] == "pipeline/blackbox_scoring/select"
    assert len(error["output_preview"]) <= 200
    assert "strict=parse_error" in str(caught.value) and "warm=refused" in str(caught.value)
    # The transcript keeps every judge's status and says that no card was selected.
    scoring = t["blackbox_scoring"]
    assert scoring["selected_id"] is None
    statuses = {j["id"]: j["status"] for j in scoring["judges"]}
    assert statuses == {"strict": "parse_error", "warm": "refused", "novel": "ok"}
    assert images(tmp_path) == [] and read_rows(tmp_path / "out" / "generations.csv") == []


async def test_a_card_in_prose_is_reasked_and_then_accepted(
    tmp_path: Path, allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(idea("B"), said("Here is a lovely idea: a lighthouse at dusk."))
        t = await run(tmp_path, server)
        (first, second) = calls(server, idea("B"))
    step = next(s for s in t["steps"] if s["path"] == "pipeline/blackbox_scoring/ideas/idea_B")
    assert len(step["reasks"]) == 1 and step["attempts"] == 2
    # Stateless re-ask: the same system prompt, and the original prompt restated.
    assert [m["role"] for m in second.body["messages"]] == ["system", "user"]
    assert second.body["messages"][0] == first.body["messages"][0]
    assert second.body["messages"][1]["content"].startswith(first.body["messages"][1]["content"])
    restated = second.body["messages"][1]["content"]
    assert "rejected by validation:\nexpected a JSON object, found no {...}" in restated
    assert t["error"] is None


async def test_a_card_that_stays_broken_fails_at_its_step_with_a_short_preview(
    tmp_path: Path, allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(idea("B"), said(GARBAGE), said(GARBAGE), said(GARBAGE))
        every_card = "prompt.scoring.min_ok_cards=3"  # no card may be dropped
        with pytest.raises(RunFailed):
            await run(tmp_path, server, every_card)
        assert len(calls(server, idea("B"))) == 2  # asked, re-asked once (max_reasks=1)
        assert not calls(server, lambda r: r.schema_name == "idea_scores")
    (t,) = transcripts(tmp_path)
    error = t["error"]
    assert (error["type"], error["path"]) == (
        "ModelOutputError",
        "pipeline/blackbox_scoring/ideas/idea_B",
    )
    assert 0 < len(error["output_preview"]) <= 200
    assert images(tmp_path) == [] and read_rows(tmp_path / "out" / "generations.csv") == []
