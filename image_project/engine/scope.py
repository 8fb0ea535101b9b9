"""Steps run from code, one decision at a time: :class:`Scope` and :class:`Answer`.

A step tree (:class:`~image_project.engine.nodes.Block`) fixes its shape before the run. A
flow whose next step depends on the last answers (how many cards survived a round, which ids
a judge must score) is written as code instead, on a scope: a block whose children are
added as the code reaches them. ``await scope.ask(step)`` runs one
:class:`~image_project.engine.nodes.ChatStep` and hands back its typed value with its
transcript event; ``await scope.gather(name, steps)`` runs steps concurrently as a parallel
block and hands back their answers in declared order; ``await scope.act(name, fn)`` runs and
records a piece of code (an action); ``await scope.run(node)`` runs a whole tree;
``async with scope.scope(name) as inner`` opens a nested block. The root scope comes from
:meth:`ChatRunner.scope <image_project.engine.runner.ChatRunner.scope>`.

A scope keeps every contract of a block: each child gets the next declared position (its
path is ``<scope path>/<child name>``, its records sort by that position whatever order
concurrent calls finish in), children see the conversation as the previous ones left it,
and the scope's merge mode says what reaches its parent when it closes (``none`` by
default: a scoring flow's prompts and answers never reach the conversation). Values pass
from step to step as Python values.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

from image_project.backends.base import Message
from image_project.engine.context import Context
from image_project.engine.fanout import ordered_fanout
from image_project.engine.nodes import (
    MERGE_MODES,
    ActionStep,
    Block,
    ChatStep,
    MergeMode,
    Node,
    default_name,
)
from image_project.engine.outcome import Conversation, NodeOutcome
from image_project.errors import PipelineDefinitionError, StepFailedError, locate
from image_project.record.events import ActionEvent, ChatEvent

__all__ = ["Answer", "Scope", "ScopeRunner", "merge_produced", "root_scope"]

T = TypeVar("T")
R = TypeVar("R")


class ScopeRunner(Protocol):
    """What a scope needs of the runner that made it: run one node on a conversation, merge
    its outcome, announce a parallel group, and say whether calls go one at a time.
    :class:`~image_project.engine.runner.ChatRunner` is one; the scope never imports it, so
    the runner can import this module without a cycle."""

    @property
    def mode(self) -> str:
        """``"sequential"`` runs one call at a time; anything else runs a group at once."""
        ...

    async def run_node(
        self,
        node: Node,
        ctx: Context,
        base: Conversation,
        *,
        path: str,
        name: str,
        order: tuple[int, ...],
    ) -> NodeOutcome: ...

    def merge(
        self, parent: Conversation, node: Node, outcome: NodeOutcome, path: str
    ) -> Conversation: ...

    def announce_group(self, path: str, block: Block) -> None: ...


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A chat step's value (its parsed answer, or its ``on_failure`` value) and the event the
    transcript holds for it (path, answers received, error)."""

    value: T
    event: ChatEvent


class Scope:
    """A block run from code; see the module docstring. Made by
    :meth:`ChatRunner.scope <image_project.engine.runner.ChatRunner.scope>` and
    :meth:`scope`, never directly."""

    def __init__(
        self,
        runner: ScopeRunner,
        ctx: Context,
        *,
        path: str,
        order: tuple[int, ...],
        base: tuple[Message, ...],
    ) -> None:
        self.runner = runner
        self.ctx = ctx
        self.path = path
        self.order = order
        self.base = base
        self.working = base
        self._names: set[str] = set()

    # -- children -----------------------------------------------------------------------

    def _child(self, name: str) -> tuple[str, tuple[int, ...]]:
        if name in self._names:
            raise PipelineDefinitionError(f"{self.path}: two children are named {name!r}")
        self._names.add(name)
        order = (*self.order, len(self._names) - 1)
        return f"{self.path}/{name}", order

    def _next_name(self, node: Node) -> str:
        return default_name(node, len(self._names) + 1)

    async def run(self, node: Node) -> NodeOutcome:
        """Run a whole tree as this scope's next child and apply its merge."""
        name = self._next_name(node)
        path, order = self._child(name)
        outcome = await self.runner.run_node(
            node, self.ctx, self.working, path=path, name=name, order=order
        )
        self.working = self.runner.merge(self.working, node, outcome, path)
        return outcome

    async def ask(self, step: ChatStep[T]) -> Answer[T]:
        """Run one chat step as the next child; its value and event."""
        outcome = await self.run(step)
        return _answer(outcome)

    async def act(self, name: str, fn: Callable[[], R]) -> R:
        """Run ``fn`` as an action named ``name`` (recorded with its result) and return what
        it returned."""
        outcome = await self.run(ActionStep(name=name, fn=lambda _ctx: fn()))
        assert isinstance(outcome.event, ActionEvent)
        return cast("R", outcome.value)

    async def gather(
        self,
        name: str,
        steps: Sequence[ChatStep[T]],
        *,
        each: Callable[[int, Answer[T]], None] | None = None,
    ) -> list[Answer[T]]:
        """Run ``steps`` concurrently as a parallel block named ``name`` (merge ``none``),
        each from this scope's conversation; their answers in declared order. ``each(i,
        answer)`` is called as each step finishes, so a caller keeps the answers that
        arrived even when a sibling fails."""
        block = Block(name=name, nodes=steps, parallel=True, merge="none")
        path, order = self._child(name)
        self.runner.announce_group(path, block)

        async def one(i: int, child_name: str, step: ChatStep[T]) -> Answer[T]:
            outcome = await self.runner.run_node(
                step,
                self.ctx,
                self.working,
                path=f"{path}/{child_name}",
                name=child_name,
                order=(*order, i),
            )
            answer: Answer[T] = _answer(outcome)
            if each is not None:
                each(i, answer)
            return answer

        fns: list[Callable[[], Awaitable[Answer[T]]]] = [
            functools.partial(one, i, child_name, step)
            for i, (child_name, step) in enumerate(zip(block.child_names, steps, strict=True))
        ]
        try:
            return await ordered_fanout(
                fns,
                sequential=self.runner.mode == "sequential",
                labels=[f"{path}/{child_name}" for child_name in block.child_names],
            )
        except Exception as exc:
            locate(exc, path=path, name=name, node_type="block")
            raise

    @asynccontextmanager
    async def scope(self, name: str, *, merge: MergeMode = "none") -> AsyncIterator[Scope]:
        """A nested scope as this scope's next child; what it produced is merged into this
        scope when it closes (``merge``), only if it closes without an error."""
        _check_merge(merge, f"{self.path}/{name}")
        path, order = self._child(name)
        inner = Scope(self.runner, self.ctx, path=path, order=order, base=self.working)
        try:
            yield inner
        except Exception as exc:
            locate(exc, path=path, name=name, node_type="block")
            raise
        self.working = merge_produced(self.working, merge, inner.produced, path)

    @property
    def produced(self) -> tuple[Message, ...]:
        """The messages this scope's children added to its conversation so far."""
        return self.working[len(self.base) :]


def _answer(outcome: NodeOutcome) -> Answer[Any]:
    assert isinstance(outcome.event, ChatEvent)
    return Answer(outcome.value, outcome.event)


def _check_merge(merge: object, where: str) -> None:
    if merge not in MERGE_MODES:
        raise PipelineDefinitionError(
            f"{where}: merge must be one of {', '.join(MERGE_MODES)}; got {merge!r}"
        )


def merge_produced(
    parent: tuple[Message, ...], merge: MergeMode, produced: tuple[Message, ...], path: str
) -> tuple[Message, ...]:
    """``parent`` after a node that produced ``produced`` merges into it as ``merge`` says
    (the runner's rule for every node: see :mod:`image_project.engine.runner`).

    ``last_response`` appends the node's question and its final answer as one exchange: the
    first user message it produced, then its last assistant message (a refined stage: the
    stage's prompt answered by the refined text), so the conversation keeps alternating."""
    if merge == "none":
        return parent
    if merge == "all_messages":
        return parent + produced
    last = next((m.content for m in reversed(produced) if m.role == "assistant"), None)
    if last is None or not last.strip():
        raise StepFailedError(
            f"{path}: merge 'last_response' requested but the node produced no assistant output"
        )
    asked = next(m for m in produced if m.role == "user")
    return (*parent, asked, Message("assistant", last))


@asynccontextmanager
async def root_scope(
    runner: ScopeRunner, ctx: Context, name: str, merge: MergeMode
) -> AsyncIterator[Scope]:
    """A scope at the root of ``ctx`` (the next root run), merged into ``ctx.messages`` when
    it closes without an error."""
    _check_merge(merge, name)
    order = (ctx.roots_run,)
    ctx.roots_run += 1
    scope = Scope(runner, ctx, path=name, order=order, base=ctx.messages)
    try:
        yield scope
    except Exception as exc:
        locate(exc, path=name, name=name, node_type="block")
        raise
    ctx.messages = merge_produced(ctx.messages, merge, scope.produced, name)
