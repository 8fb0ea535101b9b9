"""The ``context`` section of the configuration: season and holiday injectors,
their strict keys and bounds, and user plugins named by module. Read by
:mod:`image_project.context`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from datetime import date
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    model_validator,
)

from image_project.config.fields import (
    StrictBool,
    _Float,
    _Int,
    _Invalid,
    _KeyedInvalid,
    _Section,
    _show,
)

# --------------------------------------------------------------------------- context

HOLIDAY_KEYS: tuple[str, ...] = (
    "new_year",
    "valentines_day",
    "halloween",
    "thanksgiving",
    "christmas",
)
"""The holidays the ``holiday`` injector knows (the original project's five); their dates come
from the ``holidays`` package (``image_project.context.holiday``)."""
HolidayKey = Literal["new_year", "valentines_day", "halloween", "thanksgiving", "christmas"]
BUILTIN_INJECTORS: tuple[str, ...] = ("season", "holiday")
"""The built-in context injectors, in their default order."""
InjectorName = Literal["season", "holiday"]
InjectionLocation = Literal["system", "prompt", "both"]
Hemisphere = Literal["northern", "southern"]
CONTEXT_DATE_MIN, CONTEXT_DATE_MAX = date(1900, 1, 1), date(2199, 12, 31)
"""The range of ``context.date`` (the holiday calendars are computed for its year and the
next)."""
_HEMISPHERES = {
    "north": "northern",
    "northern": "northern",
    "south": "southern",
    "southern": "southern",
}
_DATE_MUST = (
    f"a date YYYY-MM-DD from {CONTEXT_DATE_MIN} to {CONTEXT_DATE_MAX}, or null for the day of "
    "the run"
)
_COUNTRY = re.compile(r"[A-Za-z]{2,3}")
_SUBDIVISION = re.compile(r"[A-Za-z0-9-]{1,10}")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_MAX_PLUGINS = 32


def _parse_hemisphere(value: object) -> object:
    word = value.strip().lower() if isinstance(value, str) else None
    if word not in _HEMISPHERES:
        raise _Invalid("one of 'north', 'northern', 'south', 'southern'")
    return _HEMISPHERES[word]


def _parse_context_date(value: object) -> object:
    """A calendar date: YAML's own date (``2026-10-25`` unquoted) or the string
    ``"2026-10-25"``; never a datetime, a number or another spelling."""
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
        try:
            value = date.fromisoformat(value.strip())
        except ValueError as exc:
            raise _Invalid(_DATE_MUST, note=f"no such day: {exc}") from None
    if type(value) is not date or not CONTEXT_DATE_MIN <= value <= CONTEXT_DATE_MAX:
        raise _Invalid(_DATE_MUST)
    return value


def _check_country(value: str) -> str:
    if not _COUNTRY.fullmatch(value):
        raise _Invalid("a country code of the holidays package, like 'US', 'GB', 'CA' or 'DE'")
    return value.upper()


def _check_subdivision(value: str | None) -> str | None:
    if value is not None and not _SUBDIVISION.fullmatch(value):
        raise _Invalid("a subdivision code of the holidays package, like 'CA' or 'ON', or null")
    return value


def _names_from(allowed: tuple[str, ...], what: str) -> Any:
    """A validator of a list of distinct names out of ``allowed`` (``what`` names them)."""
    must = f"a list of distinct {what}, each one of " + ", ".join(repr(a) for a in allowed)

    def check(value: object) -> object:
        if not isinstance(value, (list, tuple)):
            raise _Invalid(must)
        for item in value:
            if item not in allowed:
                close = difflib.get_close_matches(str(item), allowed, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise _Invalid(must, note=f"{_show(item)} is not one{hint}")
        return _unique(value, must)

    return BeforeValidator(check)


def _unique(value: object, must: str) -> object:
    if isinstance(value, (list, tuple)):
        seen: set[object] = set()
        for item in value:
            if isinstance(item, str) and item in seen:
                raise _Invalid(must, note=f"{item!r} is listed twice")
            if isinstance(item, str):
                seen.add(item)
    return value


_MODULES_MUST = f"a list of at most {_MAX_PLUGINS} distinct module names like 'my_pkg.my_injector'"


def _check_modules(value: object) -> object:
    if not isinstance(value, (list, tuple)) or len(value) > _MAX_PLUGINS:
        raise _Invalid(_MODULES_MUST)
    for item in value:
        if not isinstance(item, str) or not _MODULE.fullmatch(item):
            raise _Invalid(_MODULES_MUST, note=f"{_show(item)} is not a module name")
    return _unique(value, _MODULES_MUST)


def _check_settings(value: object) -> object:
    """``context.plugin_settings``: plugin injector name -> its settings (a mapping each);
    that every name is a plugin's is checked with the plugins (``load_injectors``)."""
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise _Invalid("a mapping of plugin injector names to mappings of their settings")
    return value


ContextDate = Annotated[date | None, BeforeValidator(_parse_context_date)]
"""``context.date``: the day the injectors take as today (None = the run's local date)."""


class SeasonConfig(_Section):
    """``context.season``: which hemisphere's seasons the date falls in."""

    hemisphere: Annotated[Hemisphere, BeforeValidator(_parse_hemisphere)] = "northern"
    """Whose seasons the date falls in (``south`` = six months on); ``north`` and ``south`` are
    read as ``northern`` and ``southern``."""


class HolidayConfig(_Section):
    """``context.holiday``: the nearest of the ``include`` holidays within ``lookahead_days``
    applies with probability ``base + (max - base) * (lookahead - days_until) / lookahead``.
    ``country`` (and ``subdivision``) pick the calendar of the ``holidays`` package that dates
    them; whether the package knows them is checked when context is enabled, before any call
    (``image_project.context.load_injectors``)."""

    country: Annotated[str, AfterValidator(_check_country)] = "US"
    """The calendar of the ``holidays`` package that dates the holidays (ISO 3166-1 code)."""
    subdivision: Annotated[str | None, AfterValidator(_check_subdivision)] = None
    """Optionally a subdivision of that calendar (a US state, a Canadian province)."""
    include: Annotated[tuple[HolidayKey, ...], _names_from(HOLIDAY_KEYS, "holidays")] = (
        "new_year",
        "valentines_day",
        "halloween",
        "thanksgiving",
        "christmas",
    )
    """The holidays considered; the culture days ``valentines_day`` and ``halloween`` count
    everywhere, on their fixed dates."""
    lookahead_days: _Int = Field(default=14, ge=1, le=366)
    """The nearest included holiday at most this many days ahead may apply."""
    base_probability: _Float = Field(default=0.15, ge=0.0, le=1.0)
    """The holiday's probability ``lookahead_days`` ahead, growing linearly to
    ``max_probability`` on the day."""
    max_probability: _Float = Field(default=0.55, ge=0.0, le=1.0)
    """The holiday's probability on the day; at least ``base_probability``."""

    @model_validator(mode="after")
    def _check_probabilities(self) -> Self:
        if self.max_probability < self.base_probability:
            raise _KeyedInvalid(
                "max_probability",
                f"got {_show(self.max_probability)}, must be >= base_probability "
                f"({_show(self.base_probability)})",
            )
        return self


class ContextConfig(_Section):
    """Context injectors (``image_project.context``; docs/context.md): lines of guidance
    from the run's date (the season, a nearby holiday) and from plugins, put where
    ``injection_location`` says. Off = the run is exactly as without this section."""

    enabled: StrictBool = False
    """Context injectors: guidance from the run's date and plugins put into the prompts; off =
    the run is exactly as without this section."""
    date: ContextDate = None
    """The day taken as today; null = the run's local date (``--date`` sets it)."""
    injection_location: InjectionLocation = "prompt"
    """``prompt``: the end of the first stage's prompt (with scoring, every idea and variant
    generator's); ``system``: appended to the system prompt of every generating call;
    ``both``."""
    injectors: Annotated[
        tuple[InjectorName, ...], _names_from(BUILTIN_INJECTORS, "built-in injectors")
    ] = ("season", "holiday")
    """The built-in injectors to run, in order."""
    plugins: Annotated[tuple[str, ...], BeforeValidator(_check_modules)] = ()
    """Your own injectors: importable module names, each defining ``injector``; run after the
    built-ins, imported and checked before any call."""
    plugin_settings: Annotated[dict[str, dict[str, Any]], BeforeValidator(_check_settings)] = Field(
        default_factory=dict
    )
    """Settings handed to a plugin injector, by its name."""
    season: SeasonConfig = Field(default_factory=SeasonConfig)
    holiday: HolidayConfig = Field(default_factory=HolidayConfig)
