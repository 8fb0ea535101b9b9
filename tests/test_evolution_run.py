"""Multi-round selection through run_generation with fake backends: every round recorded,
determinism under random completion order, isolation of scores, ranks, judge and selector
text from every generator call, the LLM selector and its loud fallback, near-duplicates
dropped before judging, the CLI summary, and evolution off leaving the record unchanged."""

from __future__ import annotations

import json
import logging
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from image_project.backends.base import TextReply, TextRequest
from image_project.cli.command import main
from image_project.record.gates import gate_counts
from image_project.record.run import RunRecord
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.seeding import derive_seed
from image_project.testing import FunctionTextBackend, last_user_text
from tests.test_app import backends, make_cfg, transcript, untimed_steps
from tests.test_cli import REPO, write_config
from tests.test_scoring_run import ENSEMBLE, SEED, role, scoring_answer

pytestmark = pytest.mark.anyio

EVOLUTION = (
    *ENSEMBLE,
    "prompt.scoring.evolution.enabled=true",
    "prompt.scoring.evolution.generations=2",
    "prompt.scoring.evolution.survivors=3",
    "prompt.scoring.evolution.variants_per_survivor=2",
)
LLM = "prompt.scoring.evolution.selector=llm"

_WORDS = [
    "lantern",
    "harbor",
    "keeper",
    "orchard",
    "glacier",
    "foundry",
    "meadow",
    "canyon",
    "beacon",
    "archive",
    "terrace",
    "lagoon",
    "citadel",
    "bazaar",
    "quarry",
    "monastery",
    "greenhouse",
    "observatory",
    "vineyard",
    "tramway",
    "lighthouse",
    "workshop",
    "aqueduct",
    "pavilion",
]
GENERATOR_SYSTEMS = ("You are one of several independent", "You are an art director reworking")


def varied_card(request: TextRequest) -> str:
    """A card whose words depend on the request's seed, so cards are not near-duplicates."""
    rng = random.Random(request.seed)
    w = rng.sample(_WORDS, 8)
    return json.dumps(
        {
            "hook": f"The {w[0]} and the {w[1]}",
            "narrative": f"A {w[2]} beside a {w[3]} at dusk.",
            "options": {
                "composition": [f"{w[4]} in front", f"{w[5]} behind"],
                "palette": ["dusk tones", f"{w[6]} tones"],
                "medium": ["oil on linen"],
                "mood": [w[7]],
            },
            "avoid": [],
        }
    )


def selector_json(request: TextRequest) -> str:
    """A valid proposal: the slots in the prompt, filled with the candidates in order."""
    user = last_user_text(request)
    slots = user.rsplit("in any order: ", 1)[1].split("\n", 1)[0].rstrip(".").split(", ")
    rows = [json.loads(ln) for ln in user.splitlines() if ln.startswith('{"id"')]
    hooks = {row["id"]: row["card"]["hook"] for row in rows}
    ids = [row["id"] for row in rows]
    return json.dumps(
        {
            "selections": [
                {"id": i, "category": c, "reason": f"SELECTOR-REASON-{i}: {hooks[i]}"}
                for i, c in zip(ids[::-1], slots, strict=False)
            ],
            "summary": "SELECTOR-SUMMARY kept the boldest",
        }
    )


def evolution_answer(request: TextRequest) -> str | TextReply:
    kind = role(request)
    if kind == "idea_card":
        return varied_card(request)
    if kind == "survivor_selection":
        return selector_json(request)
    return scoring_answer(request)


def system(request: TextRequest) -> str:
    return next((m.content for m in request.messages if m.role == "system"), "")


def generator_requests(requests: list[TextRequest]) -> list[TextRequest]:
    return [r for r in requests if system(r).startswith(GENERATOR_SYSTEMS)]


async def run(tmp: Path, *extra: str, fn: Callable[[TextRequest], Any] = evolution_answer) -> Any:
    text = FunctionTextBackend(fn)
    await run_generation(make_cfg(tmp, *EVOLUTION, *extra), backends(text))
    return transcript(tmp), text.requests


async def test_every_round_is_recorded_with_survivors_and_reasons(tmp_path: Path) -> None:
    data, requests = await run(tmp_path)
    scoring = data["blackbox_scoring"]
    rounds = scoring["evolution"]["rounds"]
    assert [r["index"] for r in rounds] == [0, 1, 2]
    assert [c["kind"] for c in rounds[0]["candidates"]] == ["card"] * 6
    for r in rounds[:2]:
        assert [s["category"] for s in r["survivors"]] == ["performance", "diversity", "potential"]
        assert all(s["proposed_by"] == "code" and s["reason"] for s in r["survivors"])
        assert r["selector"] == {
            "kind": "code",
            "status": "ok",
            "attempts": 0,
            "model": None,
            "path": None,
            "summary": None,
            "warning": None,
        }
    assert rounds[2]["survivors"] == [] and rounds[2]["selector"] is None
    for index in (1, 2):
        previous = [s["id"] for s in rounds[index - 1]["survivors"]]
        parents = [c for c in rounds[index]["candidates"] if c["kind"] == "parent"]
        variants = [c for c in rounds[index]["candidates"] if c["kind"] == "variant"]
        assert [c["id"] for c in parents] == previous
        assert [c["parent"] for c in variants] == [p for p in previous for _ in range(2)]
        assert all("change the" in c["directive"] and c["card"] for c in variants)
    variant_ids = [c["id"] for r in rounds[1:] for c in r["candidates"] if c["kind"] == "variant"]
    assert len(variant_ids) == len(set(variant_ids)) == 12
    assert not set(variant_ids) & {c["id"] for c in rounds[0]["candidates"]}
    # The final pick is the epsilon-greedy selector over the last round.
    assert scoring["score_table"] == rounds[2]["score_table"]
    assert scoring["selected_id"] in {row["id"] for row in rounds[2]["score_table"]}
    assert [c["id"] for c in scoring["candidates"]] == [
        row["id"] for row in rounds[2]["score_table"]
    ]
    # Calls: hints + N + J + G * (S*V + J) + the final stages.
    paths = [s["path"] for s in data["steps"]]
    scoring_calls = [p for p in paths if "/ideas/" in p or "/variants/" in p or "/judges/" in p]
    assert len(scoring_calls) == 6 + 3 + 2 * (3 * 2 + 3)
    assert "pipeline/blackbox_scoring/round_1/variants/variant_G" in paths
    assert "pipeline/blackbox_scoring/round_2/judges/strict" in paths
    assert len(generator_requests(requests)) == 6 + 2 * 6


async def test_same_seed_same_rounds_in_sequential_and_concurrent_mode(tmp_path: Path) -> None:
    jitter = random.Random()  # deliberately unseeded: completion order must not matter
    finished: list[int | None] = []

    async def slow(request: TextRequest) -> str | TextReply:
        await anyio.sleep(jitter.uniform(0, 0.004))
        if role(request) == "idea_card":
            finished.append(request.seed)
        return evolution_answer(request)

    runs = []
    orders = []
    for i, mode in enumerate(["sequential", "concurrent", "concurrent", "concurrent"]):
        finished.clear()
        data, _ = await run(
            tmp_path / f"run{i}",
            LLM,
            "prompt.scoring.exploration_rate=0.5",
            f"run.concurrency={mode}",
            fn=slow,
        )
        novelty = data["blackbox_scoring"]["novelty"]
        novelty["warning"] = novelty["warning"].replace(str(tmp_path / f"run{i}"), "<tmp>")
        runs.append(data)
        orders.append(tuple(finished))
    reference = runs[0]
    for data in runs[1:]:
        assert data["blackbox_scoring"] == reference["blackbox_scoring"]
        assert untimed_steps(data) == untimed_steps(reference)
        assert data["final_image_prompt"] == reference["final_image_prompt"]
    rounds = reference["blackbox_scoring"]["evolution"]["rounds"]
    assert all(s["proposed_by"] == "llm" for r in rounds[:2] for s in r["survivors"])
    assert any(order != orders[0] for order in orders[1:])


async def test_no_score_rank_judge_or_selector_text_reaches_a_generator(tmp_path: Path) -> None:
    data, requests = await run(tmp_path, LLM)
    rounds = data["blackbox_scoring"]["evolution"]["rounds"]
    judge_answers = [
        s["response"] for s in data["steps"] if s.get("meta", {}).get("role") == "judge"
    ]
    reasons = [s["reason"] for r in rounds for s in r["survivors"]]
    summaries = [r["selector"]["summary"] for r in rounds if r["selector"]]
    assert judge_answers and reasons and all(summaries)
    generators = generator_requests(requests)
    assert len(generators) == 18
    for request in generators:
        text = "\n".join(m.content for m in request.messages)
        lowered = text.lower()
        for word in ("score", "median", "rank", "judge", "survivor", "selector", "performance"):
            assert word not in lowered, word
        for forbidden in (*judge_answers, *reasons, *summaries, "SELECTOR-"):
            assert forbidden not in text


async def test_an_invalid_llm_selection_is_reasked_then_replaced_by_the_code_choice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def bad_selector(request: TextRequest) -> str | TextReply:
        if role(request) == "survivor_selection":
            ids = [
                json.loads(ln)["id"]
                for ln in last_user_text(request).splitlines()
                if ln.startswith('{"id"')
            ]
            same = {"id": ids[0], "category": "performance", "reason": "twice"}
            return json.dumps({"selections": [same, same, same], "summary": "bad"})
        return evolution_answer(request)

    with caplog.at_level(logging.WARNING):
        data, requests = await run(tmp_path, LLM, fn=bad_selector)
    rounds = data["blackbox_scoring"]["evolution"]["rounds"]
    code_data, _ = await run(tmp_path / "code")
    code_rounds = code_data["blackbox_scoring"]["evolution"]["rounds"]
    for r, code_r in zip(rounds[:2], code_rounds[:2], strict=True):
        selector = r["selector"]
        assert selector["kind"] == "llm" and selector["status"] == "fallback"
        assert selector["attempts"] == 2  # the answer and one re-ask (max_reasks 1)
        assert "code choice" in selector["warning"] and "more than once" in selector["warning"]
        assert r["survivors"] == code_r["survivors"]
        assert all(s["proposed_by"] == "code" for s in r["survivors"])
    assert sum(1 for q in requests if role(q) == "survivor_selection") == 4
    assert "SELECTOR FALLBACK" in caplog.text
    steps = {s["path"]: s for s in data["steps"]}
    selector_step = steps["pipeline/blackbox_scoring/round_0/selector"]
    assert len(selector_step["reasks"]) == 2 and selector_step["error"] is not None


async def test_near_duplicate_variants_are_dropped_before_judging(tmp_path: Path) -> None:
    parents: dict[str, str] = {}

    def copycat(request: TextRequest) -> str | TextReply:
        # Every second variant call copies its parent card word for word.
        if (
            system(request).startswith("You are an art director reworking")
            and (request.seed or 0) % 2
        ):
            return json.dumps(parents_card(request))
        return evolution_answer(request)

    def parents_card(request: TextRequest) -> dict[str, Any]:
        user = last_user_text(request)
        hook = user.split("Hook: ", 1)[1].splitlines()[0]
        narrative = user.split("Narrative: ", 1)[1].splitlines()[0]
        lines = {
            k: user.split(f"{k}: ", 1)[1].splitlines()[0].split(" | ")
            for k in ("Composition options", "Palette options", "Medium", "Mood")
        }
        parents[hook] = narrative
        return {
            "hook": hook,
            "narrative": narrative,
            "options": {
                "composition": lines["Composition options"],
                "palette": lines["Palette options"],
                "medium": lines["Medium"],
                "mood": lines["Mood"],
            },
            "avoid": [],
        }

    data, _ = await run(tmp_path, fn=copycat)
    rounds = data["blackbox_scoring"]["evolution"]["rounds"]
    dropped = [c for r in rounds for c in r["candidates"] if c["dropped"]]
    assert dropped and parents
    for r in rounds[1:]:
        table_ids = {row["id"] for row in r["score_table"]}
        for c in r["candidates"]:
            if c["dropped"]:
                assert c["dropped"]["of"] == c["parent"] and c["dropped"]["distance"] < 0.2
                assert c["id"] not in table_ids
                assert all(c["id"] not in j["order"] for j in r["judges"])
            else:
                assert c["id"] in table_ids


async def test_evolution_off_leaves_the_record_as_it_was(tmp_path: Path) -> None:
    plain, _ = await run_plain(tmp_path / "plain")
    tuned, _ = await run_plain(
        tmp_path / "tuned",
        "prompt.scoring.evolution.generations=5",
        "prompt.scoring.evolution.selector=llm",
    )
    for data in (plain, tuned):
        assert "evolution" not in data["blackbox_scoring"]
        assert "evolution" not in data["blackbox_scoring"]["config_snapshot"]
    for data, name in ((plain, "plain"), (tuned, "tuned")):
        data["blackbox_scoring"]["novelty"]["warning"] = data["blackbox_scoring"]["novelty"][
            "warning"
        ].replace(str(tmp_path / name), "<tmp>")
    assert plain["blackbox_scoring"] == tuned["blackbox_scoring"]
    assert untimed_steps(plain) == untimed_steps(tuned)


async def run_plain(tmp: Path, *extra: str) -> Any:
    text = FunctionTextBackend(evolution_answer)
    await run_generation(make_cfg(tmp, *ENSEMBLE, *extra), backends(text))
    return transcript(tmp), text.requests


def offline_evolution_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    """An offline multi-round CLI run at seed 5 with ``extra`` arguments: its stdout."""
    config = write_config(tmp_path)
    argv = ["--config", str(config), "--offline", "--seed", "5"]
    scoring = ["--set", "prompt.scoring.enabled=true"]
    evolution = ["--set", "prompt.scoring.evolution.enabled=true"]
    code = main([*argv, *scoring, *evolution, *extra], env={}, root=REPO)
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_offline_cli_run_prints_one_line_per_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = offline_evolution_cli(tmp_path, capsys)
    lines = [ln for ln in out.splitlines() if ln.startswith("  Round ")]
    assert [ln.split()[1] for ln in lines] == ["0", "1", "2"]
    assert "survivors" in lines[0] and "performance" in lines[0] and "(code)" in lines[0]
    assert "best" in lines[2] and "survivors" not in lines[2]


def test_offline_llm_selector_proposes_valid_survivors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    offline_evolution_cli(tmp_path, capsys, "--set", LLM)
    (path,) = (tmp_path / "out" / "logs").glob("*_transcript.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    rounds = data["blackbox_scoring"]["evolution"]["rounds"]
    for r in rounds[:2]:
        assert r["selector"]["status"] == "ok", r["selector"]
        assert all(s["proposed_by"] == "llm" for s in r["survivors"])
    # One fact in three places: the model the selector's step sent is the record's and the
    # store's (it was recorded as null while the step ran on the backend's text model).
    steps = {s["path"]: s for s in data["steps"]}
    for r in rounds[:2]:
        sent = steps[r["selector"]["path"]]["params"]["model"]
        assert sent == r["selector"]["model"] == "offline-text-1"
    with sqlite3.connect(tmp_path / "out" / "logs" / "runs.sqlite") as db:
        stored = db.execute('SELECT selector_model FROM rounds ORDER BY "round"').fetchall()
    assert [m for (m,) in stored][:2] == ["offline-text-1", "offline-text-1"]


def test_a_shut_down_selector_model_exits_2_before_any_model_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    evolution = "prompt.scoring.evolution"
    code = main(
        [
            "--config",
            str(config),
            "--set",
            "backend.base_url=http://127.0.0.1:9/v1",  # never contacted
            *("--set", "prompt.scoring.enabled=true"),
            *("--set", f"{evolution}.enabled=true"),
            *("--set", f"{evolution}.selector=llm"),
            *("--set", f"{evolution}.selector_model=gpt-4-turbo"),
        ],
        env={"OPENAI_API_KEY": "test-key"},
        root=REPO,
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"{evolution}.selector_model" in err and "shut down" in err
    assert not (tmp_path / "out").exists()


def test_a_bad_evolution_key_exits_2_before_any_model_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    code = main(
        [
            "--config",
            str(config),
            "--set",
            "prompt.scoring.evolution.enabled=true",
            "--set",
            "prompt.scoring.evolution.survivors=9",
        ],
        env={},
        root=REPO,
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "prompt.scoring.evolution.survivors" in err and "num_ideas" in err
    assert not (tmp_path / "out").exists()


async def test_a_round_without_quorum_fails_the_run_with_every_round_so_far_recorded(
    tmp_path: Path,
) -> None:
    def round_two_judges_break(request: TextRequest) -> str | TextReply:
        # Round 2's variants are M..R: every judge of that round answers garbage.
        schema = request.json_schema
        if role(request) == "idea_scores" and schema is not None:  # noqa: SIM102
            if "M" in schema.schema["properties"]["scores"]["required"]:
                return "{not json"
        return evolution_answer(request)

    with pytest.raises(RunFailed) as caught:
        await run(tmp_path, fn=round_two_judges_break)
    error = caught.value.error
    assert error.type == "ModelOutputError" and error.message.startswith("invalid_judge_output")
    assert error.path == "pipeline/blackbox_scoring/round_2/table"
    data = transcript(tmp_path)
    rounds = data["blackbox_scoring"]["evolution"]["rounds"]
    assert [r["index"] for r in rounds] == [0, 1, 2]
    assert len(rounds[1]["survivors"]) == 3
    assert {j["status"] for j in rounds[2]["judges"]} == {"parse_error"}
    assert rounds[2]["score_table"] == [] and data["blackbox_scoring"]["selected_id"] is None


def test_progress_counts_the_groups_of_every_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    code = main(
        ["--config", str(config), "--offline", "--seed", "5", "--prompt-only",
         "--set", "prompt.scoring.enabled=true", "--set", "prompt.scoring.evolution.enabled=true"],
        env={},
        root=REPO,
    )  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err
    # Rounds are built as the run reaches them; their groups are counted all the same.
    for r in (1, 2):
        counts = [
            ln.rsplit("   ", 1)[1]
            for ln in err.splitlines()
            if f"/round_{r}/variants/" in ln and "of variants" in ln
        ]
        assert sorted(counts) == [f"{k}/6 of variants" for k in range(1, 7)]


async def test_a_selector_reason_about_nothing_is_reasked_then_replaced(tmp_path: Path) -> None:
    def clown(request: TextRequest) -> str | TextReply:
        if role(request) == "survivor_selection":
            answer = json.loads(selector_json(request))
            for pick in answer["selections"]:
                pick["reason"] = "I want to be a clown"
            return json.dumps(answer)
        return evolution_answer(request)

    data, _ = await run(tmp_path, LLM, fn=clown)
    rounds = data["blackbox_scoring"]["evolution"]["rounds"]
    assert [r["selector"]["status"] for r in rounds[:2]] == ["fallback", "fallback"]
    assert "gate:selector_reason" in rounds[0]["selector"]["warning"]
    step = next(s for s in data["steps"] if s["path"].endswith("round_0/selector"))
    assert step["error"]["reason"] == "gate:selector_reason"
    assert all(r["error"].startswith("gate:selector_reason: ") for r in step["reasks"])
    counts = gate_counts(RunRecord.model_validate(data))["selector_reason"]
    assert (counts.rejected, counts.failed) == (4, 2)


async def test_an_invalid_variant_is_dropped_and_recorded_not_fatal(tmp_path: Path) -> None:
    bad_seed = derive_seed(SEED, "step", "variant", 1, "G")  # round 1's first variant

    def placeholder_variant(request: TextRequest) -> str | TextReply:
        if system(request).startswith(GENERATOR_SYSTEMS[1]) and request.seed == bad_seed:
            card = json.loads(varied_card(request))
            card["hook"] = '":{"'
            card["options"]["mood"] = ["image"]
            return json.dumps(card)
        return evolution_answer(request)

    data, _ = await run(tmp_path, fn=placeholder_variant)
    assert data["error"] is None
    rounds = data["blackbox_scoring"]["evolution"]["rounds"]
    invalid = [(r["index"], c) for r in rounds for c in r["candidates"] if c.get("invalid")]
    assert len(invalid) == 1
    index, candidate = invalid[0]
    assert (index, candidate["id"]) == (1, "G")
    assert candidate["card"] is None and "gate:card_field" in candidate["invalid"]
    judged = rounds[index]
    assert candidate["id"] not in {row["id"] for row in judged["score_table"]}
    assert all(candidate["id"] not in j["order"] for j in judged["judges"])
    step = next(s for s in data["steps"] if s["name"] == f"variant_{candidate['id']}")
    assert step["error"]["reason"] == "gate:card_field" and len(step["reasks"]) == 2
    # The valid candidates' records do not grow an "invalid" key.
    assert all("invalid" not in c for r in rounds for c in r["candidates"] if c is not candidate)
    counts = gate_counts(RunRecord.model_validate(data))["card_field"]
    assert (counts.rejected, counts.failed) == (2, 1)


async def test_a_round_whose_variants_are_all_invalid_fails_only_without_parents(
    tmp_path: Path,
) -> None:
    def placeholder_variants(request: TextRequest) -> str | TextReply:
        if system(request).startswith("You are an art director reworking"):
            card = json.loads(varied_card(request))
            card["narrative"] = "..."
            return json.dumps(card)
        return evolution_answer(request)

    data, _ = await run(tmp_path / "kept", fn=placeholder_variants)
    assert data["error"] is None  # the kept parents are judged alone
    with pytest.raises(RunFailed) as caught:
        await run(
            tmp_path / "none",
            "prompt.scoring.evolution.keep_parents=false",
            fn=placeholder_variants,
        )
    assert "every variant was invalid" in caught.value.error.message
    assert caught.value.error.path == "pipeline/blackbox_scoring/round_1/dedupe"
