"""How a :class:`~image_project.backends.base.TextRequest` goes on the wire of an
OpenAI-compatible server: :class:`WireOptions` (the ``backend`` settings
``structured_outputs``, ``role_style``, ``schema_dialect`` and ``token_limit_param``) and the
pure functions the OpenAI adapter builds a chat body with. No ``openai`` import: what is sent
is decided here and tested without a client.

* **Messages.** The engine sends one optional leading system message, then user and assistant
  turns alternating, first and last ``user`` (what strict chat templates such as Gemma's,
  Mistral's and Llama-2-style ones accept). ``role_style: user`` is for servers whose
  template has no system role: the system text is folded into the first user message (the
  system text, a blank line, the user text). Without ``structured_outputs`` the schema is
  spelled out at the end of the LAST user message (a trailing system message is dropped or
  misplaced by such templates). Each change is named in the reply's ``notes``, which the
  runner records as the step's ``wire_notes``.
* **Schema dialect.** ``openai_strict`` sends the strict structured-output subset
  (:data:`~image_project.backends.base.STRICT_KEYWORDS`); ``grammar`` sends the schema that
  also keeps ``minLength`` / ``maxLength`` (and a ``pattern`` an answer model declares),
  which llama.cpp and vLLM compile into their grammar, so an unbounded string cannot run to
  the token limit (:attr:`~image_project.backends.base.JsonSchema.grammar`).
* **Token limit.** Sent as ``max_completion_tokens`` (OpenAI's name; it includes a reasoning
  model's hidden reasoning) or, for servers that know only the older name, ``max_tokens``.
  After an attempt timed out, the retry sends :func:`shrunk_limit` of the limit: the same
  seeded body would most likely run into the same timeout, while a smaller limit bounds the
  time the server may take. The change is recorded (``notes``) and an answer cut at the
  smaller limit is re-asked or failed like any cut-off answer, never accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from image_project.backends.base import JsonSchema, Message, TextRequest
from image_project.config.wire_section import RoleStyle, SchemaDialect, TokenLimitParam

SHRINK_FLOOR = 256
"""The smallest token limit a retry after a timeout shrinks to (never above the original)."""


@dataclass(frozen=True)
class WireOptions:
    """The ``backend`` settings that shape a request body (config/config.yaml)."""

    structured_outputs: bool = True
    role_style: RoleStyle = "system"
    schema_dialect: SchemaDialect = "openai_strict"
    token_limit_param: TokenLimitParam = "max_completion_tokens"

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("role_style", self.role_style, get_args(RoleStyle)),
            ("schema_dialect", self.schema_dialect, get_args(SchemaDialect)),
            ("token_limit_param", self.token_limit_param, get_args(TokenLimitParam)),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def wire_schema(schema: JsonSchema, options: WireOptions) -> Mapping[str, Any]:
    """The schema sent for ``schema`` in ``options``' dialect."""
    if options.schema_dialect == "grammar" and schema.grammar is not None:
        return schema.grammar
    return schema.schema


def schema_instruction(schema: JsonSchema, options: WireOptions) -> str:
    """The sentence that asks for the schema when it is not sent as ``response_format``."""
    schema_text = json.dumps(wire_schema(schema, options), sort_keys=True)
    return (
        "Answer with one JSON object only, no prose and no code fences, "
        f"matching this JSON schema ({schema.name}): {schema_text}"
    )


def wire_messages(
    request: TextRequest, options: WireOptions
) -> tuple[list[dict[str, str]], tuple[str, ...]]:
    """The messages of ``request`` as sent, and the notes on how they differ from it."""
    messages: list[Message] = list(request.messages)
    notes: list[str] = []
    if request.json_schema is not None and not options.structured_outputs:
        messages = _append_to_last_user(messages, schema_instruction(request.json_schema, options))
        notes.append("schema instruction appended to the last user message")
    if options.role_style == "user" and messages and messages[0].role == "system":
        system, rest = messages[0], messages[1:]
        if rest and rest[0].role == "user":
            rest = [Message("user", f"{system.content}\n\n{rest[0].content}"), *rest[1:]]
        else:
            rest = [Message("user", system.content), *rest]
        messages = rest
        notes.append("system message folded into the first user message (role_style user)")
    return [{"role": m.role, "content": m.content} for m in messages], tuple(notes)


def _append_to_last_user(messages: Sequence[Message], text: str) -> list[Message]:
    out = list(messages)
    for i in range(len(out) - 1, -1, -1):
        if out[i].role == "user":
            out[i] = Message("user", f"{out[i].content}\n\n{text}")
            return out
    return [*out, Message("user", text)]


def shrunk_limit(limit: int) -> int:
    """The token limit of a retry after a timeout: half of ``limit``, at least
    :data:`SHRINK_FLOOR` (``limit`` itself when that is smaller)."""
    return min(limit, max(limit // 2, SHRINK_FLOOR))
