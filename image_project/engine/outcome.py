"""What running a step hands back: a chat step's :class:`Answer`, an image step's
:class:`Drawn`, where a step runs (:class:`Place`), and the :data:`Conversation` it runs on.

Below both :mod:`image_project.engine.runner` (which runs steps) and
:mod:`image_project.engine.scope` (which hands their values back to code), so that neither
imports the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeAlias, TypeVar

from image_project.backends.base import Message
from image_project.record.events import ChatEvent, ImageEvent

T = TypeVar("T")

Conversation: TypeAlias = tuple[Message, ...]


@dataclass(frozen=True)
class Place:
    """Where a step runs: its name, its path and its declared position (the order its record
    sorts by)."""

    name: str
    path: str
    order: tuple[int, ...]


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A chat step's value (its parsed answer, or its ``on_failure`` value) and the event the
    transcript holds for it (path, answers received, error)."""

    value: T
    event: ChatEvent


@dataclass(frozen=True)
class Drawn(Generic[T]):
    """An image step's value (its checked reply) and the event the transcript holds for it."""

    value: T
    event: ImageEvent
