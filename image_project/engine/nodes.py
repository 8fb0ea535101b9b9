"""The steps: :class:`ChatStep`, :class:`ImageStep` and :class:`ActionStep`.

Steps are frozen descriptions, run one at a time from code that decides the next step on the
typed values of the last (:class:`~image_project.engine.scope.Scope`: ``ask``, ``gather``,
``act``). Everything that can be checked without running (merge modes, names, temperature as
a field) is checked when the step is constructed, so a broken step fails before any model
call.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias, TypeVar, get_args

from image_project.backends.base import ImageReply, ImageRequest
from image_project.engine.budget import TokenBudget
from image_project.engine.output import JsonOutput, Output, ReaskPolicy, TextOutput
from image_project.errors import PipelineDefinitionError

if TYPE_CHECKING:
    from image_project.engine.context import Context

MergeMode = Literal["all_messages", "last_response", "none"]
MERGE_MODES: tuple[str, ...] = get_args(MergeMode)

PromptSource: TypeAlias = "str | Callable[[Context], str]"
ActionFn: TypeAlias = "Callable[[], object | Awaitable[object]]"
T = TypeVar("T")


def check_name(value: object, what: str) -> str | None:
    """``value`` stripped: None, or a non-blank string without ``/`` (a path component)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise PipelineDefinitionError(f"{what} must be a string or None, got {value!r}")
    stripped = value.strip()
    if not stripped:
        raise PipelineDefinitionError(f"{what} must not be blank, got {value!r}")
    if "/" in stripped:
        raise PipelineDefinitionError(f"{what} must not contain '/', got {value!r}")
    return stripped


def _check_merge(value: object, where: str) -> None:
    if value not in MERGE_MODES:
        raise PipelineDefinitionError(
            f"{where}: merge must be one of {', '.join(MERGE_MODES)}; got {value!r}"
        )


@dataclass(frozen=True, kw_only=True)
class ChatStep(Generic[T]):
    """One model call, whose answer is a ``T``.

    ``prompt`` is a string or a function of the run :class:`Context` returning one; a None,
    non-string or blank prompt fails before any call (unless ``allow_empty_prompt``).
    ``temperature`` is a field, never a request parameter. ``model`` None means the backend's
    default. ``seed`` is sent to the backend and recorded. ``backend`` names the backend
    that answers (None: the main one; a judge's or the selector's own, ``backends:``).

    ``stateless`` runs the call on a fresh conversation (``system_prompt`` + this prompt)
    instead of the inherited one: a judge that must not see the pipeline's history.

    ``output`` says how the answer is read (:mod:`image_project.engine.output`): a
    :class:`~image_project.engine.output.JsonOutput` sends its model's strict JSON schema with
    the request and validates the answer against the model; a
    :class:`~image_project.engine.output.TextOutput` parses free text. A rejected answer
    (``ValueError`` or ``ModelOutputError``) is re-asked as ``reask`` says
    (:class:`~image_project.engine.output.ReaskPolicy`: how many times, in which style, with
    which wording, and an optional fallback once they are used up); a ``RefusalError`` is
    never re-asked. The parsed value (a ``T``) is what the step hands back (``Scope.ask``);
    the conversation gets the answer's text. Without ``output`` the answer text itself is the
    value.

    ``on_failure(exc)``, when set, makes the step *recoverable*: any error of the step (a
    transport error after the retries, a refusal, an answer still invalid after the re-asks)
    is recorded on the step's transcript record (``error``) and the return value of
    ``on_failure`` (also a ``T``) is the step's value instead of failing the run, so parallel siblings go on. Used by
    the judge ensemble, whose quorum rule decides later whether the run can continue.
    Cancellation is never recovered.

    ``top_logprobs``, when set, asks for the answer tokens' log-probabilities and that many
    alternatives at each; the step's record keeps the last answer's (``logprobs``).

    ``max_output_tokens`` is the answer's token limit, sent with every request of the step:
    a :class:`~image_project.engine.budget.TokenBudget` (the kind of answer, resolved by the
    runner's :class:`~image_project.engine.budget.TokenLimits`) or a plain int.
    """

    prompt: PromptSource
    temperature: float
    name: str | None = None
    merge: MergeMode = "all_messages"
    model: str | None = None
    seed: int | None = None
    output: Output[T] | None = None
    reask: ReaskPolicy = field(default_factory=ReaskPolicy)
    max_output_tokens: int | TokenBudget | None = None
    stateless: bool = False
    system_prompt: str | None = None
    on_failure: Callable[[Exception], T] | None = None
    allow_empty_prompt: bool = False
    allow_empty_response: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)
    backend: str | None = None
    top_logprobs: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", check_name(self.name, "ChatStep.name"))
        where = f"ChatStep {self.name or '(unnamed)'}"
        _check_merge(self.merge, where)
        if not (isinstance(self.prompt, str) or callable(self.prompt)):
            raise PipelineDefinitionError(
                f"{where}: prompt must be a string or a callable, got {self.prompt!r}"
            )
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            raise PipelineDefinitionError(f"{where}: temperature must be a number, got {t!r}")
        if not 0.0 <= float(t) <= 2.0:
            raise PipelineDefinitionError(f"{where}: temperature must be in [0, 2], got {t!r}")
        if "temperature" in self.meta:
            raise PipelineDefinitionError(
                f"{where}: set temperature with the ChatStep.temperature field, not in meta"
            )
        if self.output is not None and not isinstance(self.output, JsonOutput | TextOutput):
            raise PipelineDefinitionError(
                f"{where}: output must be a JsonOutput or a TextOutput, got {self.output!r}"
            )
        if not isinstance(self.reask, ReaskPolicy):
            raise PipelineDefinitionError(
                f"{where}: reask must be a ReaskPolicy, got {self.reask!r}"
            )
        if self.reask.fallback and self.output is None:
            # Without an output only a cut-off answer (finish_reason 'length') is re-asked.
            raise PipelineDefinitionError(
                f"{where}: a fallback needs an output to validate the answer"
            )
        _check_limit(self.max_output_tokens, where)
        if self.on_failure is not None and not callable(self.on_failure):
            raise PipelineDefinitionError(f"{where}: on_failure must be callable")
        if self.system_prompt is not None and not self.stateless:
            raise PipelineDefinitionError(
                f"{where}: system_prompt is only used by stateless steps; set stateless=True"
            )


def _check_limit(limit: object, where: str) -> None:
    if limit is None or isinstance(limit, TokenBudget):
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise PipelineDefinitionError(
            f"{where}: max_output_tokens must be a TokenBudget, an int >= 1 or None, got {limit!r}"
        )


def _interrupted() -> str:
    return "the run was interrupted during the image call"


@dataclass(frozen=True, kw_only=True)
class ImageStep(Generic[T]):
    """One image call, whose checked answer is a ``T``.

    The runner sends ``request`` to its image backend, then awaits ``check(reply)`` (e.g. the
    decode of the whole image, off the event loop), whose value is the step's; without
    ``check`` the reply itself is. The call is recorded as an
    :class:`~image_project.record.events.ImageEvent` however it ends: with its reply, failed
    (the error, and the reply when one arrived but failed its check), or cut off by a
    cancellation (``error.type == "cancelled"`` with the message ``cancelled()`` gives at
    that moment). It adds nothing to the conversation."""

    request: ImageRequest
    name: str | None = None
    check: Callable[[ImageReply], Awaitable[T]] | None = None
    cancelled: Callable[[], str] = _interrupted
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def merge(self) -> MergeMode:
        return "none"

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", check_name(self.name, "ImageStep.name"))
        if not isinstance(self.request, ImageRequest):
            raise PipelineDefinitionError(
                f"ImageStep {self.name}: request must be an ImageRequest, got {self.request!r}"
            )


@dataclass(frozen=True, kw_only=True)
class ActionStep:
    """Pure Python glue (sync or async), what :meth:`Scope.act
    <image_project.engine.scope.Scope.act>` runs. Produces no messages; its return value is
    its value, also recorded in the transcript (as JSON, in full)."""

    fn: ActionFn
    name: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", check_name(self.name, "ActionStep.name"))
        if not callable(self.fn):
            raise PipelineDefinitionError(f"ActionStep {self.name}: fn must be callable")


Step: TypeAlias = "ChatStep[Any] | ImageStep[Any] | ActionStep"


def default_name(step: Step, index: int) -> str:
    """The step's name, or ``step_NN`` / ``image_NN`` / ``action_NN`` from its 1-based index."""
    if step.name is not None:
        return step.name
    prefix = (
        "step"
        if isinstance(step, ChatStep)
        else "image"
        if isinstance(step, ImageStep)
        else "action"
    )
    return f"{prefix}_{index:02d}"
