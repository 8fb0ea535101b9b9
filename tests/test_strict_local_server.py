"""The strict local server (image_project.testing.StrictLocalServer) and the wire facts it pins:
what llama.cpp's llama-server does with a base model and a strict chat template,
in-process on 127.0.0.1. scripts/real-model-check runs the real server; these tests pin the
same facts without it.

The first group tests the fake itself. The second is the contract a run must meet against such
a server: alternating conversations and a token limit on every request, the pre-flight probe
refusing full mode against a text-only server, and real text with the offline preview image.
(Each of these failed before runs sent token limits and alternating conversations.)
"""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path
from typing import Any

import jinja2
import openai
import pytest

from image_project.backends.base import JsonSchema, Message, TextRequest
from image_project.backends.offline.text import OfflineTextBackend
from image_project.backends.openai_backend import openai_backends
from image_project.cli.command import main
from image_project.run.driver import run_generation
from image_project.testing import FunctionTextBackend, StrictLocalServer, alternation_error
from tests.test_app import backends, make_cfg
from tests.test_cli import REPO, write_config

TEMPLATE = REPO / "tests" / "data" / "templates" / "strict_alternation.jinja"

ACCEPTED = [
    ["user"],
    ["system", "user"],
    ["system", "user", "assistant", "user"],
    ["user", "assistant", "user", "assistant", "user"],
]
REFUSED = [
    [],
    ["system"],
    ["assistant", "user"],
    ["system", "assistant", "user"],  # a stage block's shape before merged stages sent their prompt
    ["system", "assistant", "assistant", "user"],
    ["system", "user", "user"],
    ["system", "system", "user"],
    ["system", "user", "assistant", "user", "system"],  # a trailing schema instruction
    ["user", "system"],
]


def client(server: StrictLocalServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0)


def messages(roles: list[str]) -> list[Any]:
    return [{"role": r, "content": f"{r} turn {i}"} for i, r in enumerate(roles)]


# --------------------------------------------------------------------------- the fake itself
def test_it_lists_one_model_and_has_no_image_endpoint() -> None:
    with StrictLocalServer(model="gemma-3-270m") as server:
        models = client(server).models.list()
        assert [m.id for m in models.data] == ["gemma-3-270m"]
        with pytest.raises(openai.NotFoundError) as info:
            client(server).images.generate(model="gpt-image-1", prompt="a cat")
        assert info.value.status_code == 404
        assert [(r.method, r.status) for r in server.requests] == [("GET", 200), ("POST", 404)]


@pytest.mark.parametrize("roles", REFUSED, ids=lambda r: ",".join(r) or "empty")
def test_a_conversation_that_does_not_alternate_is_refused_with_llama_cpps_400(
    roles: list[str],
) -> None:
    with StrictLocalServer() as server:
        with pytest.raises(openai.BadRequestError) as info:
            client(server).chat.completions.create(
                model="m", messages=messages(roles), max_completion_tokens=8
            )
        body = info.value.response.json()
    assert set(body["error"]) == {"code", "message", "type"}
    assert (body["error"]["code"], body["error"]["type"]) == (400, "invalid_request_error")
    assert alternation_error(roles) in body["error"]["message"]


@pytest.mark.parametrize("roles", ACCEPTED, ids=lambda r: ",".join(r))
def test_an_alternating_conversation_is_answered(roles: list[str]) -> None:
    with StrictLocalServer() as server:
        reply = client(server).chat.completions.create(
            model="m", messages=messages(roles), max_tokens=200
        )
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.content
    assert reply.model == "gemma-3-270m"


def test_without_a_token_limit_the_answer_runs_to_the_servers_cap() -> None:
    with StrictLocalServer(cap_tokens=40) as server:
        reply = client(server).chat.completions.create(
            model="m", messages=messages(["system", "user"])
        )
        assert server.chat_requests[0].token_limit is None
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 40
    assert len((reply.choices[0].message.content or "").split()) == 40


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens"])
def test_a_token_limit_cuts_a_longer_answer_and_lets_a_shorter_one_stop(key: str) -> None:
    with StrictLocalServer() as server:
        c = client(server)

        def ask(limit: int) -> Any:
            return c.chat.completions.create(
                model="m", messages=messages(["user"]), extra_body={key: limit}
            )

        cut, whole = ask(3), ask(250)
        assert [r.token_limit for r in server.chat_requests] == [3, 250]
    assert cut.choices[0].finish_reason == "length"
    assert len((cut.choices[0].message.content or "").split()) == 3
    assert whole.choices[0].finish_reason == "stop"


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"concepts": {"type": "array", "items": {"type": "string"}}},
    "required": ["concepts"],
    "additionalProperties": False,
}


def test_a_structured_answer_within_the_limit_is_schema_valid_json() -> None:
    schema = SCHEMA
    fmt: Any = {
        "type": "json_schema",
        "json_schema": {"name": "c", "schema": schema, "strict": True},
    }
    with StrictLocalServer() as server:
        reply = client(server).chat.completions.create(
            model="m", messages=messages(["system", "user"]), response_format=fmt, max_tokens=200
        )
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content or "")["concepts"], list)


def test_without_a_system_role_a_system_message_is_refused() -> None:
    with StrictLocalServer(system_role=False) as server:
        c = client(server)
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(
                model="m", messages=messages(["system", "user"]), max_tokens=5
            )
        ok = c.chat.completions.create(model="m", messages=messages(["user"]), max_tokens=5)
    assert ok.choices[0].message.content


@functools.cache
def _template() -> jinja2.Template:
    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    env = jinja2.Environment()
    env.globals["raise_exception"] = raise_exception
    return env.from_string(TEMPLATE.read_text(encoding="utf-8"))


def _render(roles: list[str]) -> str | None:
    """The committed strict template, rendered by Jinja2: None when it accepts ``roles``,
    else the text it raised with."""
    try:
        _template().render(messages=messages(roles), bos_token="<bos>", add_generation_prompt=True)
    except jinja2.TemplateError as exc:
        return str(exc)
    return None


def test_the_fake_refuses_exactly_what_the_strict_template_refuses() -> None:
    """Every conversation of up to 6 messages (1,093 role sequences), with the same words."""
    sequences = [
        list(roles)
        for n in range(7)
        for roles in itertools.product(("system", "user", "assistant"), repeat=n)
    ]
    assert len(sequences) == 1093
    differ = [r for r in sequences if _render(r) != alternation_error(r)]
    assert differ == []
    # accepted: u, ua, uau, ... (lengths 1-6) and s then the same (lengths 2-6)
    assert sum(alternation_error(r) is None for r in sequences) == 11


def test_the_strict_template_puts_the_system_text_into_the_first_user_turn() -> None:
    env = jinja2.Environment()
    text = env.from_string(TEMPLATE.read_text(encoding="utf-8")).render(
        messages=messages(["system", "user", "assistant", "user"]),
        bos_token="<bos>",
        add_generation_prompt=True,
    )
    assert text == (
        "<bos><start_of_turn>user\nsystem turn 0\n\nuser turn 1<end_of_turn>\n"
        "<start_of_turn>model\nassistant turn 2<end_of_turn>\n"
        "<start_of_turn>user\nuser turn 3<end_of_turn>\n<start_of_turn>model\n"
    )


# --------------------------------------------------------------------------- the contract
JUDGES = [
    {"id": "strict", "rubric": "strict"},
    {"id": "warm", "rubric": "profile_fit"},
    {"id": "novel", "rubric": "novelty_heavy"},
]


def run_against(server: StrictLocalServer, tmp: Path, *args: str, **extra: Any) -> int:
    backend = {"base_url": server.base_url, "text_model": server.model, "max_attempts": 1}
    backend.update(extra.pop("backend", {}))
    image = {"generation_path": str(tmp / "out" / "images"), "log_path": str(tmp / "out" / "logs")}
    image.update(extra.pop("image", {}))
    config = write_config(tmp, backend=backend, image=image, store={"enabled": False}, **extra)
    return main(["--config", str(config), "--seed", "24", "-q", *args], env={}, root=REPO)


def test_a_prompt_only_run_sends_only_alternating_conversations(
    tmp_path: Path, allow_loopback: None
) -> None:
    with StrictLocalServer() as server:
        code = run_against(server, tmp_path, "--prompt-only")
    refused = [r.roles for r in server.chat_requests if r.status == 400]
    assert refused == []
    assert code == 0


def test_every_chat_request_sends_a_token_limit(tmp_path: Path, allow_loopback: None) -> None:
    with StrictLocalServer() as server:
        run_against(server, tmp_path, "--prompt-only", prompt={"refinement": "none"})
    requests = server.chat_requests
    assert requests
    assert [r for r in requests if r.token_limit is None] == []


def test_a_three_judge_scoring_run_passes_every_stage(tmp_path: Path, allow_loopback: None) -> None:
    scoring = {"enabled": True, "num_ideas": 3, "judges": JUDGES}
    with StrictLocalServer() as server:
        code = run_against(server, tmp_path, "--prompt-only", prompt={"scoring": scoring})
    assert [r.roles for r in server.chat_requests if r.status != 200] == []
    assert code == 0


def test_full_mode_against_a_text_only_server_fails_before_the_first_call(
    tmp_path: Path, allow_loopback: None
) -> None:
    with StrictLocalServer() as server:
        code = run_against(server, tmp_path)
    assert server.chat_requests == []
    assert code == 2


def test_full_mode_with_the_offline_image_backend_makes_no_image_request(
    tmp_path: Path, allow_loopback: None
) -> None:
    with StrictLocalServer() as server:
        code = run_against(server, tmp_path, image={"backend": "offline"})
    assert [r.path for r in server.requests if "/images" in r.path] == []
    assert code == 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    "extra",
    [(), ("prompt.scoring.enabled=true", "prompt.scoring.num_ideas=3", "prompt.refinement=none")],
    ids=["standard", "scoring"],
)
async def test_every_conversation_a_run_sends_alternates(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    """The conversation shapes alone, whatever the token limits: every request of a
    prompt-only run (offline answers) is one a strict template accepts."""
    text = FunctionTextBackend(OfflineTextBackend().complete)
    await run_generation(make_cfg(tmp_path, "run.mode=prompt_only", *extra), backends(text))
    refused = {alternation_error([m.role for m in r.messages]) for r in text.requests}
    assert refused == {None}


@pytest.mark.anyio
async def test_without_structured_outputs_the_schema_instruction_is_not_a_trailing_system_message(
    allow_loopback: None,
) -> None:
    with StrictLocalServer() as server:
        adapter = openai_backends(
            api_key="local",
            text_model=server.model,
            image_model="none",
            base_url=server.base_url,
            structured_outputs=False,
        )
        request = TextRequest(
            messages=(Message("system", "You list concepts."), Message("user", "Three, please.")),
            temperature=0.0,
            json_schema=JsonSchema("concepts", SCHEMA, True),
            max_output_tokens=200,
        )
        try:
            await adapter.text.complete(request)
        finally:
            await adapter.aclose()
    assert [(r.roles, r.status) for r in server.chat_requests] == [(("system", "user"), 200)]
