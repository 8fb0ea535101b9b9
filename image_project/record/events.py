"""Every step of a run as a typed event, discriminated by ``type``: ``chat`` (one model call,
re-asks included), ``action`` (pure Python in the step tree) and ``image`` (the image call).

The engine produces :class:`ChatEvent` and :class:`ActionEvent`; the app adds the
:class:`ImageEvent`. ``order`` is an event's position in the step tree (its index path,
root run first): sorting by it gives declared pre-order whatever order concurrent steps
completed in. It is not serialised. ``created_at``, ``latency_ms`` and ``pacing_wait_ms`` are
the only fields allowed to differ between a sequential and a concurrent run of the same tree
with the same answers (:data:`TIMING_FIELDS`).
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field, JsonValue

from image_project.backends.base import Usage
from image_project.errors import BackendError, ModelOutputError, preview
from image_project.record.base import RecordModel

__all__ = [
    "TIMING_FIELDS",
    "ActionEvent",
    "ChatEvent",
    "ChatParams",
    "ImageEvent",
    "Reask",
    "StepError",
    "StepEvent",
    "TokenLogprobs",
]

TIMING_FIELDS: tuple[str, ...] = ("created_at", "latency_ms", "pacing_wait_ms")


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
    """One rejected answer and the validation error it was re-asked with. ``seed`` and
    ``temperature`` are set when the re-ask that followed was sent with its own (not the
    step's): a re-ask that must not repeat the answer. Written only when set."""

    response: str
    error: str
    seed: int | None = Field(default=None, exclude_if=lambda v: v is None)
    temperature: float | None = Field(default=None, exclude_if=lambda v: v is None)


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
    """One model call. ``response`` is the last answer (None when there was none);
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
