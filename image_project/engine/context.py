"""Run state the engine reads and writes: :class:`Context`.

The step records it collects are the record's typed events
(:class:`~image_project.record.events.ChatEvent`, :class:`~image_project.record.events.ActionEvent`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from image_project.backends.base import Message
from image_project.record.events import ActionEvent, ChatEvent, ImageEvent

EngineEvent: TypeAlias = ChatEvent | ActionEvent | ImageEvent
"""What the engine records for a step."""


@dataclass
class Context:
    """What a pipeline run shares between its steps.

    ``messages`` is the root conversation (changed only by the merges of the root scope's
    children), ``steps`` the step events in declared (pre-order) order; the root scope's
    children (``roots_run`` counts them) record after each other.
    Applications subclass it to carry their own run fields; prompt functions and actions
    receive it.
    """

    messages: tuple[Message, ...] = ()
    steps: list[EngineEvent] = field(default_factory=list)
    roots_run: int = 0

    @classmethod
    def with_system(cls, system_prompt: str) -> Context:
        return cls(messages=(Message("system", system_prompt),))
