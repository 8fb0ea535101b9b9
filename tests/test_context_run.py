"""Context injectors in whole runs: on 2026-10-25 with seed 1 the
holiday (Halloween, six days on) applies and the guidance is in the record and in the first
stage prompt (and the system prompt with ``both``); the same seed and date send identical
requests; a date with no holiday in the window records ``no_holiday_in_window``; context
changes neither the concepts nor, when nothing applies, a single request; judges never get
the guidance, in one round or several, while every generator does."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from image_project.backends.base import TextRequest
from image_project.cli import command as cli
from image_project.context.base import GUIDANCE_HEADER
from image_project.run.driver import run_generation
from image_project.seeding import rng_for
from image_project.stages.standard import SYSTEM_PROMPT
from image_project.testing import FunctionTextBackend
from tests.test_app import answer, backends, make_cfg, transcript
from tests.test_cli import REPO, write_config
from tests.test_evolution_run import EVOLUTION, LLM
from tests.test_scoring_run import ENSEMBLE, role, scoring_answer

HALLOWEEN = ("context.enabled=true", "context.date=2026-10-25", "prompt.random_seed=1")
"""Seed 1 on 2026-10-25: the holiday's roll (0.216) is below its probability (0.379)."""
FIRST = "pipeline/initial_prompt/draft"


def cli_run(
    tmp: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[dict[str, Any], str]:
    """One offline run through the CLI, in-process: its transcript and stdout."""
    tmp.mkdir(parents=True, exist_ok=True)
    config = write_config(tmp)
    capsys.readouterr()
    code = cli.main(["--config", str(config), "--offline", *args], env={}, root=REPO)
    out = capsys.readouterr().out
    assert code == 0, out
    (path,) = (tmp / "out" / "logs").glob("*_transcript.json")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data, out


def step(data: dict[str, Any], path: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in data["steps"] if s["path"] == path)
    return found


def system_of(request: TextRequest) -> str:
    return "\n".join(m.content for m in request.messages if m.role == "system")


def request_text(request: TextRequest) -> str:
    return "\n".join(m.content for m in request.messages)


def test_on_2026_10_25_with_seed_1_the_holiday_applies_and_the_guidance_is_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = cli_run(
        tmp_path, capsys, "--seed", "1", "--date", "2026-10-25", "--set", "context.enabled=true"
    )
    context = data["context"]
    assert (context["date_used"], context["date_source"]) == ("2026-10-25", "fixed")
    assert context["injection_location"] == "prompt" and context["system_prompt"] is None
    season, holiday = context["injectors"]
    assert season["name"] == "season" and season["metadata"]["season"] == "fall"
    assert holiday["applied"] is True and holiday["reason"] == "roll_below_probability"
    p = 0.15 + (0.55 - 0.15) * (14 - 6) / 14
    assert holiday["probability"] == pytest.approx(p)
    assert holiday["roll"] == rng_for(1, "context", "holiday").random() < p
    meta = holiday["metadata"]
    assert (meta["holiday"], meta["holiday_date"], meta["days_until"]) == (
        "Halloween",
        "2026-10-31",
        6,
    )
    assert (
        meta["computed_probability"] == holiday["probability"] and meta["roll"] == holiday["roll"]
    )
    assert meta["softened"] is True  # the example profile dislikes "body horror"
    guidance = context["guidance"]
    assert guidance.startswith(GUIDANCE_HEADER) and "Halloween is in 6 days" in guidance
    assert step(data, FIRST)["prompt"].endswith("\n\n" + guidance)
    later = [s for s in data["steps"] if s["type"] == "chat" and s["path"] != FIRST]
    assert later and not any(GUIDANCE_HEADER in s["prompt"] for s in later)
    assert data["timing"]["phases_s"].keys() >= {"context"}
    assert "  Context     2026-10-25 (fixed); guidance in the first stage prompt" in out
    assert "holiday: applied (roll_below_probability; roll 0.216 vs p 0.379)" in out


@pytest.mark.anyio
async def test_both_puts_the_guidance_in_the_system_prompt_too_and_system_only_there(
    tmp_path: Path,
) -> None:
    seen = {}
    for location in ("both", "system"):
        text = FunctionTextBackend(answer)
        cfg = make_cfg(tmp_path / location, *HALLOWEEN, f"context.injection_location={location}")
        result = await run_generation(cfg, backends(text))
        context = result.record.context
        assert context.enabled and context.guidance
        assert context.system_prompt == f"{SYSTEM_PROMPT}\n\n{context.guidance}"
        conversation = [r for r in text.requests if SYSTEM_PROMPT in system_of(r)]
        assert len(conversation) == 15  # six drafts, five critics, three drafts, one synthesis
        assert all(system_of(r) == context.system_prompt for r in conversation)
        own_system = [r for r in text.requests if SYSTEM_PROMPT not in system_of(r)]
        assert own_system and not any(GUIDANCE_HEADER in request_text(r) for r in own_system)
        first = result.record.chat_steps[1]
        assert first.path == FIRST
        seen[location] = first.prompt.endswith(context.guidance)
    assert seen == {"both": True, "system": False}


@pytest.mark.anyio
async def test_the_same_seed_and_date_twice_send_identical_requests(tmp_path: Path) -> None:
    sent = []
    for name in ("a", "b"):
        text = FunctionTextBackend(answer)
        result = await run_generation(
            make_cfg(tmp_path / name, *HALLOWEEN, "context.injection_location=both"),
            backends(text),
        )
        assert result.record.context.enabled
        sent.append(sorted(repr(r) for r in text.requests))
    assert sent[0] == sent[1] and any("Halloween" in r for r in sent[0])


@pytest.mark.anyio
async def test_a_date_with_no_holiday_in_the_window_records_no_holiday_in_window(
    tmp_path: Path,
) -> None:
    await run_generation(
        make_cfg(tmp_path, "context.enabled=true", "context.date=2026-03-01"),
        backends(FunctionTextBackend(answer)),
    )
    context = transcript(tmp_path)["context"]
    holiday = context["injectors"][1]
    assert holiday["applied"] is False and holiday["reason"] == "no_holiday_in_window"
    assert holiday["probability"] is None and holiday["roll"] is None
    assert holiday["metadata"]["reason"] == "no_holiday_in_window"
    assert holiday["metadata"]["applied"] is False
    assert "spring" in context["guidance"] and "holiday" not in context["guidance"].lower()


@pytest.mark.anyio
async def test_context_changes_no_concept_and_no_request_when_nothing_applies(
    tmp_path: Path,
) -> None:
    runs = {}
    for name, extra in (
        ("off", ()),
        ("empty", ("context.enabled=true", "context.injectors=[]")),
        ("on", HALLOWEEN),
    ):
        text = FunctionTextBackend(answer)
        cfg = make_cfg(tmp_path / name, "prompt.random_seed=1", *extra)
        result = await run_generation(cfg, backends(text))
        runs[name] = (result.record, sorted(repr(r) for r in text.requests))
    (off, off_sent), (empty, empty_sent), (on, _) = runs["off"], runs["empty"], runs["on"]
    assert off.selected_concepts == empty.selected_concepts == on.selected_concepts
    assert off.context.enabled is False
    assert empty.context.enabled and empty.context.guidance == ""
    assert empty_sent == off_sent


def has_guidance(step: dict[str, Any], guidance: str) -> tuple[bool, bool]:
    return guidance in step["prompt"], guidance in (step["system_prompt"] or "")


@pytest.mark.anyio
async def test_judges_never_get_the_guidance_while_the_generators_do(tmp_path: Path) -> None:
    judged: list[TextRequest] = []

    def recording(request: TextRequest) -> str:
        if role(request) == "idea_scores":
            judged.append(request)
        return scoring_answer(request)

    cfg = make_cfg(tmp_path, *ENSEMBLE, *HALLOWEEN, "context.injection_location=both")
    await run_generation(cfg, backends(FunctionTextBackend(recording)))
    data = transcript(tmp_path)
    guidance = data["context"]["guidance"]
    assert "Halloween" in guidance
    assert len(judged) == 3 and not any(GUIDANCE_HEADER in request_text(r) for r in judged)
    for s in data["steps"]:
        if s["type"] != "chat":
            continue
        if "/ideas/idea_" in s["path"]:
            assert has_guidance(s, guidance) == (True, True), s["path"]
        elif s["path"].startswith("pipeline/blackbox_scoring/"):  # hints, judges
            assert has_guidance(s, guidance) == (False, False), s["path"]


def test_in_rounds_variants_get_the_guidance_and_judges_and_selector_never(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = [a for pair in zip(["--set"] * 99, (*EVOLUTION, LLM), strict=False) for a in pair]
    data, _ = cli_run(
        tmp_path,
        capsys,
        "--seed",
        "1",
        "--date",
        "2026-10-25",
        "--set",
        "context.enabled=true",
        "--set",
        "context.injection_location=both",
        *sets,
    )
    guidance = data["context"]["guidance"]
    assert "Halloween" in guidance
    kinds = {"generator": 0, "judge": 0, "selector": 0}
    for s in data["steps"]:
        if s["type"] != "chat" or not s["path"].startswith("pipeline/blackbox_scoring/"):
            continue
        name = s["name"]
        if name.startswith(("idea_", "variant_")):
            kinds["generator"] += 1
            assert has_guidance(s, guidance) == (True, True), s["path"]
        else:
            kinds["selector" if name == "selector" else "judge"] += 1
            assert GUIDANCE_HEADER not in s["prompt"] + (s["system_prompt"] or ""), s["path"]
    assert kinds["generator"] > 6 and kinds["judge"] >= 9 and kinds["selector"] == 2


@pytest.mark.anyio
async def test_without_a_date_the_run_takes_its_local_day_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("image_project.run.phases._today", lambda: date(2026, 12, 24))
    cfg = make_cfg(tmp_path, "context.enabled=true", "prompt.random_seed=1")
    result = await run_generation(cfg, backends(FunctionTextBackend(answer)))
    context = result.record.context
    assert context.enabled
    assert (context.date_used, context.date_source) == ("2026-12-24", "today")
    assert context.injectors[1].metadata["holiday"] == "Christmas Day"
