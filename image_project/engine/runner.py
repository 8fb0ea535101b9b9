"""Runs steps: :class:`ChatRunner`, which code reaches through its root scope
(:meth:`ChatRunner.root`, :class:`~image_project.engine.scope.Scope`).

Semantics (the contract every stage relies on):

* **Always copy, merge once.** Every step runs on its scope's conversation (conversations
  are immutable tuples) and hands back what it produced; the scope changes once, when the
  step has finished, according to the step's merge mode (see
  :mod:`image_project.engine.scope`). A failing step therefore never leaves half-applied
  messages behind.
* **Values** are typed step results: a chat step's
  :class:`~image_project.engine.outcome.Answer`, an image step's
  :class:`~image_project.engine.outcome.Drawn`, an action's return value.
* **Concurrency** is the scope's (``gather``, through :func:`ordered_fanout`);
  ``mode="sequential"`` runs every group one call at a time, and for the same answers both
  modes produce the same conversation, values and records (timing aside). Records are placed
  by declared position, so the transcript never depends on completion order.
* **Errors** carry the innermost failing step's path, name and type
  (:func:`image_project.errors.location_of`); a failing step of a group cancels its running
  siblings, whose paths are attached as cancelled; completed siblings stay recorded.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias, TypeVar

import anyio
from pydantic import JsonValue
from pydantic_core import to_jsonable_python

from image_project.backends.base import (
    ImageBackend,
    ImageReply,
    ImageRequest,
    Message,
    TextBackend,
    TextReply,
    TextRequest,
    Usage,
    conversation_problem,
)
from image_project.engine.answers import (
    Call,
    accepted,
    answer_text,
    cut_off,
    reask_messages,
    reject,
)
from image_project.engine.budget import TokenLimits
from image_project.engine.context import Context
from image_project.engine.nodes import ActionStep, ChatStep, ImageStep
from image_project.engine.outcome import Answer, Conversation, Drawn, Place
from image_project.engine.recorder import DefaultStepRecorder, StepRecorder, check_recorder
from image_project.engine.scope import Scope, root
from image_project.errors import (
    BackendError,
    EmptyPromptError,
    ModelOutputError,
    PipelineDefinitionError,
    PromptTooLongError,
    RefusalError,
    attach_rejected,
    locate,
)
from image_project.record.events import (
    ActionEvent,
    ChatEvent,
    ChatParams,
    ImageEvent,
    Reask,
    StepError,
    TokenLogprobs,
)

T = TypeVar("T")

ExecutionMode: TypeAlias = Literal["concurrent", "sequential"]


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ChatRunner:
    """Runs steps against a :class:`TextBackend` (and, for image steps, ``image_backend``),
    for the scopes of :meth:`root`.

    ``limiter`` (optional) bounds the model calls this runner has in flight; backends may
    apply their own limit as well. ``clock`` is the monotonic clock used for latencies.
    ``max_prompt_chars`` (None: no bound) is the longest request sent, in characters of
    every message together: a longer one fails its step with a
    :class:`~image_project.errors.PromptTooLongError` before it is sent.
    ``token_limits`` turns a step's :class:`~image_project.engine.budget.TokenBudget` into
    the limit sent (default: :class:`~image_project.engine.budget.TokenLimits`' defaults).

    Every request is checked before it is sent: one optional leading system message, then
    user and assistant turns alternating, first and last ``user``
    (:func:`~image_project.backends.base.conversation_problem`); a flow that would send
    anything else fails with a :class:`~image_project.errors.PipelineDefinitionError`.
    """

    def __init__(
        self,
        backend: TextBackend,
        *,
        recorder: object | None = None,
        mode: ExecutionMode = "concurrent",
        limiter: anyio.CapacityLimiter | None = None,
        clock: Callable[[], float] = time.perf_counter,
        image_backend: ImageBackend | None = None,
        token_limits: TokenLimits | None = None,
        max_prompt_chars: int | None = None,
    ) -> None:
        if mode not in ("concurrent", "sequential"):
            raise ValueError(f"mode must be 'concurrent' or 'sequential', got {mode!r}")
        self.backend = backend
        self.recorder: StepRecorder = check_recorder(
            recorder if recorder is not None else DefaultStepRecorder()
        )
        self.mode: ExecutionMode = mode
        self.limiter = limiter
        self.clock = clock
        self.image_backend = image_backend
        self.token_limits = token_limits if token_limits is not None else TokenLimits()
        self.max_prompt_chars = max_prompt_chars

    def root(self, ctx: Context) -> Scope:
        """The root scope of ``ctx``: its children are the top of the transcript (paths
        without a prefix), placed after everything recorded on ``ctx`` before; each child's
        merge is applied to ``ctx.messages`` as it ends."""
        return root(self, ctx)

    # -- actions ------------------------------------------------------------------------

    async def _action(self, step: ActionStep, ctx: Context, at: Place) -> tuple[Any, ActionEvent]:
        """Run an action at ``at``: its return value (awaited when it is awaitable) and its
        record."""
        try:
            created_at = _utc_now()
            self.recorder.on_step_start(ctx, at.path, type="action", name=at.name)
            t0 = self.clock()
            try:
                result = step.fn()
                if inspect.isawaitable(result):
                    result = await result
                record = ActionEvent(
                    order=at.order,
                    name=at.name,
                    path=at.path,
                    created_at=created_at,
                    latency_ms=round((self.clock() - t0) * 1000, 3),
                    result=as_json(result),
                    meta=_meta(step.meta),
                )
                self.recorder.on_step_end(ctx, record)
            except Exception as exc:
                self._report_error(ctx, at.path, at.name, exc)
                raise
        except Exception as exc:
            locate(exc, path=at.path, name=at.name, node_type="action")
            raise
        return result, record

    # -- image --------------------------------------------------------------------------

    async def _image(self, step: ImageStep[T], ctx: Context, at: Place) -> Drawn[T]:
        """The image call and its check at ``at``, recorded however it ends (see
        :class:`ImageStep`). A cut-off call is recorded with its ``cancelled`` error
        (``ImageEvent.cancelled``), so its path is known to have been cut off."""
        try:
            return await self._draw(step, ctx, at)
        except Exception as exc:
            locate(exc, path=at.path, name=at.name, node_type="image")
            raise

    async def _draw(self, step: ImageStep[T], ctx: Context, at: Place) -> Drawn[T]:
        path, name, order = at.path, at.name, at.order
        if self.image_backend is None:
            raise PipelineDefinitionError(f"{path}: an image step needs the runner's image_backend")
        request = step.request
        call = _ImageCall(request, order, name, path, _utc_now(), self.clock)
        self.recorder.on_step_start(
            ctx, path, type="image", name=name, model=request.model, size=request.size
        )
        try:
            call.reply = await self.image_backend.generate(request)
            value: Any = call.reply if step.check is None else await step.check(call.reply)
        except Exception as exc:
            attempts = exc.attempts if isinstance(exc, BackendError) else None
            self.recorder.on_step_end(ctx, call.event(StepError.of(exc), attempts))
            raise
        except BaseException:  # cancelled (Ctrl-C, SIGTERM) or KeyboardInterrupt
            cut = call.event(StepError(type="cancelled", message=step.cancelled()))
            self.recorder.on_step_end(ctx, cut)
            raise
        event = call.event()
        self.recorder.on_step_end(ctx, event)
        return Drawn(value, event)

    # -- chat ---------------------------------------------------------------------------

    async def _chat(
        self, step: ChatStep[T], ctx: Context, base: Conversation, at: Place
    ) -> tuple[Conversation, Answer[T]]:
        """Run a chat step at ``at`` on ``base``: the messages it adds (its prompt and
        answer; none for a recovered failure) and its answer."""
        try:
            return await self._say(step, ctx, base, at)
        except Exception as exc:
            locate(exc, path=at.path, name=at.name, node_type="chat")
            raise

    async def _say(
        self, step: ChatStep[Any], ctx: Context, base: Conversation, at: Place
    ) -> tuple[Conversation, Answer[Any]]:
        path, name, order = at.path, at.name, at.order
        created_at = _utc_now()
        try:
            prompt = self._render_prompt(step, ctx, path)
            if step.stateless:
                history: Conversation = (
                    (Message("system", step.system_prompt),) if step.system_prompt else ()
                )
            else:
                history = base
            model = step.model or self.backend.default_model
            limit = self.token_limits.resolve(step.max_output_tokens, model)
            self.recorder.on_step_start(
                ctx,
                path,
                type="chat",
                name=name,
                model=model,
                temperature=step.temperature,
                context_messages=len(history),
                prompt_chars=len(prompt),
            )
            t0 = self.clock()
            replies: list[TextReply] = []
            reasks: list[Reask] = []
            failure: Exception | None = None
            text: str | None
            try:
                text, value = await self._ask(
                    step, history, prompt, Call(model, limit, path), replies, reasks
                )
            except Exception as exc:
                sent = len(replies) + (1 if isinstance(exc, BackendError) else 0)
                attach_rejected(exc, sent, tuple(reasks))
                if step.on_failure is None:
                    raise
                failure = exc
                text = (replies[-1].text or replies[-1].refusal) if replies else None
                value = step.on_failure(exc)
            usage = Usage.total(r.usage for r in replies)
            attempts = sum(r.attempts for r in replies)
            pacing_wait_ms = sum(r.pacing_wait_ms for r in replies)
            if isinstance(failure, BackendError):
                attempts += failure.attempts
                pacing_wait_ms += failure.pacing_wait_ms
            last = replies[-1] if replies else None
            record = ChatEvent(
                order=order,
                name=name,
                path=path,
                prompt=prompt,
                system_prompt=step.system_prompt if step.stateless else None,
                response=text,
                params=ChatParams(
                    temperature=step.temperature,
                    model=model,
                    seed=step.seed,
                    max_output_tokens=limit,
                    backend=step.backend,
                    top_logprobs=step.top_logprobs,
                ),
                context_messages=len(history),
                created_at=created_at,
                latency_ms=round((self.clock() - t0) * 1000, 3),
                pacing_wait_ms=round(pacing_wait_ms, 3),
                usage=usage,
                attempts=attempts,
                answers=len(replies),
                system_fingerprint=last.system_fingerprint if last else None,
                response_model=last.model if last and last.model != model else None,
                reasks=tuple(reasks),
                wire_notes=tuple(dict.fromkeys(n for r in replies for n in r.notes)),
                error=None if failure is None else StepError.of(failure),
                meta=_meta(step.meta),
                logprobs=_token_logprobs(last),
            )
            self.recorder.on_step_end(ctx, record)
        except Exception as exc:
            self._report_error(ctx, path, name, exc)
            raise
        answer = Answer(value, record)
        if failure is not None or text is None:
            return (), answer
        return (Message("user", prompt), Message("assistant", text)), answer

    def _render_prompt(self, step: ChatStep[Any], ctx: Context, path: str) -> str:
        prompt = step.prompt(ctx) if callable(step.prompt) else step.prompt
        if prompt is None:
            raise EmptyPromptError(f"{path}: prompt is None; no model call was made")
        if not isinstance(prompt, str):
            raise EmptyPromptError(
                f"{path}: prompt must be a string, got {type(prompt).__name__}; "
                "no model call was made"
            )
        if not prompt.strip() and not step.allow_empty_prompt:
            raise EmptyPromptError(f"{path}: prompt is blank; no model call was made")
        return prompt

    async def _ask(
        self,
        step: ChatStep[Any],
        history: Conversation,
        prompt: str,
        call: Call,
        replies: list[TextReply],
        reasks: list[Reask],
    ) -> tuple[str, object]:
        """Call the model, validating with ``step.output`` and re-asking bad answers as
        ``step.reask`` says.

        ``replies`` and ``reasks`` are filled as the calls happen, so a caller still has
        them when this raises."""
        path = call.path
        messages: Conversation = (*history, Message("user", prompt))
        output, policy = step.output, step.reask
        rejected: list[str] = []  # whole, for the echo check; the records keep them bounded
        seed, temperature = step.seed, float(step.temperature)
        while True:
            problem = conversation_problem(messages)
            if problem is not None:
                raise PipelineDefinitionError(
                    f"{path}: the conversation would break strict chat templates: {problem}; "
                    "no model call was made"
                )
            self._check_size(path, messages)
            reply = await self._complete(
                TextRequest(
                    messages=messages,
                    temperature=temperature,
                    model=call.model,
                    seed=seed,
                    json_schema=output.schema if output is not None else None,
                    max_output_tokens=call.limit,
                    backend=step.backend,
                    top_logprobs=step.top_logprobs,
                )
            )
            replies.append(reply)
            text = answer_text(step, reply, path)
            cut = cut_off(call.limit, reply)
            try:
                return text, accepted(output, text, cut, rejected)
            except RefusalError as exc:
                raise RefusalError(f"{path}: {exc.detail}", output=exc.output) from exc
            except (ModelOutputError, ValueError) as exc:
                rejection = reject(policy, exc, text, reasks)
                reasks.append(rejection.record)
                rejected.append(text)
                error = rejection.record.error
                if rejection.final:
                    if policy.fallback is not None:
                        return text, policy.fallback(text, exc)
                    reason = exc.reason if isinstance(exc, ModelOutputError) else "invalid_output"
                    raise ModelOutputError(
                        reason,
                        f"{path}: the answer failed validation after {len(reasks)} "
                        f"attempt(s): {error}",
                        output=text,
                    ) from exc
                if rejection.sampling is not None:
                    seed, temperature = rejection.sampling
                messages = reask_messages(policy, history, messages, prompt, text, error)

    def _check_size(self, path: str, messages: Conversation) -> None:
        """Refuse a request longer than ``max_prompt_chars`` (every message's text), before it
        is sent."""
        limit = self.max_prompt_chars
        if limit is None:
            return
        size = sum(len(m.content) for m in messages)
        if size > limit:
            raise PromptTooLongError(
                f"{path}: the request would be {size:,} characters (system prompt and "
                f"messages), more than prompt.max_prompt_chars ({limit:,}); no model call "
                "was made for it. Shorten what feeds it (the profile, the concepts) or raise "
                "prompt.max_prompt_chars"
            )

    async def _complete(self, request: TextRequest) -> TextReply:
        if self.limiter is None:
            return await self.backend.complete(request)
        async with self.limiter:
            return await self.backend.complete(request)

    def _announce(self, path: str, steps: int) -> None:
        """Tell a recorder that has ``on_group_start(path, steps)`` (the CLI's progress lines)
        that a parallel group of ``steps`` steps starts at ``path``."""
        hook = getattr(self.recorder, "on_group_start", None)
        if hook is not None:
            hook(path, steps)

    def _report_error(self, ctx: Context, path: str, name: str, exc: BaseException) -> None:
        try:
            self.recorder.on_step_error(ctx, path, name, exc)
        except Exception as recorder_exc:
            exc.add_note(f"the step recorder also failed: {recorder_exc!r}")


@dataclass
class _ImageCall:
    """The image call as it goes: what was asked, when, and the reply once there is one."""

    request: ImageRequest
    order: tuple[int, ...]
    name: str
    path: str
    created_at: str
    clock: Callable[[], float]
    reply: ImageReply | None = None

    def __post_init__(self) -> None:
        self.started = self.clock()

    def event(self, error: StepError | None = None, attempts: int | None = None) -> ImageEvent:
        request, reply = self.request, self.reply
        if request.model is None or request.seed is None:
            raise PipelineDefinitionError(f"{self.path}: an image request needs a model and a seed")
        return ImageEvent(
            order=self.order,
            name=self.name,
            path=self.path,
            prompt=request.prompt,
            model=reply.model if reply else request.model,
            size=request.size,
            quality=request.quality,
            seed=request.seed,
            created_at=self.created_at,
            latency_ms=round((self.clock() - self.started) * 1000, 3),
            attempts=reply.attempts if reply else attempts,
            received_bytes=len(reply.data) if reply else None,
            format=reply.format if reply else None,
            revised_prompt=reply.revised_prompt if reply else None,
            metadata=dict(reply.metadata) if reply else {},
            error=error,
            pacing_wait_ms=reply.pacing_wait_ms if reply else 0.0,
        )


def as_json(value: object) -> JsonValue:
    """``value`` as JSON data for the record: models, dataclasses, mappings and sequences are
    converted in full (never trimmed); bytes become base64, NaN and infinities ``null``
    (JSON has neither), anything else JSON cannot hold its ``repr``."""
    try:
        converted: JsonValue = to_jsonable_python(
            value, fallback=repr, inf_nan_mode="null", bytes_mode="base64"
        )
    except Exception:  # a value that cannot be walked at all is still recorded
        return repr(value)
    return converted


def _meta(meta: Mapping[str, object]) -> dict[str, JsonValue]:
    return {str(key): as_json(value) for key, value in meta.items()}


def _token_logprobs(reply: TextReply | None) -> tuple[TokenLogprobs, ...] | None:
    """The record of a reply's token log-probabilities (None when it has none)."""
    if reply is None or reply.logprobs is None:
        return None
    return tuple(TokenLogprobs(token=t.token, logprob=t.logprob, top=t.top) for t in reply.logprobs)
