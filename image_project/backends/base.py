"""The two I/O seams to model services: :class:`TextBackend` and :class:`ImageBackend`.

Each is one coroutine: a typed request in, a typed reply out. Everything above this layer
(engine, stages, app) talks only to these protocols; only ``backends/openai_backend.py``
imports ``openai``. Implementations must be safe to call concurrently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


def conversation_problem(messages: Iterable[Message]) -> str | None:
    """What makes ``messages`` a conversation a strict chat template rejects, or None.

    The shape every template accepts (Gemma's, Mistral's and Llama-2-style ones enforce it):
    at most one ``system`` message, first; then ``user`` and ``assistant`` strictly
    alternating, starting and ending with ``user``. Every request the engine sends has this
    shape (the runner checks it before each call)."""
    roles = [m.role for m in messages]
    skip = 1 if roles[:1] == ["system"] else 0
    turns = roles[skip:]
    if not turns:
        return "no user message"
    for i, role in enumerate(turns):
        want = "user" if i % 2 == 0 else "assistant"
        if role != want:
            return (
                f"message {i + skip + 1} is {role!r} where {want!r} must come (one leading "
                "system message, then user and assistant alternating)"
            )
    if turns[-1] != "user":
        return "the last message is not a user message"
    return None


STRICT_KEYWORDS: frozenset[str] = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "enum",
        "minimum",
        "maximum",
    }
)
"""The JSON-schema keywords of an answer schema (the strict structured-output subset our
answer models use; :func:`image_project.engine.output.strict_json_schema` emits only these
and the offline backend answers exactly these)."""

GRAMMAR_KEYWORDS: frozenset[str] = STRICT_KEYWORDS | {"minLength", "maxLength", "pattern"}
"""The keywords of the ``grammar`` dialect of an answer schema (:attr:`JsonSchema.grammar`):
the strict subset plus the string constraints llama.cpp and vLLM compile into a grammar."""


@dataclass(frozen=True)
class JsonSchema:
    """A JSON schema for structured output (OpenAI ``response_format: json_schema``).

    ``schema`` must follow the strict-mode subset when ``strict`` is true: every object lists
    all its properties in ``required`` and sets ``additionalProperties: false``. ``grammar``,
    when set, is the same schema in the ``grammar`` dialect (:data:`GRAMMAR_KEYWORDS`: string
    lengths and patterns kept), sent instead by a backend whose ``schema_dialect`` is
    ``grammar``.
    """

    name: str
    schema: Mapping[str, Any]
    strict: bool = True
    grammar: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class TextRequest:
    """One chat completion request.

    ``model`` None means the backend's default text model. ``seed`` is sent as the API's
    ``seed`` (best-effort determinism on the server side; recorded either way). ``backend``
    names the backend that must answer when a run has several (``backends:`` in the config;
    None = the main one): :class:`~image_project.backends.routing.RoutingTextBackend`
    dispatches on it, a single backend ignores it.
    """

    messages: tuple[Message, ...]
    temperature: float
    model: str | None = None
    seed: int | None = None
    json_schema: JsonSchema | None = None
    max_output_tokens: int | None = None
    backend: str | None = None
    top_logprobs: int | None = None
    """Ask for the log-probabilities of the answer's tokens and of this many alternatives at
    each (``logprobs`` / ``top_logprobs`` on the wire); None: not asked (nothing sent)."""


@dataclass(frozen=True)
class TokenLogprob:
    """One answer token's log-probability and its ``top`` alternatives ``(token, logprob)``."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Usage:
    """Token counts of one answer (or a sum). ``cached_tokens`` is the part of the prompt the
    server served from its prompt cache, when it reports it (``usage.prompt_tokens_details.
    cached_tokens``); None when it does not."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        cached = (
            None
            if self.cached_tokens is None and other.cached_tokens is None
            else (self.cached_tokens or 0) + (other.cached_tokens or 0)
        )
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            cached,
        )

    @classmethod
    def total(cls, usages: Iterable[Usage | None]) -> Usage:
        """The sum of ``usages`` (None counts as zero)."""
        out = cls()
        for usage in usages:
            if usage is not None:
                out = out + usage
        return out


@dataclass(frozen=True)
class TextReply:
    """What the model said.

    ``text`` is None when the model refused (``refusal`` then holds its explanation) or sent
    no content. ``attempts`` counts transport attempts (1 = no retry was needed);
    ``pacing_wait_ms`` is how long they were held before being sent, to respect the server's
    rate window and the shared concurrency limit (0 for backends that do not pace).
    """

    text: str | None
    model: str
    refusal: str | None = None
    usage: Usage | None = None
    system_fingerprint: str | None = None
    finish_reason: str | None = None
    attempts: int = 1
    pacing_wait_ms: float = 0.0
    max_output_tokens: int | None = None
    """The token limit the answered attempt was sent with, when the backend sent another one
    than the request's (a retry after a timeout sends a smaller one); None: the request's."""
    logprobs: tuple[TokenLogprob, ...] | None = None
    """The answer's tokens with their log-probabilities, when the request asked for them and
    the server returned them (None otherwise)."""
    notes: tuple[str, ...] = ()
    """How the backend sent the request differently from the request's messages and limit
    (the system text folded into the first user message, the schema spelled out in the last
    one, a smaller token limit after a timeout); recorded on the step (``wire_notes``)."""


@runtime_checkable
class TextBackend(Protocol):
    """A chat model. ``label`` names it in logs and transcripts (``openai``, ``offline``...)."""

    @property
    def label(self) -> str: ...

    @property
    def default_model(self) -> str: ...

    async def complete(self, request: TextRequest) -> TextReply: ...


@dataclass(frozen=True)
class ImageRequest:
    prompt: str
    model: str | None = None
    size: str = "1536x1024"
    quality: str = "high"
    seed: int | None = None


@dataclass(frozen=True)
class ImageReply:
    """Encoded image bytes (PNG / JPEG / WebP as ``format`` says) plus metadata."""

    data: bytes
    model: str
    format: str = "png"
    revised_prompt: str | None = None
    attempts: int = 1
    metadata: Mapping[str, Any] = field(default_factory=dict)
    pacing_wait_ms: float = 0.0
    """How long the call was held before being sent, to respect the server's rate limits."""


@runtime_checkable
class ImageBackend(Protocol):
    @property
    def label(self) -> str: ...

    @property
    def default_model(self) -> str: ...

    async def generate(self, request: ImageRequest) -> ImageReply: ...
