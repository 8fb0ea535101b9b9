"""What an injector is: the :class:`Injector` protocol, what it is given
(:class:`InjectorInput`) and what it answers (:class:`Injection`); how the lines of every
injector become one guidance block (:func:`render_guidance`).

A plugin is a module that defines ``injector``, any object with a ``name`` (lower-case
letters, digits and ``_``) and an ``inject(given) -> Injection`` method (docs/context.md)::

    # my_pkg/moon.py
    from image_project import Injection, InjectorInput

    class Moon:
        name = "moon"

        def inject(self, given: InjectorInput) -> Injection:
            if given.today.day != 15:
                return Injection(applied=False, reason="not_full_moon")
            return Injection(applied=True, reason="full_moon", guidance=("A full moon rises.",))

    injector = Moon()

Randomness: ``given.rng`` is the injector's own ``random.Random``, derived from the run seed
and the injector's name (:func:`image_project.seeding.rng_for` ``(seed, "context", name)``),
so adding or removing an injector never changes what another one draws. An injector draws
nothing else at random.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol, runtime_checkable

GUIDANCE_HEADER = "Context guidance (optional):"
"""The first line of the guidance block; every injector line follows as a ``- `` bullet."""

INJECTOR_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
"""What an injector's name must look like (it names its record and its random stream)."""


@dataclass(frozen=True)
class InjectorInput:
    """What an injector is given: the day the run takes as ``today``, its own ``rng``, the
    person's profile as prompts show it (``preferences``) and their ``dislikes`` (the
    Dislikes and Hates items), and its ``settings`` (a plugin's
    ``context.plugin_settings.<name>``; empty for the built-ins, which have their own
    sections)."""

    today: date
    rng: random.Random
    preferences: str
    dislikes: tuple[str, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Injection:
    """An injector's answer. ``applied`` says whether it adds guidance and ``reason`` why (a
    short snake_case word, recorded); ``guidance`` its lines (only when applied; a leading
    ``- `` is dropped); ``probability`` and ``roll`` the chance it drew, if it drew one;
    ``metadata`` its own facts (JSON values), recorded with the decision."""

    applied: bool
    reason: str
    guidance: tuple[str, ...] = ()
    probability: float | None = None
    roll: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Injector(Protocol):
    """A context injector: a ``name`` and one synchronous, side-effect-free method."""

    @property
    def name(self) -> str: ...

    def inject(self, given: InjectorInput) -> Injection: ...


def render_guidance(lines: Sequence[str]) -> str:
    """The guidance block: :data:`GUIDANCE_HEADER` and one ``- `` bullet per line, in order
    (a line's own leading ``- `` dropped); ``""`` when there is no line."""
    bullets = [line.strip().removeprefix("- ").strip() for line in lines]
    bullets = [b for b in bullets if b]
    if not bullets:
        return ""
    return "\n".join([GUIDANCE_HEADER, *(f"- {b}" for b in bullets)])
