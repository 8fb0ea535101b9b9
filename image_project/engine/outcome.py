"""What running a node hands back: :class:`NodeOutcome`, and the :data:`Conversation` a node
runs on.

Below both :mod:`image_project.engine.runner` (which makes outcomes) and
:mod:`image_project.engine.scope` (which hands their values back to code), so that neither
of those imports the other for it. Both names are also importable from the runner, where
they were first defined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from image_project.backends.base import Message
from image_project.engine.context import EngineEvent

__all__ = ["Conversation", "NodeOutcome"]

Conversation: TypeAlias = tuple[Message, ...]


@dataclass(frozen=True)
class NodeOutcome:
    """What a node produced: the messages it added to its working copy, its last assistant
    response (None when it produced none) and, for a step, its value (a chat step's parsed
    answer or ``on_failure`` value, an action's return value) and its transcript event."""

    produced: Conversation
    last_response: str | None
    value: object = None
    event: EngineEvent | None = None
