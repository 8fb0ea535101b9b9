"""The step tree: :class:`ChatStep`, :class:`ActionStep` and :class:`Block`.

Nodes are frozen descriptions; :class:`~image_project.engine.runner.ChatRunner` executes them.
Everything that can be checked without running (merge modes, names, sibling collisions,
capture keys shared by parallel siblings, temperature as a field) is checked when the node is
constructed, so a broken tree fails before any model call.

Naming: an unnamed child gets ``step_NN`` / ``action_NN`` / ``block_NN`` from its 1-based index
among its siblings; an unnamed root block is ``pipeline``. Two siblings with the same effective
name are an error, never silently renamed.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, get_args

from image_project.backends.base import JsonSchema
from image_project.errors import PipelineDefinitionError

if TYPE_CHECKING:
    from image_project.engine.context import Context

__all__ = [
    "MERGE_MODES",
    "ActionFn",
    "ActionStep",
    "Block",
    "ChatStep",
    "FailureFn",
    "FallbackFn",
    "MergeMode",
    "Node",
    "ParseFn",
    "PromptSource",
    "ReaskFn",
    "ReaskStyle",
    "capture_keys",
    "default_name",
    "default_reask",
    "walk",
]

MergeMode = Literal["all_messages", "last_response", "none"]
ReaskStyle = Literal["conversation", "restate"]
MERGE_MODES: tuple[str, ...] = get_args(MergeMode)

PromptSource: TypeAlias = "str | Callable[[Context], object]"
ActionFn: TypeAlias = "Callable[[Context], object | Awaitable[object]]"
ParseFn: TypeAlias = Callable[[str], object]
ReaskFn: TypeAlias = Callable[[str], str]
FallbackFn: TypeAlias = Callable[[str, Exception], object]
FailureFn: TypeAlias = Callable[[Exception], object]


def _check_name(value: object, what: str) -> str | None:
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


def default_reask(error: str) -> str:
    return (
        "Your previous answer was rejected by validation:\n"
        f"{error}\n"
        "Answer the original request again, following the required format exactly. "
        "Output only the answer."
    )


@dataclass(frozen=True, kw_only=True)
class ChatStep:
    """One model call.

    ``prompt`` is a string or a function of the run :class:`Context` returning one; a None,
    non-string or blank prompt fails before any call (unless ``allow_empty_prompt``).
    ``temperature`` is a field, never a request parameter. ``model`` None means the backend's
    default. ``seed`` is sent to the backend and recorded.

    ``stateless`` runs the call on a fresh conversation (``system_prompt`` + this prompt)
    instead of the inherited one: a judge that must not see the pipeline's history.

    ``parse`` validates the answer; raising ``ValueError`` (pydantic's ``ValidationError``
    is one) or ``ModelOutputError`` re-asks the model up to ``max_reasks`` times with the
    error text appended to the conversation (a ``RefusalError`` is never re-asked). The parsed
    value is what ``capture_key`` stores; the conversation gets the answer's text.
    ``reask_style`` ``"restate"`` re-asks statelessly instead: the same history plus ONE user
    message (the original prompt followed by the re-ask text), never the rejected answer as an
    assistant message (for judges and other strict-JSON steps, so a bad answer cannot anchor
    the next one).
    ``fallback(last_answer, last_error)``, when set, is called once the re-asks are exhausted
    and its return value is accepted instead of raising (for steps that must never fail on
    a bad answer, e.g. a title with a deterministic fallback); the record keeps every re-ask.

    ``on_failure(exc)``, when set, makes the step *recoverable*: any error of the step (a
    transport error after the retries, a refusal, an answer still invalid after the re-asks)
    is recorded on the step's transcript record (``error``) and the return value of
    ``on_failure`` is captured instead of failing the run, so parallel siblings go on. Used by
    the judge ensemble, whose quorum rule decides later whether the run can continue.
    Cancellation is never recovered.
    """

    prompt: PromptSource
    temperature: float
    name: str | None = None
    merge: MergeMode = "all_messages"
    capture_key: str | None = None
    model: str | None = None
    seed: int | None = None
    json_schema: JsonSchema | None = None
    max_output_tokens: int | None = None
    stateless: bool = False
    system_prompt: str | None = None
    parse: ParseFn | None = None
    max_reasks: int = 0
    reask_prompt: ReaskFn = default_reask
    reask_style: ReaskStyle = "conversation"
    fallback: FallbackFn | None = None
    on_failure: FailureFn | None = None
    allow_empty_prompt: bool = False
    allow_empty_response: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _check_name(self.name, "ChatStep.name"))
        object.__setattr__(
            self, "capture_key", _check_name(self.capture_key, "ChatStep.capture_key")
        )
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
        if isinstance(self.max_reasks, bool) or not isinstance(self.max_reasks, int):
            raise PipelineDefinitionError(f"{where}: max_reasks must be an int")
        if self.max_reasks < 0:
            raise PipelineDefinitionError(f"{where}: max_reasks must be >= 0")
        if self.reask_style not in ("conversation", "restate"):
            raise PipelineDefinitionError(
                f"{where}: reask_style must be 'conversation' or 'restate', got {self.reask_style!r}"
            )
        if (self.max_reasks or self.fallback) and self.parse is None:
            raise PipelineDefinitionError(f"{where}: max_reasks and fallback need a parse function")
        if self.on_failure is not None and not callable(self.on_failure):
            raise PipelineDefinitionError(f"{where}: on_failure must be callable")
        if self.system_prompt is not None and not self.stateless:
            raise PipelineDefinitionError(
                f"{where}: system_prompt is only used by stateless steps; set stateless=True"
            )


@dataclass(frozen=True, kw_only=True)
class ActionStep:
    """Pure Python glue (sync or async). Produces no messages; ``capture_key`` stores its
    return value, which is also recorded (JSON-safe and trimmed) in the transcript."""

    fn: ActionFn
    name: str | None = None
    capture_key: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _check_name(self.name, "ActionStep.name"))
        object.__setattr__(
            self, "capture_key", _check_name(self.capture_key, "ActionStep.capture_key")
        )
        if not callable(self.fn):
            raise PipelineDefinitionError(f"ActionStep {self.name}: fn must be callable")


@dataclass(frozen=True, kw_only=True)
class Block:
    """A named group of nodes.

    Sequential by default: each child sees the conversation as its previous siblings left it.
    ``parallel=True`` runs the children concurrently, each from the block's starting
    conversation; when all have finished their merges and captures are applied in declared
    order, so the result never depends on which call finished first. Parallel siblings may
    not share a capture key. ``capture_key`` stores the block's last assistant response.
    """

    nodes: Sequence[Node]
    name: str | None = None
    merge: MergeMode = "all_messages"
    capture_key: str | None = None
    parallel: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)
    child_names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _check_name(self.name, "Block.name"))
        object.__setattr__(self, "capture_key", _check_name(self.capture_key, "Block.capture_key"))
        where = f"Block {self.name or '(unnamed)'}"
        _check_merge(self.merge, where)
        nodes = tuple(self.nodes)
        for node in nodes:
            if not isinstance(node, ChatStep | ActionStep | Block):
                raise PipelineDefinitionError(
                    f"{where}: children must be ChatStep, ActionStep or Block, got {node!r}"
                )
        object.__setattr__(self, "nodes", nodes)
        names = tuple(default_name(node, i) for i, node in enumerate(nodes, start=1))
        seen: set[str] = set()
        for n in names:
            if n in seen:
                raise PipelineDefinitionError(f"{where}: two children are named {n!r}")
            seen.add(n)
        object.__setattr__(self, "child_names", names)
        if self.parallel:
            owner: dict[str, str] = {}
            for child_name, node in zip(names, nodes, strict=True):
                for key in capture_keys(node):
                    if key in owner and owner[key] != child_name:
                        raise PipelineDefinitionError(
                            f"{where}: parallel children {owner[key]!r} and {child_name!r} "
                            f"both capture {key!r}"
                        )
                    owner[key] = child_name


Node: TypeAlias = ChatStep | ActionStep | Block


def default_name(node: Node, index: int) -> str:
    """The node's name, or ``step_NN`` / ``action_NN`` / ``block_NN`` from its 1-based index."""
    if node.name is not None:
        return node.name
    prefix = (
        "step"
        if isinstance(node, ChatStep)
        else "action"
        if isinstance(node, ActionStep)
        else "block"
    )
    return f"{prefix}_{index:02d}"


def capture_keys(node: Node) -> set[str]:
    """Every capture key written anywhere in ``node``'s subtree."""
    keys = {node.capture_key} if node.capture_key else set()
    if isinstance(node, Block):
        for child in node.nodes:
            keys |= capture_keys(child)
    return keys


def walk(node: Node, path: str | None = None) -> Iterator[tuple[str, Node]]:
    """Every node of the tree with its path, in declared pre-order (root first)."""
    here = path or node.name or ("pipeline" if isinstance(node, Block) else default_name(node, 1))
    yield here, node
    if isinstance(node, Block):
        for child_name, child in zip(node.child_names, node.nodes, strict=True):
            yield from walk(child, f"{here}/{child_name}")
