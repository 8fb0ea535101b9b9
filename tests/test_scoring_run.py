"""Black-box scoring through run_generation with fake backends: artifacts, transcript,
isolation of judge output, statuses and quorum, determinism under random completion order,
and the disabled path being exactly the standard pipeline."""

from __future__ import annotations

import csv
import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from image_project.artifacts.generations import append_generation_row
from image_project.backends.base import TextReply, TextRequest
from image_project.cli.summary import gate_lines, record_lines
from image_project.errors import ServerError
from image_project.record.gates import gate_counts
from image_project.record.run import RunRecord
from image_project.record.scoring import ScoringRecord
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.seeding import derive_seed, rng_for
from image_project.stages.profile import load_profile
from image_project.stages.standard import Brief
from image_project.testing import FunctionTextBackend, last_user_text
from tests.support.pipeline import pipeline_shape
from tests.test_app import answer, backends, leftover_files, make_cfg, transcript, untimed_steps

pytestmark = pytest.mark.anyio

SEED = 1234
BRIEF = Brief(("a", "b", "c"), "Likes:\n- x")
ENSEMBLE = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel}]",
)


def judge_seed(judge_id: str) -> int:
    return derive_seed(SEED, "step", "judge", judge_id)


def judge_seeds(judge_id: str) -> set[int]:
    """A judge's seed and the seeds of its re-asks of a degenerate answer (each its own)."""
    first = judge_seed(judge_id)
    return {first, *(derive_seed(first, "reask", k) for k in range(1, 6))}


def _score(seed: int | None, card_id: str) -> int:
    return int(hashlib.sha256(f"{seed}:{card_id}".encode()).hexdigest(), 16) % 101


def scores_json(request: TextRequest, bump: dict[str, int] | None = None) -> str:
    assert request.json_schema is not None
    ids = request.json_schema.schema["properties"]["scores"]["required"]
    bump = bump or {}
    return json.dumps(
        {
            "scores": [
                {"id": i, "score": min(100, _score(request.seed, i) + bump.get(i, 0))} for i in ids
            ]
        }
    )


def card_json(request: TextRequest) -> str:
    return json.dumps(
        {
            "hook": f"Lantern keeper {request.seed}",
            "narrative": "A keeper trims the wick while the harbor sleeps.",
            "options": {
                "composition": ["low horizon", "tight close-up"],
                "palette": ["dusk tones", "night tones"],
                "medium": ["oil on linen"],
                "mood": ["calm"],
            },
            "avoid": ["crowds"],
        }
    )


HINTS = json.dumps({"adjectives": ["quiet", "tactile", "airy"], "avoid": ["no gore"]})


def role(request: TextRequest) -> str:
    return request.json_schema.name if request.json_schema is not None else "text"


def scoring_answer(request: TextRequest) -> str:
    kind = role(request)
    if kind == "generator_profile_hints":
        return HINTS
    if kind == "idea_card":
        return card_json(request)
    if kind == "idea_scores":
        return scores_json(request)
    return answer(request)


def with_judges(
    overrides: dict[str, Callable[[TextRequest], str | TextReply]],
) -> FunctionTextBackend:
    """Scoring answers, except that the judges named in ``overrides`` answer differently."""
    by_seed = {seed: fn for j, fn in overrides.items() for seed in judge_seeds(j)}

    def fn(request: TextRequest) -> str | TextReply:
        if role(request) == "idea_scores" and request.seed in by_seed:
            return by_seed[request.seed](request)
        return scoring_answer(request)

    return FunctionTextBackend(fn)


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def is_file(path: str) -> bool:
    return Path(path).is_file()


def step_paths(data: dict[str, Any]) -> list[str]:
    return [s["path"] for s in data["steps"]]


async def test_scoring_run_makes_every_artifact_and_records_each_call(tmp_path: Path) -> None:
    text = FunctionTextBackend(scoring_answer)
    result = await run_generation(make_cfg(tmp_path, *ENSEMBLE), backends(text))
    data = transcript(tmp_path)

    assert result.record.image_path is not None and is_file(result.record.image_path)
    assert (tmp_path / "generations.csv").is_file()
    assert (tmp_path / "images" / "titles_manifest.csv").is_file()
    paths = step_paths(data)
    ideas = [p for p in paths if p.startswith("pipeline/blackbox_scoring/ideas/")]
    judges = [p for p in paths if p.startswith("pipeline/blackbox_scoring/judges/")]
    assert ideas == [f"pipeline/blackbox_scoring/ideas/idea_{c}" for c in "ABCDEF"]
    assert judges == [f"pipeline/blackbox_scoring/judges/{j}" for j in ("strict", "warm", "novel")]
    assert paths.index("pipeline/blackbox_scoring/profile_abstraction") < paths.index(ideas[0])
    assert paths.index(judges[-1]) < paths.index("pipeline/blackbox_scoring/select")
    assert paths.index("pipeline/blackbox_scoring/select") < paths.index(
        "pipeline/final_prompt_from_selected_idea/draft"
    )
    assert "pipeline/dalle_prompt_creation/draft" in paths

    bbs = data["blackbox_scoring"]
    assert set(bbs) == {
        "enabled", "config_snapshot", "aggregation", "candidates", "judges", "score_table", "selected_id",
        "selected_score", "exploration_rate", "exploration_roll", "selection_mode", "novelty",
        "selection", "normalise",
    }  # fmt: skip
    assert (
        bbs["selection"]["ranking"][0]
        == max(
            bbs["score_table"], key=lambda r: (r["effective_score"], r["median"], -ord(r["id"]))
        )["id"]
    )
    assert len(bbs["selection"]["explore_pool"]) == 2
    assert bbs["enabled"] is True and bbs["selected_id"] in "ABCDEF"
    assert [c["id"] for c in bbs["candidates"]] == list("ABCDEF")
    assert len({c["direction"] for c in bbs["candidates"]}) == 6
    assert [j["path"] for j in bbs["judges"]] == [
        f"pipeline/blackbox_scoring/judges/{j}" for j in ("strict", "warm", "novel")
    ]
    # Each card's derived seed was sent as the API seed of its own call.
    sent = {s["name"]: s["params"]["seed"] for s in data["steps"] if s["type"] == "chat"}
    assert all(sent[f"idea_{c['id']}"] == c["seed"] for c in bbs["candidates"])
    assert [j["status"] for j in bbs["judges"]] == ["ok", "ok", "ok"]
    assert all(sorted(j["order"]) == list("ABCDEF") for j in bbs["judges"])
    assert len({tuple(j["order"]) for j in bbs["judges"]}) > 1  # per-judge seeded orders
    row = next(r for r in bbs["score_table"] if r["id"] == bbs["selected_id"])
    assert bbs["selected_score"] == row["aggregate"]  # the mean of z-scores by default
    assert row["n_ok"] == 3 and set(row["judge_scores"]) == {"strict", "warm", "novel"}
    assert bbs["novelty"]["used"] is False and "FileNotFoundError" in bbs["novelty"]["warning"]
    selected = next(c for c in bbs["candidates"] if c["id"] == bbs["selected_id"])
    assert all(c["card"] is not None for c in bbs["candidates"])
    scoring = result.record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord) and scoring.selected_card is not None
    assert scoring.selected_card.hook == selected["card"]["hook"]
    # The final prompt stage was given the selected card.
    final = next(
        s for s in data["steps"] if s["path"] == "pipeline/final_prompt_from_selected_idea/draft"
    )
    assert selected["card"]["hook"] in final["prompt"]


async def test_no_judge_prompt_or_answer_reaches_any_later_call(tmp_path: Path) -> None:
    text = FunctionTextBackend(scoring_answer)
    await run_generation(make_cfg(tmp_path, *ENSEMBLE), backends(text))
    judge_requests = [r for r in text.requests if role(r) == "idea_scores"]
    assert len(judge_requests) == 3
    judge_texts = {last_user_text(r) for r in judge_requests}
    judge_texts |= {scores_json(r) for r in judge_requests}
    judge_system = {m.content for r in judge_requests for m in r.messages if m.role == "system"}
    later = text.requests[text.requests.index(judge_requests[-1]) + 1 :]
    assert len(later) >= 10  # final prompt, ToT enclave, dalle prompt, title
    others = [r for r in text.requests if role(r) != "idea_scores"]
    for request in others:
        for message in request.messages:
            assert message.content not in judge_system
            assert '"scores"' not in message.content
            for leaked in judge_texts:
                assert leaked not in message.content


async def test_disabled_scoring_is_exactly_the_standard_pipeline(tmp_path: Path) -> None:
    plain, tuned = tmp_path / "plain", tmp_path / "tuned"
    await run_generation(make_cfg(plain), backends(FunctionTextBackend(answer)))
    # Every scoring knob changed, but scoring off: nothing about the run may change.
    await run_generation(
        make_cfg(
            tuned,
            "prompt.scoring.enabled=false",
            "prompt.scoring.num_ideas=9",
            "prompt.scoring.judges=[{id: a}, {id: b}]",
            "prompt.scoring.exploration_rate=0.5",
        ),
        backends(FunctionTextBackend(answer)),
    )
    a, b = transcript(plain), transcript(tuned)
    assert untimed_steps(a) == untimed_steps(b)
    assert a["final_image_prompt"] == b["final_image_prompt"]
    assert a["blackbox_scoring"] == b["blackbox_scoring"] == {"enabled": False}
    tree = await pipeline_shape(BRIEF, run_seed=SEED, refinement="final")
    assert step_paths(a) == ["dislike_rewrite", *tree.paths, "image", "title"]
    # The artifacts are the same too: rows equal but for the run's id, paths and clock; the
    # captioned images byte for byte.
    volatile = {"generation_id", "created_at", "image_path"}
    for name in ("generations.csv", "images/titles_manifest.csv"):
        rows = [
            [{k: v for k, v in row.items() if k not in volatile} for row in read_rows(d / name)]
            for d in (plain, tuned)
        ]
        assert rows[0] == rows[1] and len(rows[0]) == 1
    images = [list((d / "images").glob("*_image.jpg")) for d in (plain, tuned)]
    assert [len(i) for i in images] == [1, 1]
    assert images[0][0].read_bytes() == images[1][0].read_bytes()
    assert sorted(a) == sorted(b)


async def test_failed_judges_get_statuses_and_the_quorum_carries_the_run(tmp_path: Path) -> None:
    def refuse(request: TextRequest) -> TextReply:
        return TextReply(text=None, model="fake", refusal="I can't help with that.")

    text = with_judges({"strict": refuse, "warm": lambda r: "Card B is lovely, I'd say 80."})
    cfg = make_cfg(tmp_path, *ENSEMBLE, "prompt.scoring.min_ok_judges=1")
    await run_generation(cfg, backends(text))
    data = transcript(tmp_path)
    statuses = {j["id"]: (j["status"], j["attempts"]) for j in data["blackbox_scoring"]["judges"]}
    assert statuses == {"strict": ("refused", 1), "warm": ("parse_error", 2), "novel": ("ok", 1)}
    steps = {s["name"]: s for s in data["steps"]}
    assert steps["strict"]["error"]["type"] == "RefusalError"
    assert steps["warm"]["error"]["reason"] == "invalid_output"
    assert len(steps["warm"]["reasks"]) == 2 and steps["novel"]["error"] is None
    # Only the ok judge is aggregated.
    assert all(
        r["n_ok"] == 1 and set(r["judge_scores"]) == {"novel"}
        for r in data["blackbox_scoring"]["score_table"]
    )
    # The refusal was never re-asked; the malformed answer was re-asked once, statelessly.
    strict = [r for r in text.requests if r.seed == judge_seed("strict")]
    warm = [r for r in text.requests if r.seed == judge_seed("warm")]
    assert len(strict) == 1 and len(warm) == 2
    assert [m.role for m in warm[1].messages] == ["system", "user"]
    assert last_user_text(warm[1]).startswith(last_user_text(warm[0]))
    assert "rejected by validation" in last_user_text(warm[1])


async def test_too_few_ok_judges_fails_with_invalid_judge_output(tmp_path: Path) -> None:
    def broken(request: TextRequest) -> str:
        return "{not json" + "x" * 500

    def down(request: TextRequest) -> str:
        raise ServerError("503 from the fake", status=503, attempts=4)

    text = with_judges({"strict": broken, "warm": down})
    with pytest.raises(RunFailed) as caught:
        await run_generation(make_cfg(tmp_path, *ENSEMBLE), backends(text))
    error = caught.value.error
    assert error.type == "ModelOutputError" and error.phase == "pipeline"
    assert error.path == "pipeline/blackbox_scoring/select"
    message = error.message
    assert message.startswith("invalid_judge_output")
    assert "strict=parse_error" in message and "warm=error" in message and "novel=ok" in message
    assert "pipeline/blackbox_scoring/judges/strict" in message
    preview = message.split("output preview: ", 1)[1]
    assert len(preview) <= 204  # the 200-character preview plus its quotes and ")"
    data = transcript(tmp_path)
    assert data["error"]["type"] == "ModelOutputError"
    assert [j["status"] for j in data["blackbox_scoring"]["judges"]] == [
        "parse_error",
        "error",
        "ok",
    ]
    assert data["blackbox_scoring"]["judges"][1]["attempts"] == 1
    assert next(s for s in data["steps"] if s["name"] == "warm")["attempts"] == 4
    assert data["blackbox_scoring"]["selected_id"] is None
    assert leftover_files(tmp_path) == []


async def test_malformed_card_is_reasked_then_fails_at_its_step(tmp_path: Path) -> None:
    card_b_seed = derive_seed(SEED, "step", "idea", "B")

    def fn(request: TextRequest) -> str:
        if role(request) == "idea_card" and request.seed == card_b_seed:
            return '{"hook": "no options here", "narrative": "n"}'
        return scoring_answer(request)

    text = FunctionTextBackend(fn)
    every_card = "prompt.scoring.min_ok_cards=6"  # no card may be dropped
    with pytest.raises(RunFailed) as caught:
        await run_generation(make_cfg(tmp_path, *ENSEMBLE, every_card), backends(text))
    assert caught.value.error.path == "pipeline/blackbox_scoring/ideas/idea_B"
    assert "options" in caught.value.error.message
    assert sum(1 for r in text.requests if r.seed == card_b_seed) == 2  # asked, re-asked once
    assert not any(role(r) == "idea_scores" for r in text.requests)
    assert leftover_files(tmp_path) == []
    bbs = transcript(tmp_path)["blackbox_scoring"]
    assert bbs["judges"] == [] and bbs["selected_id"] is None  # no judge ran
    assert [c["id"] for c in bbs["candidates"]] == list("ABCDEF")


async def test_hints_that_leak_the_likes_are_reasked_then_fail(tmp_path: Path) -> None:
    def fn(request: TextRequest) -> str:
        if role(request) == "generator_profile_hints":
            return json.dumps(
                {"adjectives": ["teal", "misty coastal landscapes", "quiet"], "avoid": []}
            )
        return scoring_answer(request)

    text = FunctionTextBackend(fn)
    with pytest.raises(RunFailed) as caught:
        await run_generation(make_cfg(tmp_path, *ENSEMBLE), backends(text))
    assert caught.value.error.path == "pipeline/blackbox_scoring/profile_abstraction"
    message = caught.value.error.message
    assert "names a colour (teal)" in message and "copies words from the likes" in message
    asks = [r for r in text.requests if role(r) == "generator_profile_hints"]
    assert len(asks) == 2  # the answer, then one re-ask (max_reasks 1) carrying the problems
    assert "names a colour (teal)" in last_user_text(asks[1])
    assert "names a colour" not in last_user_text(asks[0])
    assert not any(role(r) == "idea_card" for r in text.requests)


async def test_generators_never_see_the_raw_likes(tmp_path: Path) -> None:
    text = FunctionTextBackend(scoring_answer)
    await run_generation(make_cfg(tmp_path, *ENSEMBLE), backends(text))
    likes = load_profile(Path(__file__).parents[1] / "config" / "profile.csv").likes
    assert len(likes) >= 5
    generators = [r for r in text.requests if role(r) == "idea_card"]
    assert len(generators) == 6
    for request in generators:
        for message in request.messages:
            for like in likes:
                assert like not in message.content
            assert "quiet, tactile, airy" in last_user_text(request)


async def test_concurrent_runs_with_random_delays_equal_the_sequential_run(tmp_path: Path) -> None:
    jitter = random.Random()  # deliberately unseeded: completion order must not matter

    finished: list[int | None] = []

    async def slow(request: TextRequest) -> str:
        await anyio.sleep(jitter.uniform(0, 0.004))
        if role(request) == "idea_card":
            finished.append(request.seed)
        return scoring_answer(request)

    runs = []
    completion_orders = []
    for i, mode in enumerate(["sequential", "concurrent", "concurrent", "concurrent"]):
        finished.clear()
        tmp = tmp_path / f"run{i}"
        text = FunctionTextBackend(slow)
        await run_generation(
            make_cfg(
                tmp, *ENSEMBLE, "prompt.scoring.exploration_rate=0.5", f"run.concurrency={mode}"
            ),
            backends(text),
        )
        data = transcript(tmp)
        novelty = data["blackbox_scoring"]["novelty"]
        novelty["warning"] = novelty["warning"].replace(str(tmp), "<tmp>")
        runs.append((data, text.requests))
        completion_orders.append(tuple(finished))
    reference = runs[0][0]
    for data, _ in runs[1:]:
        assert untimed_steps(data) == untimed_steps(reference)
        assert data["blackbox_scoring"] == reference["blackbox_scoring"]
        assert data["final_image_prompt"] == reference["final_image_prompt"]
    assert reference["blackbox_scoring"]["selected_id"] is not None
    assert reference["blackbox_scoring"]["selection_mode"] in ("exploit", "explore")
    # The concurrent runs really finished their idea calls out of declared order.
    declared = completion_orders[0]
    assert any(order != declared for order in completion_orders[1:])


async def test_each_call_gets_its_own_model_temperature_seed_and_direction(
    tmp_path: Path,
) -> None:
    text = FunctionTextBackend(scoring_answer)
    await run_generation(
        make_cfg(
            tmp_path,
            "prompt.scoring.enabled=true",
            "prompt.scoring.generator_temperature=0.7",
            "prompt.scoring.judge_model=judge-default",
            "prompt.scoring.judges=[{id: a}, {id: b, model: judge-b, temperature: 0.4}]",
        ),
        backends(text),
    )
    scoring = transcript(tmp_path)["blackbox_scoring"]
    ideas = [r for r in text.requests if role(r) == "idea_card"]
    assert [r.seed for r in ideas] == [c["seed"] for c in scoring["candidates"]]
    for request, candidate in zip(ideas, scoring["candidates"], strict=True):
        assert request.temperature == 0.7
        assert candidate["direction"] in last_user_text(request)
    judges = {r.seed: r for r in text.requests if role(r) == "idea_scores"}
    a, b = judges[judge_seed("a")], judges[judge_seed("b")]
    assert (a.model, a.temperature) == ("judge-default", 0.0)
    assert (b.model, b.temperature) == ("judge-b", 0.4)
    assert [(j["id"], j["model"], j["temperature"]) for j in scoring["judges"]] == [
        ("a", "judge-default", 0.0),
        ("b", "judge-b", 0.4),
    ]


# --------------------------------------------------------------------------- the panel

PANEL = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.judges=[{id: strict, rubric: strict}, "
    "{id: taste, rubric: profile_fit, profile: dislikes_only, weight: 2}, "
    "{id: novel, rubric: {file: RUBRIC}, profile: hints}, {id: plain}]",
)


def panel_cfg(tmp_path: Path, *extra: str) -> Any:
    rubric = tmp_path / "rubric.md"
    rubric.write_text("Reward the most unusual card.\n- novelty: +0 to +30\n", encoding="utf-8")
    return make_cfg(tmp_path, *(o.replace("RUBRIC", str(rubric)) for o in PANEL), *extra)


def system_of(request: TextRequest) -> str:
    return next(m.content for m in request.messages if m.role == "system")


async def test_each_judge_gets_its_own_rubric_and_view_of_the_profile(tmp_path: Path) -> None:
    text = FunctionTextBackend(scoring_answer)
    await run_generation(panel_cfg(tmp_path), backends(text))
    judges = {r.seed: r for r in text.requests if role(r) == "idea_scores"}
    strict, taste, novel, plain = (
        judges[judge_seed(j)] for j in ("strict", "taste", "novel", "plain")
    )
    profile = load_profile(Path(__file__).parents[1] / "config" / "profile.csv")
    likes, dislikes = profile.likes, profile.dislikes
    assert len(likes) >= 5 and len(dislikes) >= 5

    # Rubrics: each judge's system prompt holds its own, and only its own.
    assert "Rubric (strict):" in system_of(strict) and "Be harsh" in system_of(strict)
    assert "Rubric (profile_fit):" in system_of(taste)
    assert "Rubric (file:rubric, custom):" in system_of(novel)
    assert "Reward the most unusual card." in system_of(novel)
    assert "Rubric" not in system_of(plain)  # default: the first wave's instruction
    assert "suits the viewer's taste and stays fresh" in system_of(plain)
    assert len({system_of(r) for r in (strict, taste, novel, plain)}) == 4

    # Profile views: raw shows the likes; dislikes_only shows no like at all; hints show the
    # generator-safe hints instead of the profile.
    for request in (strict, plain):
        assert all(like in last_user_text(request) for like in likes)
    for request in (taste, novel):
        for message in request.messages:
            assert not any(like in message.content for like in likes)
    assert all(d in last_user_text(taste) for d in dislikes)
    assert "The viewer's dislikes" in last_user_text(taste)
    assert "quiet, tactile, airy" in last_user_text(novel)  # the hints of scoring_answer


async def test_the_record_says_what_each_judge_saw_and_weighed(tmp_path: Path) -> None:
    text = FunctionTextBackend(scoring_answer)
    await run_generation(panel_cfg(tmp_path), backends(text))
    bbs = transcript(tmp_path)["blackbox_scoring"]
    seen = {j["id"]: (j["rubric"], j["profile"], j["weight"]) for j in bbs["judges"]}
    assert seen == {
        "strict": ("strict", "raw", 1.0),
        "taste": ("profile_fit", "dislikes_only", 2.0),
        "novel": ("file:rubric", "hints", 1.0),
        "plain": ("default", "raw", 1.0),
    }
    snapshot = {j["id"]: j for j in bbs["config_snapshot"]["judges"]}
    assert snapshot["novel"]["rubric"]["source"] == "file"
    assert snapshot["novel"]["rubric"]["text"].startswith("Reward the most unusual card.")
    assert snapshot["strict"]["rubric"] == {"name": "strict", "source": "builtin"}
    assert (bbs["aggregation"], bbs["normalise"]) == ("median", "robust")  # the defaults
    steps = {s["name"]: s for s in transcript(tmp_path)["steps"] if "/judges/" in s["path"]}
    assert steps["taste"]["meta"]["rubric"] == "profile_fit"
    assert steps["taste"]["meta"]["profile"] == "dislikes_only"


async def test_the_configured_aggregation_decides_the_selection(tmp_path: Path) -> None:
    """Two judges: ``heavy`` (weight 3) prefers card B, ``light`` prefers card A. The median
    of two scores ties them (broken by id: A); the weighted ones follow the heavier judge."""
    prefers = {"heavy": "B", "light": "A"}

    def fn(request: TextRequest) -> str:
        if role(request) != "idea_scores":
            return scoring_answer(request)
        assert request.json_schema is not None
        ids = {"enum": request.json_schema.schema["properties"]["scores"]["required"]}
        judge = next(j for j in prefers if request.seed == judge_seed(j))
        return json.dumps(
            {"scores": [{"id": i, "score": 90 if i == prefers[judge] else 20} for i in ids["enum"]]}
        )

    chosen = {}
    for method in ("median", "weighted_median", "mean"):
        tmp = tmp_path / method
        await run_generation(
            make_cfg(
                tmp,
                "prompt.scoring.enabled=true",
                "prompt.scoring.num_ideas=3",
                "prompt.scoring.exploration_rate=0",
                "prompt.scoring.judges=[{id: heavy, weight: 3}, {id: light}]",
                "prompt.scoring.min_ok_judges=2",
                f"prompt.scoring.aggregation={method}",
            ),
            backends(FunctionTextBackend(fn)),
        )
        bbs = transcript(tmp)["blackbox_scoring"]
        rows = {r["id"]: r for r in bbs["score_table"]}
        chosen[method] = (bbs["selected_id"], rows["A"]["aggregate"], rows["B"]["aggregate"])
        assert rows["A"]["median"] == rows["B"]["median"] == 55
    assert chosen["median"] == ("A", 55, 55)  # a tie, broken by id
    assert chosen["weighted_median"] == ("B", 20, 90)
    assert chosen["mean"] == ("B", 37.5, 72.5)


def positions_json(request: TextRequest) -> str:
    """A weak model's judge answer: each card scored by its place in the order shown."""
    assert request.json_schema is not None
    ids = request.json_schema.schema["properties"]["scores"]["required"]
    return json.dumps({"scores": [{"id": i, "score": n} for n, i in enumerate(ids)]})


async def test_a_judge_scoring_by_position_is_degenerate_and_left_out(tmp_path: Path) -> None:
    text = with_judges({"warm": positions_json})
    cfg = make_cfg(tmp_path, *ENSEMBLE, "prompt.scoring.min_ok_judges=2")
    await run_generation(cfg, backends(text))
    data = transcript(tmp_path)
    statuses = {j["id"]: (j["status"], j["attempts"]) for j in data["blackbox_scoring"]["judges"]}
    assert statuses == {"strict": ("ok", 1), "warm": ("degenerate", 2), "novel": ("ok", 1)}
    warm = next(s for s in data["steps"] if s["name"] == "warm")
    assert warm["error"]["reason"] == "gate:judge_degenerate"
    assert [r["error"].split(":")[:2] for r in warm["reasks"]] == [["gate", "judge_degenerate"]] * 2
    assert all(
        set(r["judge_scores"]) == {"strict", "novel"}
        for r in data["blackbox_scoring"]["score_table"]
    )
    # The re-ask told the judge why.
    warm_requests = [r for r in text.requests if r.seed in judge_seeds("warm")]
    assert "gate:judge_degenerate" in last_user_text(warm_requests[1])
    record = RunRecord.model_validate(data)
    counts = gate_counts(record)
    assert (counts["judge_degenerate"].rejected, counts["judge_degenerate"].failed) == (2, 1)
    assert counts["judge_degenerate"].paths == ["pipeline/blackbox_scoring/judges/warm"]
    assert gate_lines(record) == ["  Gates       judge_degenerate 2 rejected, 1 failed"]
    assert any(ln.split()[:2] == ["warm", "degenerate"] for ln in scoring_lines_of(record))


async def test_degenerate_judges_count_against_the_quorum(tmp_path: Path) -> None:
    text = with_judges({"warm": positions_json, "strict": positions_json})
    with pytest.raises(RunFailed) as caught:
        await run_generation(make_cfg(tmp_path, *ENSEMBLE), backends(text))
    assert "strict=degenerate" in caught.value.error.message
    assert "warm=degenerate" in caught.value.error.message


def scoring_lines_of(record: RunRecord) -> list[str]:
    """The summary's lines, stripped (a judge's line reads ``<id> <status> rubric ...``)."""
    return [
        ln.strip().removeprefix("Judges").strip() for ln in record_lines(record, whole_prompt=False)
    ]


async def test_a_card_still_invalid_is_dropped_and_recorded_while_two_remain(
    tmp_path: Path,
) -> None:
    """A small model's card that loops ("tactile, tactile, ...", cut at the 600-character
    limit) is dropped after its re-ask, recorded, never judged; the run goes on."""
    card_b_seed = derive_seed(SEED, "step", "idea", "B")
    tactile = ("The luminous, tactile, tactile, airy, tactile, " * 20)[:600]

    def fn(request: TextRequest) -> str:
        if role(request) == "idea_card" and request.seed == card_b_seed:
            data = json.loads(scoring_answer(request))
            return json.dumps({**data, "narrative": tactile})
        return scoring_answer(request)

    text = FunctionTextBackend(fn)
    await run_generation(make_cfg(tmp_path, *ENSEMBLE), backends(text))
    bbs = transcript(tmp_path)["blackbox_scoring"]
    (b,) = [c for c in bbs["candidates"] if c["id"] == "B"]
    assert b["card"] is None and "card_degenerate" in b["invalid"]
    assert all("invalid" not in c for c in bbs["candidates"] if c["id"] != "B")
    assert all(set(j["order"]) == set("ACDEF") for j in bbs["judges"])
    assert [r["id"] for r in bbs["score_table"]] == list("ACDEF")
    assert bbs["selected_id"] != "B"


async def test_too_few_valid_cards_fail_the_run_at_the_first_dropped_card(tmp_path: Path) -> None:
    bad = {derive_seed(SEED, "step", "idea", c) for c in "BCDEF"}

    def fn(request: TextRequest) -> str:
        if role(request) == "idea_card" and request.seed in bad:
            return '{"hook": "no options here", "narrative": "n"}'
        return scoring_answer(request)

    with pytest.raises(RunFailed) as caught:
        await run_generation(make_cfg(tmp_path, *ENSEMBLE), backends(FunctionTextBackend(fn)))
    error = caught.value.error
    assert error.path == "pipeline/blackbox_scoring/ideas/idea_B"
    assert "only 1 of 6 card(s) passed their gates, at least 2 required" in error.message
    assert "prompt.scoring.min_ok_cards" in error.message


async def test_an_all_equal_judge_is_not_reasked_and_a_positional_one_gets_its_own_seed(
    tmp_path: Path,
) -> None:
    def equal_json(request: TextRequest) -> str:
        assert request.json_schema is not None
        ids = request.json_schema.schema["properties"]["scores"]["required"]
        return json.dumps({"scores": dict.fromkeys(ids, 75)})

    text = with_judges({"warm": positions_json, "novel": equal_json})
    cfg = make_cfg(tmp_path, *ENSEMBLE, "prompt.scoring.min_ok_judges=1")
    await run_generation(cfg, backends(text))
    data = transcript(tmp_path)
    steps = {s["name"]: s for s in data["steps"] if s["name"] in ("warm", "novel")}
    novel = [r for r in text.requests if r.seed in judge_seeds("novel")]
    assert len(novel) == 1 and len(steps["novel"]["reasks"]) == 1
    assert "not re-asked" in steps["novel"]["reasks"][0]["error"]
    warm = [r for r in text.requests if r.seed in judge_seeds("warm")]
    assert [r.seed == judge_seed("warm") for r in warm] == [True, False]
    assert warm[1].temperature == 0.3
    (first, _) = steps["warm"]["reasks"]
    assert first["seed"] == warm[1].seed and first["temperature"] == 0.3


async def test_the_novelty_keys_set_the_penalty_a_run_subtracts(tmp_path: Path) -> None:
    """``novelty.penalty_per_share`` and ``novelty.max_penalty`` reach the score table: every
    card repeats the motif ``lantern keeper`` of 3 of the last 4 prompts, so it costs
    per_share x 0.75, at most the cap, and the effective score is the aggregate less it;
    every judge is told the motif."""

    async def penalties(name: str, *keys: str) -> set[float]:
        out = tmp_path / name
        out.mkdir()
        prompts = ["Lantern keeper at dusk", "A lantern keeper asleep", "Lantern keeper, rain"]
        for i, prompt in enumerate([*prompts, "Glacier caves at noon"]):
            append_generation_row(
                out / "generations.csv",
                {
                    "generation_id": f"g{i}",
                    "selected_concepts": ["Baroque", "Calm"],
                    "final_image_prompt": prompt,
                    "created_at": "2024-05-01T10:00:00Z",
                },
            )
        text = FunctionTextBackend(scoring_answer)
        await run_generation(make_cfg(out, *ENSEMBLE, *keys), backends(text))
        bbs = transcript(out)["blackbox_scoring"]
        assert bbs["novelty"]["used"] is True
        judged = [r for r in text.requests if role(r) == "idea_scores"]
        assert len(judged) == 3
        assert all("lantern keeper (3/4)" in last_user_text(r) for r in judged)
        for row in bbs["score_table"]:
            assert row["effective_score"] == max(
                0, round(row["aggregate"] - row["novelty_penalty"], 3)
            )
        return {row["novelty_penalty"] for row in bbs["score_table"]}

    per_share = "prompt.scoring.novelty.penalty_per_share"
    assert await penalties("twenty", f"{per_share}=20") == {15.0}
    assert await penalties("forty", f"{per_share}=40") == {30.0}
    assert await penalties("capped", f"{per_share}=40", "prompt.scoring.novelty.max_penalty=5") == {
        5.0
    }


async def test_each_judge_sees_the_cards_in_the_order_its_own_seed_makes(tmp_path: Path) -> None:
    """``rng_for(run_seed, "judge_order", judge id)`` shuffles the cards each judge is shown;
    the record's ``judges[].order`` and the step's ``meta.order`` say the same."""
    text = FunctionTextBackend(scoring_answer)
    await run_generation(make_cfg(tmp_path, *ENSEMBLE), backends(text))
    data = transcript(tmp_path)
    steps = {s["path"]: s for s in data["steps"]}
    for judge in data["blackbox_scoring"]["judges"]:
        expected = list("ABCDEF")
        rng_for(SEED, "judge_order", judge["id"]).shuffle(expected)
        (request,) = [r for r in text.requests if r.seed == judge_seed(judge["id"])]
        shown = [json.loads(line)["id"] for line in last_user_text(request).splitlines()
                 if line.startswith('{"id"')]  # fmt: skip
        assert shown == judge["order"] == expected
        assert steps[judge["path"]]["meta"]["order"] == expected
