"""The context injectors' record (``RunRecord.context``): the date the run took as today,
where the guidance went, the guidance itself, and what every injector decided, applied or
not, with why and, for a chance-based one, the probability and the roll.

With context off the record is ``{"enabled": false}``.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field, JsonValue

from image_project.record.base import RecordModel


class InjectorRecord(RecordModel):
    """One injector's decision. ``reason`` says why in a word (``season_of_the_date``,
    ``roll_below_probability``, ``roll_not_below_probability``, ``no_holiday_in_window``, or
    a plugin's own); ``probability`` and ``roll`` are set when the injector drew a chance
    (``applied`` exactly when ``roll < probability`` for the holiday); ``guidance`` holds its
    lines (empty unless applied); ``metadata`` its own facts (the holiday's: the original
    project's keys, ``holiday_key``, ``holiday_date``, ``days_until``, ...). ``source`` is
    ``builtin`` or ``plugin`` (then ``module`` names the plugin's module)."""

    name: str
    source: Literal["builtin", "plugin"]
    module: str | None = None
    applied: bool
    reason: str
    probability: float | None = None
    roll: float | None = None
    guidance: tuple[str, ...] = ()
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


class ContextRecord(RecordModel):
    """The context of a run with ``context.enabled``: ``date_used`` (ISO ``YYYY-MM-DD``) came
    from ``context.date`` / ``--date`` (``date_source: fixed``) or the run's local date
    (``today``); ``guidance`` is the rendered block (``""`` when no injector applied) and
    ``injection_location`` where it went: ``system`` (appended to the generating calls'
    system prompts), ``prompt`` (embedded in the first stage's prompt), ``both``. Judges never
    get it. ``injectors`` in the order they ran. ``system_prompt`` is the run's conversation
    system prompt when the guidance was appended to it (``system`` or ``both``; the transcript
    does not otherwise hold it), else None."""

    enabled: Literal[True] = True
    date_used: str
    date_source: Literal["fixed", "today"]
    injection_location: Literal["system", "prompt", "both"]
    guidance: str
    injectors: tuple[InjectorRecord, ...] = ()
    system_prompt: str | None = None

    @property
    def applied(self) -> tuple[InjectorRecord, ...]:
        return tuple(i for i in self.injectors if i.applied)


class ContextOff(RecordModel):
    """The context record of a run with context disabled."""

    enabled: Literal[False] = False


ContextSection: TypeAlias = Annotated[ContextRecord | ContextOff, Field(discriminator="enabled")]
"""The transcript's ``context``: the record, or ``{"enabled": false}``."""
