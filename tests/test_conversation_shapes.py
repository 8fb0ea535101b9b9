"""Every request a run sends has the shape strict chat templates accept.

Gemma's, Mistral's and Llama-2-style templates accept one optional leading system message,
then user and assistant turns strictly alternating, first and last ``user``
(:func:`~image_project.backends.base.conversation_problem`). These tests run whole offline
generations in every mode (the standard pipeline with each refinement, scoring, three rounds
with the LLM selector, and the same with every JSON answer's first try spoiled so that each
re-ask style goes out) and check EVERY request the backend received, plus every body the
OpenAI adapter put on the wire with each wire setting. Every request also carries a token
limit.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from image_project.backends.base import Message, TextReply, TextRequest, conversation_problem
from image_project.backends.offline.text import OfflineTextBackend
from image_project.run.driver import run_generation
from image_project.stages.standard import STAGES, Brief, stage_prompt
from tests.test_app import backends, make_cfg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import wire_snapshot  # noqa: E402

SCORING = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.num_ideas=4",
    "prompt.scoring.max_reasks=2",
)
EVOLUTION = (
    *SCORING,
    "prompt.scoring.evolution.enabled=true",
    "prompt.scoring.evolution.generations=2",
    "prompt.scoring.evolution.selector=llm",
)
MODES: dict[str, tuple[str, ...]] = {
    "standard_final": ("prompt.refinement=final",),
    "standard_per_stage": ("prompt.refinement=per_stage",),
    "standard_none": ("prompt.refinement=none",),
    "scoring": SCORING,
    "scoring_per_stage": (*SCORING, "prompt.refinement=per_stage"),
    "evolution_llm_selector": EVOLUTION,
}
REASKED = "rejected by validation"


class Recording:
    """The offline backend, recording every request; with ``spoil`` the first answer to each
    JSON prompt is not JSON, so the step re-asks (in its own style)."""

    def __init__(self, *, spoil: bool = False) -> None:
        self.offline = OfflineTextBackend()
        self.spoil = spoil
        self.requests: list[TextRequest] = []
        self._spoiled: set[str] = set()

    @property
    def label(self) -> str:
        return "recording"

    @property
    def default_model(self) -> str:
        return self.offline.default_model

    async def complete(self, request: TextRequest) -> TextReply:
        self.requests.append(request)
        last = request.messages[-1].content
        fresh = REASKED not in last and last not in self._spoiled
        if self.spoil and request.json_schema is not None and fresh:
            self._spoiled.add(last)
            return TextReply(text="no JSON here at all", model=self.default_model)
        return await self.offline.complete(request)


def problems(conversations: Sequence[Sequence[Message]]) -> list[str]:
    return [
        f"request {i}: {problem}: {[m.role for m in messages]}"
        for i, messages in enumerate(conversations)
        if (problem := conversation_problem(messages)) is not None
    ]


async def generate(tmp: Path, sets: Sequence[str], backend: Recording) -> None:
    await run_generation(make_cfg(tmp, *sets), backends(backend))


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("spoil", [False, True], ids=["clean", "reasks"])
def test_every_request_of_a_run_alternates_and_has_a_token_limit(
    mode: str, spoil: bool, tmp_path: Path
) -> None:
    backend = Recording(spoil=spoil)
    anyio.run(generate, tmp_path, MODES[mode], backend)
    sent = [r.messages for r in backend.requests]
    assert len(sent) >= 8
    assert problems(sent) == []
    assert all(r.max_output_tokens is not None for r in backend.requests)
    reasks = [r for r in backend.requests if REASKED in r.messages[-1].content]
    if spoil:
        assert reasks, "the spoiled answers were re-asked"
    if spoil and mode.startswith("evolution"):
        # Every re-ask is restated (one user message: the prompt followed by the error);
        # none sends the rejected answer back as an assistant turn.
        assert all(len(r.messages) <= 2 for r in reasks)
        assert all(m.role != "assistant" for r in reasks for m in r.messages)


def test_a_refined_stage_joins_the_conversation_as_its_prompt_and_its_final_answer(
    tmp_path: Path,
) -> None:
    """What the last stage's draft is sent with refinement per_stage: the system prompt, then
    each earlier stage as one exchange (its prompt, its refined answer), then its own prompt;
    the critics' and consensus turns stay inside their stage."""
    backend = Recording()
    anyio.run(generate, tmp_path, ("prompt.refinement=per_stage",), backend)
    brief = Brief(concepts=("a",), preferences="p")
    final_prompt = stage_prompt("dalle_prompt_creation", brief)
    (draft,) = [r for r in backend.requests if r.messages[-1].content == final_prompt]
    roles = [m.role for m in draft.messages]
    assert roles == ["system"] + ["user", "assistant"] * 5 + ["user"]
    asked = [m.content for m in draft.messages[1::2]]
    assert asked[0].startswith("We are creating one artwork")
    middle = [stage_prompt(stage, brief) for stage, _ in STAGES[1:]]
    assert asked[1:] == middle
    answers = {r.messages[-1].content: r for r in backend.requests}
    assert "Synthesise these revised drafts" in "".join(answers)  # the stages were refined


@pytest.mark.parametrize(
    "settings",
    [
        (),
        ("backend.structured_outputs=false",),
        ("backend.role_style=user", "backend.token_limit_param=max_tokens"),
        ("backend.schema_dialect=grammar", "prompt.refinement=per_stage"),
    ],
    ids=["default", "no_structured_outputs", "user_role_max_tokens", "grammar"],
)
def test_every_body_on_the_wire_alternates(
    settings: tuple[str, ...], tmp_path: Path, allow_loopback: None
) -> None:
    """The OpenAI adapter against the local offline server, three rounds with the LLM
    selector: every body it sent has the strict shape (and no system message at all with
    ``role_style: user``) and a token limit under the configured name."""
    extra = tuple(a for s in settings for a in ("--set", s))
    no_structured = "backend.structured_outputs=false" in settings
    # The offline server answers JSON only to a response_format: without structured outputs
    # the run fails at its first JSON step (exit 1) after re-asking it; what it sent until
    # then (the schema instruction, the re-ask conversations) is checked all the same.
    bodies, _ = wire_snapshot.run_scenario(
        "three_rounds_llm_selector", tmp_path / "w", extra, exit_code=1 if no_structured else 0
    )
    conversations = [
        [Message(m["role"], m["content"]) for m in b["messages"]] for b in bodies if "messages" in b
    ]
    assert len(conversations) > (2 if no_structured else 20)
    if no_structured:
        first = min(conversations, key=len)
        assert [m.role for m in first] == ["system", "user"]
        assert "matching this JSON schema (concept_rewrite)" in first[-1].content
        assert any(REASKED in c[-1].content for c in conversations)  # restated: [s, u]
        assert all("matching this JSON schema" in c[-1].content for c in conversations)
    assert problems(conversations) == []
    param = (
        "max_tokens"
        if "backend.token_limit_param=max_tokens" in settings
        else ("max_completion_tokens")
    )
    assert all(param in b for b in bodies if "messages" in b)
    if "backend.role_style=user" in settings:
        assert all(m.role != "system" for c in conversations for m in c)
    if "backend.schema_dialect=grammar" in settings:
        schemas = [
            b["response_format"]["json_schema"]["schema"] for b in bodies if "response_format" in b
        ]
        strings = [n for schema in schemas for n in nodes(schema) if n.get("type") == "string"]
        free = [n for n in strings if "enum" not in n]
        assert free and all(1 <= n["minLength"] <= n["maxLength"] <= 2000 for n in free)


def nodes(schema: Any) -> Iterator[dict[str, Any]]:
    """Every schema object inside ``schema``."""
    if isinstance(schema, dict):
        yield schema
        for key in ("properties",):
            for sub in schema.get(key, {}).values():
                yield from nodes(sub)
        if "items" in schema:
            yield from nodes(schema["items"])
