"""Steps run from code, one decision at a time: :class:`Scope`.

A flow is code on a scope: a block whose children are added as the code reaches them.
``await scope.ask(step)`` runs one :class:`~image_project.engine.nodes.ChatStep` (or
:class:`~image_project.engine.nodes.ImageStep`) and hands back its typed value with its
transcript event (:class:`~image_project.engine.outcome.Answer`,
:class:`~image_project.engine.outcome.Drawn`); ``await scope.gather(name, items)`` runs steps,
or functions of a scope, concurrently and hands back their results in declared order;
``await scope.act(name, fn)`` runs and records a piece of code (an action); ``async with
scope.scope(name) as inner`` opens a nested block. The root scope of a run's context comes
from :meth:`ChatRunner.root <image_project.engine.runner.ChatRunner.root>`.

Every child gets the next declared position when the code reaches it (its path is ``<scope
path>/<child name>``, its record sorts by that position whatever order concurrent calls finish
in); the items of a gather get theirs, in declared order, before any of them starts. Children
see the conversation as the previous ones left it; each child's merge mode says what reaches
its scope (``all_messages``, ``last_response``: its first prompt and last answer, as one
exchange, ``none``), and a nested scope's what reaches its parent when it closes without an
error (``none`` by default: a scoring flow's prompts and answers never reach the
conversation). Values pass from step to step as Python values.

Naming: an unnamed child gets ``step_NN`` / ``image_NN`` / ``action_NN`` from its 1-based
position among its siblings. Two siblings with the same name are an error, never silently
renamed.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar, overload

from image_project.backends.base import Message
from image_project.engine.context import Context
from image_project.engine.fanout import ordered_fanout
from image_project.engine.nodes import (
    MERGE_MODES,
    ActionStep,
    ChatStep,
    ImageStep,
    MergeMode,
    Step,
    check_name,
    default_name,
)
from image_project.engine.outcome import Answer, Conversation, Drawn, Place
from image_project.errors import PipelineDefinitionError, StepFailedError, locate
from image_project.record.events import ActionEvent

T = TypeVar("T")
R = TypeVar("R")


class ScopeRunner(Protocol):
    """What a scope needs of the runner that made it: run one chat, image or action step at
    a place, announce a parallel group, and say whether calls go one at a time.
    :class:`~image_project.engine.runner.ChatRunner` is one; the scope never imports it, so
    the runner can import this module without a cycle."""

    @property
    def mode(self) -> str:
        """``"sequential"`` runs one call at a time; anything else runs a group at once."""
        ...

    async def _chat(
        self, step: ChatStep[T], ctx: Context, base: Conversation, at: Place
    ) -> tuple[Conversation, Answer[T]]: ...

    async def _image(self, step: ImageStep[T], ctx: Context, at: Place) -> Drawn[T]: ...

    async def _action(
        self, step: ActionStep, ctx: Context, at: Place
    ) -> tuple[Any, ActionEvent]: ...

    def _announce(self, path: str, steps: int) -> None: ...


class Scope:
    """A block run from code; see the module docstring. Made by
    :meth:`ChatRunner.root <image_project.engine.runner.ChatRunner.root>` and
    :meth:`scope`, never directly."""

    def __init__(
        self,
        runner: ScopeRunner,
        ctx: Context,
        *,
        path: str,
        order: tuple[int, ...],
        base: Conversation,
    ) -> None:
        self._runner = runner
        self.ctx = ctx
        self.path = path
        self.order = order
        self.base = base
        self._working = base
        self._names: set[str] = set()
        self._count = 0

    @property
    def working(self) -> Conversation:
        """The conversation the next child starts from."""
        return self._working

    @working.setter
    def working(self, messages: Conversation) -> None:
        self._working = messages

    @property
    def produced(self) -> Conversation:
        """The messages this scope's children added to its conversation so far."""
        return self.working[len(self.base) :]

    # -- placing children ---------------------------------------------------------------

    def _take(self) -> int:
        """The next child's position."""
        self._count += 1
        return self._count - 1

    def _index(self, position: int) -> int:
        """The 1-based index an unnamed child at ``position`` is named by."""
        return position + 1

    def _place(self, name: str | None, step: Step | None = None) -> Place:
        """The next child's place, its name (``step``'s default name when None) claimed."""
        position = self._take()
        if name is None and step is not None:
            name = default_name(step, self._index(position))
        if name is None:
            raise PipelineDefinitionError(f"{self.path or 'root'}: a child needs a name")
        if name in self._names:
            raise PipelineDefinitionError(f"{self.path or 'root'}: two children are named {name!r}")
        self._names.add(name)
        path = f"{self.path}/{name}" if self.path else name
        return Place(name, path, (*self.order, position))

    # -- children -----------------------------------------------------------------------

    @overload
    async def ask(self, step: ChatStep[T]) -> Answer[T]: ...

    @overload
    async def ask(self, step: ImageStep[T]) -> Drawn[T]: ...

    async def ask(self, step: ChatStep[T] | ImageStep[T]) -> Answer[T] | Drawn[T]:
        """Run one chat or image step as the next child; its value and event."""
        at = self._place(step.name, step)
        if isinstance(step, ImageStep):
            return await self._runner._image(step, self.ctx, at)
        return await self._say(step, at)

    async def _say(self, step: ChatStep[T], at: Place) -> Answer[T]:
        produced, answer = await self._runner._chat(step, self.ctx, self.working, at)
        self.working = merge_produced(self.working, step.merge, produced, at.path)
        return answer

    @overload
    async def act(
        self,
        name: str,
        fn: Callable[[], Awaitable[R]],
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> R: ...

    @overload
    async def act(
        self, name: str, fn: Callable[[], R], *, meta: Mapping[str, Any] | None = None
    ) -> R: ...

    async def act(
        self, name: str, fn: Callable[[], Any], *, meta: Mapping[str, Any] | None = None
    ) -> Any:
        """Run ``fn`` (sync or async) as an action named ``name``, recorded with its result
        (and ``meta``), and return what it returned."""
        step = ActionStep(name=self._named(name, "an action"), fn=fn, meta=dict(meta or {}))
        value, _ = await self._runner._action(step, self.ctx, self._place(step.name))
        return value

    @overload
    async def gather(
        self,
        name: str | None,
        items: Sequence[ChatStep[T]],
        *,
        merge: MergeMode = "none",
        each: Callable[[int, Answer[T]], None] | None = None,
    ) -> list[Answer[T]]: ...

    @overload
    async def gather(
        self,
        name: str | None,
        items: Sequence[Callable[[Scope], Awaitable[R]]],
        *,
        merge: MergeMode = "none",
        each: Callable[[int, R], None] | None = None,
    ) -> list[R]: ...

    async def gather(
        self,
        name: str | None,
        items: Sequence[Any],
        *,
        merge: MergeMode = "none",
        each: Callable[[int, Any], None] | None = None,
    ) -> list[Any]:
        """Run ``items`` concurrently (one at a time in the sequential mode), each from this
        scope's conversation; their results in declared order.

        An item is a :class:`~image_project.engine.nodes.ChatStep` (its result is its
        :class:`~image_project.engine.outcome.Answer`) or a function of a scope (an async
        ``fn(scope)``, whose children sit at the item's position; its result is what it
        returns). With a ``name`` the items are the children of a parallel block of that
        name, which merges into this scope as ``merge`` says when all have finished; without
        one they are this scope's own next children. Either way each item's messages merge
        in declared order, never in the order they finished. ``each(i, result)`` is called
        as each item finishes, so a caller keeps the results that arrived even when a
        sibling fails. A failing item cancels the running ones; the error names its path and
        the steps that were cut off."""
        group = self if name is None else self._nested(name)
        branches = [_Branch(group, group._take()) for _ in items]
        fns: list[Callable[[], Awaitable[Any]]] = []
        labels: list[str | None] = []
        for i, (branch, item) in enumerate(zip(branches, items, strict=True)):
            if isinstance(item, ChatStep):
                at = branch._place(item.name, item)
                fns.append(functools.partial(branch._say, item, at))
                labels.append(at.path)
            elif callable(item):
                fns.append(functools.partial(item, branch))
                labels.append(None)
            else:
                raise PipelineDefinitionError(
                    f"{group.path or 'root'}: children must be ChatSteps or functions of a "
                    f"scope, got {item!r}"
                )
            if each is not None:
                fns[-1] = functools.partial(_reported, fns[-1], i, each)
        if name is not None and all(isinstance(item, ChatStep) for item in items):
            self._runner._announce(group.path, len(items))
        try:
            results = await ordered_fanout(
                fns, sequential=self._runner.mode == "sequential", labels=labels
            )
        except Exception as exc:
            if name is not None:
                locate(exc, path=group.path, name=name, node_type="block")
            raise
        for branch in branches:
            group.working = group.working + branch.produced
        if name is not None:
            self.working = merge_produced(self.working, merge, group.produced, group.path)
        return results

    @asynccontextmanager
    async def scope(self, name: str, *, merge: MergeMode = "none") -> AsyncIterator[Scope]:
        """A nested scope as this scope's next child; what it produced is merged into this
        scope when it closes (``merge``), only if it closes without an error."""
        _check_merge(merge, f"{self.path}/{name}" if self.path else name)
        inner = self._nested(name)
        try:
            yield inner
        except Exception as exc:
            locate(exc, path=inner.path, name=name, node_type="block")
            raise
        self.working = merge_produced(self.working, merge, inner.produced, inner.path)

    def _named(self, name: object, what: str) -> str:
        checked = check_name(name, f"the name of {what} in {self.path or 'root'}")
        if checked is None:
            raise PipelineDefinitionError(f"{self.path or 'root'}: {what} needs a name")
        return checked

    def _nested(self, name: str) -> Scope:
        at = self._place(self._named(name, "a scope"))
        return Scope(self._runner, self.ctx, path=at.path, order=at.order, base=self.working)


async def _reported(fn: Callable[[], Awaitable[R]], i: int, each: Callable[[int, R], None]) -> R:
    result = await fn()
    each(i, result)
    return result


class _Branch(Scope):
    """One item of a gather: at its group's level (its children are named among the group's
    and sit at the item's position), from the group's conversation."""

    def __init__(self, group: Scope, position: int) -> None:
        super().__init__(
            group._runner,
            group.ctx,
            path=group.path,
            order=(*group.order, position),
            base=group.working,
        )
        self._names = group._names
        self.position = position

    def _index(self, position: int) -> int:
        return self.position + 1


class _Root(Scope):
    """The root scope of a context: its conversation is ``ctx.messages``, and its children's
    positions follow everything recorded on the context before."""

    def __init__(self, runner: ScopeRunner, ctx: Context) -> None:
        super().__init__(runner, ctx, path="", order=(), base=ctx.messages)

    @property
    def working(self) -> Conversation:
        return self.ctx.messages

    @working.setter
    def working(self, messages: Conversation) -> None:
        self.ctx.messages = messages

    def _take(self) -> int:
        self.ctx.roots_run += 1
        return self.ctx.roots_run - 1


def root(runner: ScopeRunner, ctx: Context) -> Scope:
    """The root scope of ``ctx`` (:meth:`ChatRunner.root
    <image_project.engine.runner.ChatRunner.root>`)."""
    return _Root(runner, ctx)


def _check_merge(merge: object, where: str) -> None:
    if merge not in MERGE_MODES:
        raise PipelineDefinitionError(
            f"{where}: merge must be one of {', '.join(MERGE_MODES)}; got {merge!r}"
        )


def merge_produced(
    parent: tuple[Message, ...], merge: MergeMode, produced: tuple[Message, ...], path: str
) -> tuple[Message, ...]:
    """``parent`` after a child that produced ``produced`` merges into it as ``merge`` says.

    ``last_response`` appends the child's question and its final answer as one exchange: the
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
