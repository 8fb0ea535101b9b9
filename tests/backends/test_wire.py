"""What goes on the wire for the ``backend`` wire settings: the token-limit
parameter, the schema dialect, ``role_style: user``, the smaller limit of a retry after a
timeout; checked on the request bodies a local server received."""

from __future__ import annotations

import json
import random
from typing import Any, cast

import pytest

from image_project.backends.base import (
    JsonSchema,
    Message,
    Role,
    TextRequest,
    conversation_problem,
)
from image_project.backends.jsonschema_instance import generate_instance
from image_project.backends.retry import RetryPolicy
from image_project.backends.wire import (
    SHRINK_FLOOR,
    WireOptions,
    shrunk_limit,
    wire_messages,
)
from image_project.config.wire_section import RoleStyle
from image_project.engine.output import JsonOutput, strict_json_schema
from image_project.record.scoring import IdeaCard
from image_project.stages.scoring.cards import CARD_OUTPUT
from image_project.stages.scoring.evolution import selector_output
from image_project.stages.scoring.judges import judge_output
from image_project.stages.standard import concept_rewrite_output
from tests.backends.test_openai_backend import open_backends
from tests.support.openai_server import OpenAIServer, Reply, chat_completion

pytestmark = pytest.mark.anyio

CARD: JsonSchema = strict_json_schema(IdeaCard)


def request(**overrides: object) -> TextRequest:
    fields: dict[str, object] = {
        "messages": (
            Message("system", "Be brief."),
            Message("user", "first"),
            Message("assistant", "answer"),
            Message("user", "second"),
        ),
        "temperature": 0.0,
        "max_output_tokens": 300,
    }
    fields.update(overrides)
    return TextRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("param", ["max_completion_tokens", "max_tokens"])
async def test_the_token_limit_goes_under_the_configured_name(
    allow_loopback: None, param: str
) -> None:
    with OpenAIServer() as server:
        server.script(Reply(body=chat_completion("ok")))
        wire = WireOptions(token_limit_param=param)  # type: ignore[arg-type]
        async with open_backends(server, wire=wire) as b:
            await b.text.complete(request())
        (body,) = server.request_bodies
    other = {"max_completion_tokens", "max_tokens"} - {param}
    assert body[param] == 300
    assert not other & set(body)


@pytest.mark.parametrize("dialect", ["openai_strict", "grammar"])
async def test_the_schema_goes_in_the_configured_dialect(
    allow_loopback: None, dialect: str
) -> None:
    with OpenAIServer() as server:
        server.script(Reply(body=chat_completion("{}")))
        wire = WireOptions(schema_dialect=dialect)  # type: ignore[arg-type]
        async with open_backends(server, wire=wire) as b:
            await b.text.complete(request(json_schema=CARD))
        (body,) = server.request_bodies
    sent = body["response_format"]["json_schema"]["schema"]
    hook = sent["properties"]["hook"]
    if dialect == "grammar":
        assert sent == CARD.grammar
        assert hook == {"type": "string", "minLength": 1, "maxLength": 600}
    else:
        assert sent == CARD.schema
        assert hook == {"type": "string"}


async def test_role_style_user_folds_the_system_text_into_the_first_user_message(
    allow_loopback: None,
) -> None:
    with OpenAIServer() as server:
        server.script(Reply(body=chat_completion("ok")))
        async with open_backends(server, wire=WireOptions(role_style="user")) as b:
            reply = await b.text.complete(request())
        (body,) = server.request_bodies
    assert body["messages"] == [
        {"role": "user", "content": "Be brief.\n\nfirst"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "second"},
    ]
    assert reply.notes == ("system message folded into the first user message (role_style user)",)


def test_every_wire_option_keeps_the_conversation_alternating() -> None:
    """Each combination of settings sends a conversation strict templates accept, and
    ``role_style: user`` sends no system message at all."""
    styles: tuple[RoleStyle, ...] = ("system", "user")
    for structured in (True, False):
        for style in styles:
            for schema in (None, CARD):
                options = WireOptions(structured_outputs=structured, role_style=style)
                messages, _ = wire_messages(request(json_schema=schema), options)
                sent = tuple(Message(cast(Role, m["role"]), m["content"]) for m in messages)
                assert conversation_problem(sent) is None, (structured, style, schema)
                if style == "user":
                    assert all(m.role != "system" for m in sent)
                if schema is not None and not structured:
                    assert sent[-1].content.endswith(json.dumps(CARD.schema, sort_keys=True))


async def test_a_retry_after_a_timeout_sends_a_smaller_limit_and_says_so(
    allow_loopback: None,
) -> None:
    with OpenAIServer() as server:
        server.script(Reply(delay_s=10.0), Reply(body=chat_completion("ok")))
        async with open_backends(server, timeout_s=0.2, retry=RetryPolicy(max_attempts=2)) as b:
            reply = await b.text.complete(request(max_output_tokens=1000))
        first, second = server.request_bodies
    assert first["max_completion_tokens"] == 1000
    assert second["max_completion_tokens"] == 500
    # Only the limit changed: the retry is the same request otherwise.
    assert {k: v for k, v in first.items() if k != "max_completion_tokens"} == {
        k: v for k, v in second.items() if k != "max_completion_tokens"
    }
    assert reply.max_output_tokens == 500
    assert reply.notes == (
        "attempt 2: max_completion_tokens 1000 -> 500 after attempt 1 timed out",
    )


async def test_a_retry_after_a_timeout_of_a_call_without_a_limit_is_the_same_request(
    allow_loopback: None,
) -> None:
    with OpenAIServer() as server:
        server.script(Reply(delay_s=10.0), Reply(body=chat_completion("ok")))
        async with open_backends(server, timeout_s=0.2, retry=RetryPolicy(max_attempts=2)) as b:
            reply = await b.text.complete(request(max_output_tokens=None))
        first, second = server.request_bodies
    assert "max_completion_tokens" not in first and first == second
    assert reply.notes == ()


def test_the_shrunk_limit_halves_down_to_a_floor_never_above_the_limit() -> None:
    assert shrunk_limit(4000) == 2000
    assert shrunk_limit(300) == 256  # half, but at least 256
    assert shrunk_limit(SHRINK_FLOOR + 10) == SHRINK_FLOOR
    assert shrunk_limit(100) == 100  # already below the floor: unchanged
    assert shrunk_limit(2 * SHRINK_FLOOR) == SHRINK_FLOOR


def test_conversation_problem_names_what_strict_templates_reject() -> None:
    s, u, a = Message("system", "s"), Message("user", "u"), Message("assistant", "a")
    assert conversation_problem((s, u)) is None
    assert conversation_problem((u, a, u)) is None
    assert conversation_problem((s, a, u)) == (
        "message 2 is 'assistant' where 'user' must come (one leading system message, "
        "then user and assistant alternating)"
    )
    assert "message 4 is 'assistant'" in (conversation_problem((s, u, a, a, u)) or "")
    assert "message 3 is 'system'" in (conversation_problem((s, u, s)) or "")
    assert conversation_problem((s, u, a)) == "the last message is not a user message"
    assert conversation_problem((s,)) == "no user message"


def _outputs() -> dict[str, JsonOutput[Any]]:
    ids = ["A", "B", "C", "D"]
    return {
        "card": CARD_OUTPUT,
        "rewrite": concept_rewrite_output(3),
        "judge": judge_output(ids),
        "selector": selector_output(ids, ("performance", "diversity")),
    }


def _strings(node: Any) -> list[dict[str, Any]]:
    if not isinstance(node, dict):
        return []
    found = [node] if node.get("type") == "string" and "enum" not in node else []
    for sub in node.get("properties", {}).values():
        found += _strings(sub)
    return found + _strings(node.get("items"))


@pytest.mark.parametrize("name", ["card", "rewrite", "judge", "selector"])
def test_every_free_string_of_an_answer_is_bounded_in_the_grammar_dialect(name: str) -> None:
    grammar = _outputs()[name].schema.grammar
    assert grammar is not None
    for node in _strings(grammar):
        assert node["minLength"] >= 1 and 1 <= node["maxLength"] <= 2000, node


@pytest.mark.parametrize("name", ["card", "rewrite", "judge"])
@pytest.mark.parametrize("seed", range(5))
def test_the_offline_answer_to_either_dialect_validates(name: str, seed: int) -> None:
    """(The selector's offline answer comes from its own rule, which reads the prompt; the
    grammar-dialect runs of tests/test_conversation_shapes.py cover it.)"""
    output = _outputs()[name]
    words = [  # a card repeating one phrase in every slot is degenerate (card_degenerate)
        f"{thing} {place}"
        for thing in ("a lantern", "gulls", "a red sail", "wet cobbles")
        for place in ("over the harbour at dusk", "seen from a small boat", "far out at sea")
    ]
    for schema in (output.schema.schema, output.schema.grammar):
        assert schema is not None
        answer = generate_instance(schema, random.Random(seed), words)
        output.parse(json.dumps(answer))


def test_an_offline_string_is_cut_or_padded_to_the_grammar_lengths() -> None:
    schema = {
        "type": "object",
        "properties": {
            "narrative": {"type": "string", "minLength": 1, "maxLength": 12},
            "hook": {"type": "string", "minLength": 40, "maxLength": 80},
        },
        "required": ["narrative", "hook"],
        "additionalProperties": False,
    }
    for seed in range(10):
        answer = generate_instance(schema, random.Random(seed), ["quiet harbour light"])
        assert 1 <= len(answer["narrative"]) <= 12 and answer["narrative"].strip()
        assert 40 <= len(answer["hook"]) <= 80
