"""A re-ask says why the answer was rejected and never quotes it, for every step kind and
every reason (docs/scoring_runs.md, "Quality gates").

Each case is a whole offline run (the offline backend behind a
:class:`~image_project.testing.FunctionTextBackend`) in which the first request of one step
kind is answered with a rejected answer holding a canary: a string (or a number) no
legitimate input holds. The canary must appear in no request the model is sent, the
re-ask's added text (what follows the restated prompt) must state the reason, and it must
not hold the other parts of the answer a message could quote (``also_absent``). A step that
never re-asks a reason (a judge's refusal; a ``logprobs`` judge's sampled scores, gated after
the weighting) must send no re-ask at all.

Step kinds: idea card, variant, judge (the ``list`` protocol; the other protocols read their
answers through the same output parser), the LLM selector, the dislike rewrite, the profile
hints, the title and the prose stages. A canary is matched in any letter case."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from image_project.backends.base import TextReply, TextRequest
from image_project.backends.offline.text import OfflineTextBackend
from image_project.record.events import REJECTED_CHARS
from image_project.record.run import RunRecord
from image_project.record.scoring import IdeaCard
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.testing import FunctionTextBackend, last_user_text
from tests.test_app import backends, make_cfg

pytestmark = pytest.mark.anyio

CANARY = "QX7CANARY"
"""In every rejected answer; in no prompt, profile, concept or rubric."""
TITLE_CANARY = "Zqvcanary"
"""The canary of a title answer: letters only, so that only the rule under test rejects it."""
NUMBER = 987654
"""A number canary, for a score out of range."""

BASE = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.num_ideas=3",
    "prompt.scoring.min_ok_judges=1",
    "prompt.scoring.max_reasks=1",
    "prompt.scoring.judges=[{id: base}]",
)
EVOLUTION = (
    "prompt.scoring.evolution.enabled=true",
    "prompt.scoring.evolution.generations=1",
    "prompt.scoring.evolution.survivors=2",
    "prompt.scoring.evolution.variants_per_survivor=1",
    "prompt.scoring.evolution.selector=llm",
)

Answer = Callable[[TextRequest, Any], "str | TextReply"]
"""A rejected answer, made from the request and the offline backend's valid answer (its
JSON, or its text for a step without a schema)."""


@dataclass(frozen=True)
class Case:
    answer: Answer
    reason: str | None
    """A regex the re-ask's added text must match; None: the step must not re-ask."""
    also_absent: tuple[str, ...] = ()


def system_of(request: TextRequest) -> str:
    return next((m.content for m in request.messages if m.role == "system"), "")


def schema_of(request: TextRequest) -> str | None:
    return request.json_schema.name if request.json_schema is not None else None


def cut(text: str) -> TextReply:
    return TextReply(text=text, model="m", finish_reason="length")


def with_(data: dict[str, Any], **changes: Any) -> str:
    return json.dumps({**data, **changes})


# -- reasons every JSON step shares ---------------------------------------------------------

JSON_CASES: dict[str, Case] = {
    "no_json": Case(
        lambda r, v: f"Here is my long rewritten answer about {CANARY} lanterns", r"found no \{"
    ),
    "text_around": Case(
        lambda r, v: f"Sure, {CANARY}: {json.dumps(v)}", "found text before the object"
    ),
    "text_after": Case(
        lambda r, v: f"{json.dumps(v)}\nHope the {CANARY} helps", "found text after the object"
    ),
    "invalid_json": Case(lambda r, v: '{"' + CANARY + '": }', "not valid JSON"),
    "duplicate_key": Case(lambda r, v: f'{{"{CANARY}": 1, "{CANARY}": 2}}', "duplicate keys"),
    "wrong_field": Case(
        lambda r, v: json.dumps({CANARY: 1}),
        r"not in the schema|unexpected top-level key|required key is missing",
    ),
    "cut_off": Case(lambda r, v: cut('{"' + CANARY + " and on"), "cut off at"),
    "empty": Case(lambda r, v: f"```{CANARY}\n\n```", "the answer is empty"),
    "top_level_array": Case(lambda r, v: json.dumps([CANARY]), r"found no \{"),
}
REFUSAL = f"I'm sorry, but I cannot help with {CANARY}."


# -- the run ------------------------------------------------------------------------------


@dataclass
class Injected:
    """The first request matching ``match`` gets the rejected answer; every other request
    (its re-ask included) the offline backend's."""

    match: Callable[[TextRequest], bool]
    answer: Answer
    request: TextRequest | None = None


async def run_with(tmp: Path, injected: Injected, *config: str) -> FunctionTextBackend:
    offline = OfflineTextBackend()

    async def fn(request: TextRequest) -> str | TextReply:
        if injected.request is None and injected.match(request):
            injected.request = request
            valid = (await offline.complete(request)).text or ""
            return injected.answer(request, json.loads(valid) if request.json_schema else valid)
        return await offline.complete(request)

    backend = FunctionTextBackend(fn)
    with contextlib.suppress(RunFailed):  # a refusal may leave no quorum: the requests count
        await run_generation(make_cfg(tmp, *config), backends(backend))
    return backend


def check(backend: FunctionTextBackend, injected: Injected, case: Case) -> None:
    first = injected.request
    assert first is not None, "no request of this step kind was made"
    sent = [json.dumps([m.content for m in r.messages]) for r in backend.requests]
    canaries = (CANARY, TITLE_CANARY, str(NUMBER))
    leaked = [(i, c) for i, text in enumerate(sent) for c in canaries if c.lower() in text.lower()]
    assert not leaked, f"a rejected answer's text reached a request: {leaked}"
    prompt = last_user_text(first)
    reasks = [
        last_user_text(r)
        for r in backend.requests
        if r is not first
        and system_of(r) == system_of(first)
        and last_user_text(r).startswith(prompt + "\n\n")
    ]
    if case.reason is None:
        assert reasks == [], "this reason is never re-asked"
        return
    assert reasks, "the rejected answer was not re-asked"
    added = reasks[0][len(prompt) :]
    assert re.search(case.reason, added), added
    for part in case.also_absent:
        assert part not in added, (part, added)


async def reask_case(
    tmp: Path, match: Callable[[TextRequest], bool], case: Case, *config: str
) -> None:
    injected = Injected(match, case.answer)
    backend = await run_with(tmp, injected, *config)
    check(backend, injected, case)


# -- idea cards and variants ---------------------------------------------------------------


def _card_field(r: TextRequest, v: Any) -> str:
    options = {**v["options"], "palette": ["palette", *v["options"]["palette"][1:]]}
    return with_(v, hook=f"The {CANARY} keeper", options=options)


def _card_loop(r: TextRequest, v: Any) -> str:
    return with_(v, narrative=" ".join([CANARY] * 6))


def _card_repeat(r: TextRequest, v: Any) -> str:
    options = {**v["options"], "composition": [f"{CANARY} arch", f"{CANARY} arch"]}
    return with_(v, options=options)


def _card_too_many(r: TextRequest, v: Any) -> str:
    options = {**v["options"], "mood": [f"{CANARY} {i}" for i in range(9)]}
    return with_(v, options=options)


def _card_wrong_type(r: TextRequest, v: Any) -> str:
    return with_(v, hook=[CANARY], narrative=7)


CARD_CASES: dict[str, Case] = {
    **JSON_CASES,
    "refusal": Case(lambda r, v: REFUSAL, r"found no \{"),
    "card_field": Case(
        _card_field, r"gate:card_field: options\.palette\[0\] says nothing", ("'palette'",)
    ),
    "card_degenerate_loop": Case(_card_loop, "gate:card_degenerate: narrative .*repetition loop"),
    "card_degenerate_repeat": Case(
        _card_repeat, r"gate:card_degenerate: options\.composition\[1\] repeats"
    ),
    "too_many_items": Case(_card_too_many, "options.mood: List should have at most"),
    "wrong_type": Case(_card_wrong_type, "hook: Input should be a valid string"),
}


def is_card(r: TextRequest) -> bool:
    return schema_of(r) == "idea_card" and system_of(r).startswith("You are one of several")


def is_variant(r: TextRequest) -> bool:
    return schema_of(r) == "idea_card" and system_of(r).startswith("You are an art director")


@pytest.mark.parametrize("reason", list(CARD_CASES))
async def test_a_card_reask_says_why_and_never_quotes(tmp_path: Path, reason: str) -> None:
    await reask_case(tmp_path, is_card, CARD_CASES[reason], *BASE)


@pytest.mark.parametrize("reason", list(CARD_CASES))
async def test_a_variant_reask_says_why_and_never_quotes(tmp_path: Path, reason: str) -> None:
    await reask_case(tmp_path, is_variant, CARD_CASES[reason], *BASE, *EVOLUTION)


# -- what the record keeps of a rejected answer -----------------------------------------------


async def test_a_huge_rejected_answer_is_kept_bounded_with_its_length_and_hash(
    tmp_path: Path,
) -> None:
    """A rejected answer of 3 MB is recorded as its first characters, its full length and its
    SHA-256, in the transcript and in the run store; the accepted answer is kept whole."""
    huge = f"Here is my {CANARY} answer. " + "lantern " * 375_000
    injected = Injected(is_card, lambda r, v: huge)
    await run_with(tmp_path, injected, *BASE)
    (transcript,) = (tmp_path / "logs").glob("*_transcript.json")
    record = RunRecord.model_validate_json(transcript.read_text(encoding="utf-8"))
    reasks = [(e, r) for e in record.chat_steps for r in e.reasks]
    assert len(reasks) == 1
    event, reask = reasks[0]
    assert reask.response == huge[:REJECTED_CHARS]
    assert reask.response_chars == len(huge)
    assert reask.response_sha256 == hashlib.sha256(huge.encode()).hexdigest()
    assert event.response is not None and event.response_chars is None  # accepted: whole
    assert IdeaCard.model_validate_json(event.response)
    assert transcript.stat().st_size < len(huge) / 10
    store = tmp_path / "logs" / "runs.sqlite"
    assert store.exists() and store.stat().st_size < len(huge) / 10
    with sqlite3.connect(store) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                assert not any(isinstance(v, str) and len(v) >= len(huge) for v in row), table


# -- judges, the selector, the dislike rewrite, the hints, the title and the prose -----------


def _step(schema: str | None, system: str) -> Callable[[TextRequest], bool]:
    def match(r: TextRequest) -> bool:
        return schema_of(r) == schema and system_of(r).startswith(system)

    return match


is_judge = _step("idea_scores", "You are a judge")
is_selector = _step("survivor_selection", "You choose which candidates")
is_rewrite = _step("concept_rewrite", "You rewrite art concepts")
is_hints = _step("generator_profile_hints", "You turn a person's art taste profile")
is_title = _step(None, "You name finished artworks")
is_prose = _step(None, "You are an enclave of artists")


@pytest.mark.parametrize("reason", list(JSON_CASES))
async def test_a_judge_reask_says_why_and_never_quotes(tmp_path: Path, reason: str) -> None:
    await reask_case(tmp_path, is_judge, JSON_CASES[reason], *BASE)


@pytest.mark.parametrize("reason", list(JSON_CASES))
async def test_a_selector_reask_says_why_and_never_quotes(tmp_path: Path, reason: str) -> None:
    await reask_case(tmp_path, is_selector, JSON_CASES[reason], *BASE, *EVOLUTION)


@pytest.mark.parametrize("reason", list(JSON_CASES))
async def test_a_rewrite_reask_says_why_and_never_quotes(tmp_path: Path, reason: str) -> None:
    await reask_case(tmp_path, is_rewrite, JSON_CASES[reason], *BASE)


@pytest.mark.parametrize("reason", list(JSON_CASES))
async def test_a_hints_reask_says_why_and_never_quotes(tmp_path: Path, reason: str) -> None:
    await reask_case(tmp_path, is_hints, JSON_CASES[reason], *BASE)


TITLE_CASES: dict[str, Case] = {
    "not_title_case": Case(lambda r, v: f"{TITLE_CANARY.lower()} harbour", "not Title Case"),
    "characters": Case(lambda r, v: f"{TITLE_CANARY} 9 Harbour!", "characters other than"),
}


@pytest.mark.parametrize("reason", list(TITLE_CASES))
async def test_a_title_reask_says_why_and_never_quotes(tmp_path: Path, reason: str) -> None:
    await reask_case(tmp_path, is_title, TITLE_CASES[reason])


PROSE_CASES: dict[str, Case] = {
    "loop": Case(lambda r, v: " ".join([f"the {CANARY} lantern glows"] * 12), "loop"),
    "cut_off": Case(lambda r, v: cut(f"A {CANARY} harbour at"), "cut off"),
}


@pytest.mark.parametrize("reason", list(PROSE_CASES))
async def test_a_prose_reask_says_why_and_never_quotes(tmp_path: Path, reason: str) -> None:
    await reask_case(tmp_path, is_prose, PROSE_CASES[reason])
