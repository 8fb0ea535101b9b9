"""Live progress for the CLI: one line per finished step, with counts for concurrent groups.

A :class:`ProgressRecorder` is a :class:`DefaultStepRecorder` (so the transcript still gets
every record in declared order) that also writes a short line per finished step, e.g.::

    [  3.1s] ✓ pipeline/dalle_prompt_creation/tot_enclave/fanout/munch   3/5 of fanout

The group counts come from the engine, which announces every parallel group of steps as it
starts with the number of steps in it (``on_group_start``), so they are right whatever order
concurrent steps finish in, also for groups that code builds as it goes (the rounds of a
scoring run).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from image_project.engine.context import Context, EngineEvent
from image_project.engine.recorder import DefaultStepRecorder
from image_project.record.events import ChatEvent, ImageEvent


def counted(n: int, noun: str) -> str:
    """``"1 judge"``, ``"3 judges"``: a count with its noun in the right number."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class ProgressRecorder(DefaultStepRecorder):
    def __init__(
        self,
        emit: Callable[[str], None],
        *,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(logger)
        self.emit = emit
        self.clock = clock
        self.started = clock()
        self.done: dict[str, int] = {}

    def on_step_end(self, ctx: Context, record: EngineEvent) -> None:
        super().on_step_end(ctx, record)
        if isinstance(record, ImageEvent):
            return  # the image phase says itself how its call ended
        innermost = ""
        for group in self.groups:
            if record.path.startswith(group + "/"):
                self.done[group] = self.done.get(group, 0) + 1
                if len(group) > len(innermost):
                    innermost = group
        suffix = ""
        if innermost:
            name = innermost.rsplit("/", 1)[-1]
            suffix = f"   {self.done[innermost]}/{self.groups[innermost]} of {name}"
        chat = record if isinstance(record, ChatEvent) else None
        retried = f"  (attempts: {chat.attempts})" if chat and chat.attempts > 1 else ""
        mark = "✓"
        if chat and chat.error is not None:
            mark = "!"
            retried += f"  (failed, recovered: {chat.error.type})"
        self.emit(f"[{self.clock() - self.started:6.1f}s] {mark} {record.path}{suffix}{retried}")

    def on_step_error(self, ctx: Context, path: str, step_name: str, exc: BaseException) -> None:
        super().on_step_error(ctx, path, step_name, exc)
        self.emit(f"[{self.clock() - self.started:6.1f}s] ✗ {path}: {type(exc).__name__}")
