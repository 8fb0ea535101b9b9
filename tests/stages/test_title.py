"""Title sanitising, validation, deterministic disambiguation, the title ChatStep run
through the real engine with a scripted backend, and ``run_title``'s refusal fallback."""

from __future__ import annotations

import logging
from typing import TypedDict, Unpack

import pytest

from image_project.backends.base import Message, TextReply
from image_project.engine.context import Context
from image_project.engine.output import TextOutput
from image_project.engine.runner import ChatRunner
from image_project.errors import EmptyPromptError, ServerError, location_of
from image_project.record.events import ChatEvent
from image_project.stages.title import (
    ROMAN_NUMERALS,
    TITLE_KEY,
    TITLE_SYSTEM_PROMPT,
    TitleCollisionError,
    TitleResult,
    disambiguate,
    resolve_collision,
    run_title,
    sanitize_title,
    title_step,
    validate_title,
)
from image_project.testing import ScriptedTextBackend, last_user_text

IMAGE_PROMPT = "A lighthouse on a turquoise sea at dawn, painted in thick impasto."

# -- sanitize --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Turquoise Citadel", "Turquoise Citadel"),
        ('  "Turquoise   Citadel"  ', "Turquoise Citadel"),
        ("\u201cTurquoise Citadel\u201d", "Turquoise Citadel"),
        ("\u2018Turquoise Citadel\u2019", "Turquoise Citadel"),
        ("'\"Turquoise Citadel\"'", "Turquoise Citadel"),
        ("\n\nTurquoise\tCitadel\n  \n", "Turquoise Citadel"),
    ],
)
def test_sanitize_accepts(raw: str, expected: str) -> None:
    assert sanitize_title(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("   \n \n", "empty"),
        ('""', "empty once its quotes"),
        ("Turquoise Citadel\nA title about the sea", "2 non-empty lines"),
        (None, "text"),
    ],
)
def test_sanitize_rejects(raw: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        sanitize_title(raw)


# -- validate --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "title",
    [
        "Turquoise Citadel",
        "A Quiet Harbor",
        "Sea-Glass Morning Tide",
        "Turquoise Citadel II",
        "Quiet Blue Harbor Dawn-XIV",
        "Chapter XX",
    ],
)
def test_validate_accepts(title: str) -> None:
    validate_title(title, ["Other Title"])


@pytest.mark.parametrize(
    ("title", "reason"),
    [
        ('Turquoise "Citadel"', "quote characters"),
        ("Turquoise Citadel\u2019s", "quote characters"),
        ("Turquoise Citadel!", "other than letters"),
        ("Turquoise Citadel 2", "other than letters"),
        ("Café Lights", "other than letters"),
        ("Turquoise  Citadel", "repeated spaces"),
        ("Citadel", "1 word"),
        ("The Long Quiet Turquoise Citadel", "5 word"),
        ("Turquoise citadel", "word 2 is not Title Case"),
        ("TURQUOISE Citadel", "word 1 is not Title Case"),
        ("Sea-glass Morning", "word 1 is not Title Case"),
        ("Sea- Glass", "stray hyphen"),
        ("Sea--Glass Tide", "stray hyphen"),
        ("Turquoise Citadel XXI", "word 3 is not Title Case"),
    ],
)
def test_validate_rejects_with_a_specific_reason(title: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        validate_title(title, [])


def test_validate_collision_is_case_insensitive_and_typed() -> None:
    with pytest.raises(TitleCollisionError, match="already taken") as info:
        validate_title("Turquoise Citadel", ["Salt Moon", "turquoise  CITADEL"])
    assert info.value.title == "Turquoise Citadel"
    assert info.value.existing == "turquoise  CITADEL"


# -- disambiguate ----------------------------------------------------------------------


def test_disambiguate_unused_title_is_kept() -> None:
    assert disambiguate("Turquoise Citadel", ["Salt Moon"]) == "Turquoise Citadel"


def test_disambiguate_appends_roman_numerals() -> None:
    assert disambiguate("Turquoise Citadel", ["Turquoise Citadel"]) == "Turquoise Citadel II"
    taken = ["turquoise citadel", "Turquoise Citadel II"]
    assert disambiguate("Turquoise Citadel", taken) == "Turquoise Citadel III"


def test_disambiguate_four_word_title_hyphenates_the_last_word() -> None:
    taken = ["Quiet Blue Harbor Dawn"]
    assert disambiguate("Quiet Blue Harbor Dawn", taken) == "Quiet Blue Harbor Dawn-II"
    taken.append("Quiet Blue Harbor Dawn-II")
    assert disambiguate("Quiet Blue Harbor Dawn", taken) == "Quiet Blue Harbor Dawn-III"


def test_disambiguate_continues_numbering_of_a_numbered_title() -> None:
    taken = ["Turquoise Citadel", "Turquoise Citadel II"]
    assert disambiguate("Turquoise Citadel II", taken) == "Turquoise Citadel III"


def test_disambiguate_never_runs_out_of_numerals() -> None:
    taken = ["Salt Moon"] + [f"Salt Moon {ROMAN_NUMERALS[n]}" for n in range(1, 20)]
    result = disambiguate("Salt Moon", taken)
    assert result == "Salt Moon I-I"
    validate_title(result, taken)
    assert disambiguate("Salt Moon", [*taken, result]) == "Salt Moon I-II"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("the café's turquoise citadel!!", "The Cafes Turquoise Citadel"),
        ("Title: Salt & Moon, at dawn over the sea\nmore text", "Title Salt Moon At"),
        ("42", "Untitled Work"),
        ("", "Untitled Work"),
        ("Citadel", "Untitled Work"),
    ],
)
def test_disambiguate_unusable_title_falls_back_to_a_loose_cleanup(raw: str, expected: str) -> None:
    assert disambiguate(raw, []) == expected
    validate_title(expected, [])


def test_disambiguate_fallback_title_is_numbered_too() -> None:
    taken = ["Untitled Work", "Untitled Work II"]
    assert disambiguate("???", taken) == "Untitled Work III"


def test_disambiguate_is_deterministic() -> None:
    taken = [f"Turquoise Citadel {n}" for n in ("II", "IV")] + ["Turquoise Citadel"]
    assert {disambiguate("Turquoise Citadel", taken) for _ in range(5)} == {"Turquoise Citadel III"}


def test_resolve_collision() -> None:
    result = TitleResult("Turquoise Citadel", "llm", "Turquoise Citadel", 1)
    assert resolve_collision(result, ["Salt Moon"]) is result
    fresh = resolve_collision(result, ["TURQUOISE CITADEL"])
    assert fresh == TitleResult("Turquoise Citadel II", "llm_disambiguated", result.raw, 1)
    fallback = TitleResult("Untitled Work", "fallback", "", 3)
    assert resolve_collision(fallback, ["Untitled Work"]).source == "fallback"


# -- the step through the engine ------------------------------------------------------


class TitleStepOptions(TypedDict, total=False):
    """The keyword options of :func:`title_step`."""

    temperature: float
    max_attempts: int
    seed: int | None


async def run_title_step(
    answers: list[str], existing: list[str], **kw: Unpack[TitleStepOptions]
) -> tuple[TitleResult, Context, ScriptedTextBackend]:
    backend = ScriptedTextBackend(answers)
    ctx = Context.with_system("pipeline system prompt")
    step = title_step(IMAGE_PROMPT, existing, **kw)
    result = (await ChatRunner(backend).root(ctx).ask(step)).value
    backend.assert_all_used()
    assert isinstance(result, TitleResult)
    return result, ctx, backend


def chat_event(ctx: Context) -> ChatEvent:
    """The one step event of a context that ran one chat step."""
    [record] = ctx.steps
    assert isinstance(record, ChatEvent)
    return record


@pytest.mark.anyio
async def test_step_valid_first_answer() -> None:
    result, ctx, backend = await run_title_step(['"Turquoise Citadel"'], ["Salt Moon"], seed=7)
    assert result == TitleResult("Turquoise Citadel", "llm", '"Turquoise Citadel"', 1)
    request = backend.requests[0]
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.messages[0].content == TITLE_SYSTEM_PROMPT
    assert IMAGE_PROMPT in last_user_text(request)
    assert "- Salt Moon" in last_user_text(request)
    assert request.temperature == pytest.approx(0.2)
    assert request.seed == 7
    # merge="none": the pipeline conversation is untouched.
    assert ctx.messages == (Message("system", "pipeline system prompt"),)
    record = chat_event(ctx)
    assert (record.name, record.path, record.type) == ("title", "title", "chat")
    assert record.params.seed == 7


@pytest.mark.anyio
async def test_step_prompt_lists_only_the_first_25_existing_titles() -> None:
    existing = [f"Title {chr(65 + i // 26)}{chr(97 + i % 26)}" for i in range(30)]
    _, _, backend = await run_title_step(["Turquoise Citadel"], existing)
    prompt = last_user_text(backend.requests[0])
    assert sum(line.startswith("- Title ") for line in prompt.splitlines()) == 25
    assert existing[24] in prompt and existing[25] not in prompt


@pytest.mark.anyio
async def test_step_invalid_then_valid_reasks_with_the_error() -> None:
    result, ctx, backend = await run_title_step(
        ["Turquoise Citadel!\nBecause of the sea.", "Turquoise Citadel"], []
    )
    assert result == TitleResult("Turquoise Citadel", "llm", "Turquoise Citadel", 2)
    assert len(backend.requests) == 2
    reask = last_user_text(backend.requests[1])
    assert "2 non-empty lines" in reask
    assert all(m.role != "assistant" for m in backend.requests[1].messages)
    assert "Because of the sea" not in reask
    record = chat_event(ctx)
    assert len(record.reasks) == 1


@pytest.mark.anyio
async def test_step_always_invalid_falls_back_and_is_recorded() -> None:
    answers = ["turquoise citadel", "Turquoise Citadel 2", "The sea, the lighthouse & dawn"]
    result, ctx, backend = await run_title_step(answers, ["The Sea The Lighthouse"])
    assert result.source == "fallback"
    assert result.attempts == 3
    assert result.raw == answers[-1]
    assert result.title == "The Sea The Lighthouse-II"
    validate_title(result.title, ["The Sea The Lighthouse"])
    record = chat_event(ctx)
    assert record.path == "title"
    assert len(record.reasks) == 3
    assert "not Title Case" in last_user_text(backend.requests[1])
    assert "other than letters" in last_user_text(backend.requests[2])


@pytest.mark.anyio
async def test_step_blank_answers_fall_back_instead_of_failing() -> None:
    result, _, _ = await run_title_step(["", "  "], [], max_attempts=2)
    assert (result.title, result.source, result.attempts) == ("Untitled Work", "fallback", 2)


@pytest.mark.anyio
async def test_step_colliding_answers_are_disambiguated() -> None:
    existing = ["Turquoise Citadel", "Salt Moon"]
    result, ctx, backend = await run_title_step(
        ["Turquoise Citadel", "salt moon", "Turquoise Citadel"], existing
    )
    assert result == TitleResult(
        "Turquoise Citadel II", "llm_disambiguated", "Turquoise Citadel", 3
    )
    assert "already taken" in last_user_text(backend.requests[1])
    assert len(ctx.steps) == 1


@pytest.mark.anyio
async def test_step_earlier_collision_wins_over_a_later_invalid_answer() -> None:
    result, _, _ = await run_title_step(["Salt Moon", "nope"], ["Salt Moon"], max_attempts=2)
    assert result == TitleResult("Salt Moon II", "llm_disambiguated", "Salt Moon", 2)


@pytest.mark.anyio
async def test_step_single_attempt_never_reasks() -> None:
    result, _, backend = await run_title_step(["Salt Moon"], ["Salt Moon"], max_attempts=1)
    assert (result.title, result.attempts) == ("Salt Moon II", 1)
    assert len(backend.requests) == 1


@pytest.mark.anyio
async def test_step_attempt_count_restarts_when_the_step_is_run_again() -> None:
    step = title_step(IMAGE_PROMPT, [])
    backend = ScriptedTextBackend(["bad", "Salt Moon", "Turquoise Citadel"])
    runner = ChatRunner(backend)
    first = (await runner.root(Context()).ask(step)).value
    second = (await runner.root(Context()).ask(step)).value
    assert first.attempts == 2
    assert second.attempts == 1


@pytest.mark.anyio
async def test_step_blank_image_prompt_fails_before_any_call() -> None:
    backend = ScriptedTextBackend([])
    with pytest.raises(EmptyPromptError, match="image prompt is blank") as info:
        await ChatRunner(backend).root(Context()).ask(title_step("   ", []))
    assert backend.requests == []
    location = location_of(info.value)
    assert location is not None and location.path == "title"


def test_step_shape() -> None:
    step = title_step(IMAGE_PROMPT, ["A B"], temperature=0.4, max_attempts=4, seed=3)
    assert (step.name, step.merge) == (TITLE_KEY, "none")
    assert step.stateless and step.system_prompt == TITLE_SYSTEM_PROMPT
    assert (step.temperature, step.reask.max, step.seed) == (0.4, 3, 3)
    assert isinstance(step.output, TextOutput) and step.reask.fallback is not None


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
def test_step_rejects_bad_max_attempts(bad: object) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        title_step(IMAGE_PROMPT, [], max_attempts=bad)  # type: ignore[arg-type]


# -- run_title: the app's entry point ---------------------------------------------------


@pytest.mark.anyio
async def test_run_title_returns_the_steps_title() -> None:
    backend = ScriptedTextBackend(['"Turquoise Citadel"'])
    ctx = Context.with_system("pipeline system prompt")
    result = await run_title(ChatRunner(backend).root(ctx), IMAGE_PROMPT, ["Salt Moon"], seed=11)
    assert result == TitleResult("Turquoise Citadel", "llm", '"Turquoise Citadel"', 1)
    assert backend.requests[0].seed == 11
    assert chat_event(ctx).path == "title"
    backend.assert_all_used()


@pytest.mark.anyio
async def test_run_title_keeps_the_steps_own_fallback_for_bad_answers() -> None:
    backend = ScriptedTextBackend(["turquoise citadel", "Salt Moon!", "42"])
    result = await run_title(ChatRunner(backend).root(Context()), IMAGE_PROMPT, [])
    assert (result.title, result.source, result.raw, result.attempts) == (
        "Untitled Work",
        "fallback",
        "42",
        3,
    )
    backend.assert_all_used()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("existing", "title"),
    [([], "Untitled Work"), (["untitled work", "Salt Moon"], "Untitled Work II")],
)
async def test_run_title_refusal_gives_the_deterministic_fallback(
    existing: list[str], title: str, caplog: pytest.LogCaptureFixture
) -> None:
    refusal = TextReply(text=None, model="scripted-model", refusal="I can't title this image.")
    backend = ScriptedTextBackend([refusal])
    caplog.set_level(logging.WARNING, logger="image_project.title")
    result = await run_title(ChatRunner(backend).root(Context()), IMAGE_PROMPT, existing)
    assert result == TitleResult(title, "fallback", "I can't title this image.", 1)
    validate_title(result.title, existing)
    # A refusal is never re-asked: one call only.
    assert len(backend.requests) == 1
    assert any("refused" in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_run_title_transport_error_propagates() -> None:
    backend = ScriptedTextBackend([ServerError("HTTP 500", status=500, attempts=3)])
    ctx = Context()
    with pytest.raises(ServerError, match="HTTP 500") as info:
        await run_title(ChatRunner(backend).root(ctx), IMAGE_PROMPT, [])
    location = location_of(info.value)
    assert location is not None and location.path == "title"
    assert ctx.messages == ()
    assert len(backend.requests) == 1
