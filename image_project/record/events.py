"""Every step of a run as a typed event, discriminated by ``type``: ``chat`` (one model call,
re-asks included), ``action`` (pure Python in the step tree) and ``image`` (the image call).

The engine produces :class:`ChatEvent` and :class:`ActionEvent`; the app adds the
:class:`ImageEvent`. ``order`` is an event's position in the step tree (its index path,
root run first): sorting by it gives declared pre-order whatever order concurrent steps
completed in. It is not serialised. ``created_at``, ``latency_ms`` and ``pacing_wait_ms`` are
the only fields allowed to differ between a sequential and a concurrent run of the same tree
with the same answers (:data:`TIMING_FIELDS`).

A *rejected* answer (a re-ask's :class:`Reask`, the last answer of a step that failed) is
kept bounded: its first :data:`REJECTED_CHARS` characters, its full length in characters and
the SHA-256 of its UTF-8 bytes (:func:`rejected_fields`), so one runaway answer cannot make
the transcript and the store as large as itself. The accepted answer is kept whole. A
transcript written before these fields existed (the whole rejected answer, no length or
hash) is read with them derived from the whole text and the text bounded.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import Field, JsonValue, model_validator

from image_project.backends.base import Usage
from image_project.errors import BackendError, ModelOutputError, preview
from image_project.record.base import RecordModel

TIMING_FIELDS: tuple[str, ...] = ("created_at", "latency_ms", "pacing_wait_ms")

REJECTED_CHARS: Final = 2000
"""The most characters of a rejected answer a record keeps (the start of it)."""


def rejected_fields(text: str) -> dict[str, Any]:
    """What a record keeps of the rejected answer ``text``: ``response`` (its first
    :data:`REJECTED_CHARS` characters), ``response_chars`` (its length) and
    ``response_sha256`` (the hex SHA-256 of its UTF-8 bytes; a lone surrogate is encoded
    as is)."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return {
        "response": text[:REJECTED_CHARS],
        "response_chars": len(text),
        "response_sha256": digest,
    }


def _bounded(data: Any) -> Any:
    """``data`` (a record's input) with its ``response`` bounded as a rejected answer: the
    length and hash derived from the whole text when they are missing (a record built from
    the answer, or a transcript written before they existed), the text cut to the bound."""
    if not isinstance(data, dict) or not isinstance(data.get("response"), str):
        return data
    if "response_chars" not in data and "response_sha256" not in data:
        return {**data, **rejected_fields(data["response"])}
    return {**data, "response": data["response"][:REJECTED_CHARS]}


class ChatParams(RecordModel):
    """What the request asked for: the temperature, the model, the API seed, the output
    token limit sent (None: no limit was sent), and the backend it went to when not the main
    one (a name under ``backends:`` or ``offline``; absent for the main backend)."""

    temperature: float
    model: str
    seed: int | None
    max_output_tokens: int | None = None
    backend: str | None = Field(default=None, exclude_if=lambda v: v is None)
    top_logprobs: int | None = Field(default=None, exclude_if=lambda v: v is None)


class TokenLogprobs(RecordModel):
    """One answer token's log-probability and its ``top`` alternatives ``[token, logprob]``."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


class Reask(RecordModel):
    """One rejected answer and the validation error it was re-asked with. ``response`` is
    the answer's first :data:`REJECTED_CHARS` characters, ``response_chars`` its full length
    and ``response_sha256`` its hash (see the module docstring; :meth:`of` builds one from
    the whole answer). ``seed`` and ``temperature`` are set when the re-ask that followed was
    sent with its own (not the step's): a re-ask that must not repeat the answer. Written
    only when set."""

    response: str
    response_chars: int
    response_sha256: str
    error: str
    seed: int | None = Field(default=None, exclude_if=lambda v: v is None)
    temperature: float | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="before")
    @classmethod
    def _bound(cls, data: Any) -> Any:
        return _bounded(data)

    @classmethod
    def of(
        cls,
        answer: str,
        error: str,
        *,
        seed: int | None = None,
        temperature: float | None = None,
    ) -> Reask:
        """The record of the rejected ``answer`` (whole), bounded."""
        return cls(**rejected_fields(answer), error=error, seed=seed, temperature=temperature)


class StepError(RecordModel):
    """The error of a step recorded although it failed: a *recoverable* step (one that failed
    without failing the run, such as a judge) or the image call. What went wrong, and for a
    bad answer its reason code and a preview, for a transport error its HTTP status."""

    type: str
    message: str
    reason: str | None = None
    output_preview: str | None = None
    status: int | None = None

    @classmethod
    def of(cls, exc: Exception) -> StepError:
        """What a step's record keeps of ``exc``."""
        bad_answer = exc if isinstance(exc, ModelOutputError) else None
        return cls(
            type=type(exc).__name__,
            message=preview(str(exc), 500),
            reason=bad_answer.reason if bad_answer else None,
            output_preview=bad_answer.output_preview if bad_answer else None,
            status=exc.status if isinstance(exc, BackendError) else None,
        )


class ChatEvent(RecordModel):
    """One model call. ``response`` is the last answer (None when there was none): the
    accepted answer whole; for a step that failed (``error`` set) the rejected answer,
    bounded like a re-ask's, with ``response_chars`` and ``response_sha256`` (written only
    then: see the module docstring);
    ``attempts`` counts transport attempts over all answers, ``answers`` the answers received
    (1 + the re-asks that were answered); ``reasks`` lists every rejected answer.
    ``pacing_wait_ms`` is how long the step's requests were held before being sent, to respect
    the server's rate window (``x-ratelimit-*`` headers, a ``Retry-After`` pause) and the
    shared concurrency limit; part of ``latency_ms``, never counted in ``attempts``.
    ``wire_notes`` says how the backend sent the step's requests differently from
    ``prompt`` / ``params`` (the system text folded into the first user message, the schema
    spelled out at the end of the last one, a smaller token limit after a timeout)."""

    type: Literal["chat"] = "chat"
    name: str
    path: str
    prompt: str
    system_prompt: str | None = None
    response: str | None
    response_chars: int | None = Field(default=None, exclude_if=lambda v: v is None)
    response_sha256: str | None = Field(default=None, exclude_if=lambda v: v is None)
    params: ChatParams
    context_messages: int
    created_at: str
    latency_ms: float
    pacing_wait_ms: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    attempts: int
    answers: int
    system_fingerprint: str | None = None
    response_model: str | None = None
    reasks: tuple[Reask, ...] = ()
    wire_notes: tuple[str, ...] = ()
    error: StepError | None = None
    meta: dict[str, JsonValue] = Field(default_factory=dict)
    logprobs: tuple[TokenLogprobs, ...] | None = Field(default=None, exclude_if=lambda v: v is None)
    """The last answer's token log-probabilities, for a step that asked for them
    (``params.top_logprobs``) and got them; absent otherwise."""
    order: tuple[int, ...] = Field(default=(), exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _bound(cls, data: Any) -> Any:
        """A failed step's answer is a rejected one: bounded (the accepted one is whole)."""
        if isinstance(data, dict) and data.get("error") is not None:
            return _bounded(data)
        return data


class ActionEvent(RecordModel):
    """Pure Python glue; ``result`` is its return value as JSON (never trimmed)."""

    type: Literal["action"] = "action"
    name: str
    path: str
    created_at: str
    latency_ms: float
    result: JsonValue = None
    meta: dict[str, JsonValue] = Field(default_factory=dict)
    order: tuple[int, ...] = Field(default=(), exclude=True)


class ImageEvent(RecordModel):
    """The image call, recorded once it was made, however it ended.

    ``error`` is None when it delivered a usable image. Otherwise it says how the call ended:
    ``type == "cancelled"`` when the run was interrupted while it was in flight (the path is
    then also in the run's ``error.cancelled_paths``), else the error that failed the run
    (a transport error with its ``status``, or ``ModelOutputError`` with reason
    ``undecodable_image`` for an answer that is not a readable image).

    ``model`` is the model that made the image (the offline backend records its own name),
    or the model asked for when none answered. ``received_bytes`` and ``format`` describe the
    encoded image the backend returned, before the caption was added and it was saved as
    JPEG (None when nothing was received); ``attempts`` counts transport attempts (None when
    the call was cut off before it ended, so the count is unknown); ``pacing_wait_ms`` how long
    the call was held before being sent, to respect the server's rate limits."""

    type: Literal["image"] = "image"
    name: str = "image"
    path: str = "image"
    prompt: str
    model: str
    size: str
    quality: str
    seed: int
    created_at: str
    latency_ms: float
    attempts: int | None
    received_bytes: int | None
    format: str | None
    revised_prompt: str | None = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    error: StepError | None = None
    pacing_wait_ms: float = 0.0
    order: tuple[int, ...] = Field(default=(), exclude=True)

    @property
    def cancelled(self) -> bool:
        """The call was cut off by an interrupt before it ended."""
        return self.error is not None and self.error.type == "cancelled"


StepEvent: TypeAlias = Annotated[ChatEvent | ActionEvent | ImageEvent, Field(discriminator="type")]
"""Any step of a run, told apart by its ``type``."""
