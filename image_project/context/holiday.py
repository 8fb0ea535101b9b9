"""The ``holiday`` injector: the nearest holiday within ``lookahead_days``, applied by chance.

Which holidays, and their dates (docs/context.md):

* The candidates are ``context.holiday.include``, by default the original project's five:
  New Year's Day, Valentine's Day, Halloween, Thanksgiving and Christmas.
* Their dates come from the calendar of ``context.holiday.country`` (and ``subdivision``) in
  the ``holidays`` package: its public holidays and, where the country has these categories,
  its optional holidays and unofficial observances, by their English names, without
  "observed" substitute days. So a
  country's own dates hold (Canada's Thanksgiving is in October, in the provinces that keep
  it: ``country: CA, subdivision: ON``) and a holiday its calendar does not keep is not a
  candidate there (no Thanksgiving for ``GB``).
* Valentine's Day and Halloween are *culture days*: kept by custom, not law, so few calendars
  list them (the package lists them for the US, as unofficial observances). Where the
  country's calendar lists one, its date is used; where it does not, the day still counts,
  on its fixed date (14 February, 31 October). Leave them out of ``include`` to drop them.

The nearest candidate on or after the run's date, at most ``lookahead_days`` ahead (ties in
``include`` order), applies with probability ``p = base + (max - base) * (lookahead -
days_until) / lookahead`` when the injector's roll (``rng.random()``, drawn only when a
holiday is in the window) is below ``p``. Halloween is softened to subtle nods when the
person's dislikes mention horror. Nothing in the window: ``applied: false, reason:
no_holiday_in_window``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any, Final

from image_project.config.context_section import HolidayConfig, HolidayKey
from image_project.context.base import Injection, InjectorInput
from image_project.errors import ConfigError

if TYPE_CHECKING:
    from holidays import HolidayBase

HOLIDAY_NAMES: Final[dict[HolidayKey, str]] = {
    "new_year": "New Year's Day",
    "valentines_day": "Valentine's Day",
    "halloween": "Halloween",
    "thanksgiving": "Thanksgiving Day",
    "christmas": "Christmas Day",
}
"""Each holiday's English name in the ``holidays`` calendars (how it is found there)."""

CULTURE_DAYS: Final[dict[HolidayKey, tuple[int, int]]] = {
    "valentines_day": (2, 14),
    "halloween": (10, 31),
}
"""(month, day) of the culture days, for a country whose calendar does not list them."""

_CATEGORIES: Final = ("public", "optional", "unofficial")


def holiday_probability(cfg: HolidayConfig, days_until: int) -> float:
    """``base + (max - base) * (lookahead - days_until) / lookahead``: ``max`` on the day,
    ``base`` at the edge of the window."""
    lookahead = cfg.lookahead_days
    span = cfg.max_probability - cfg.base_probability
    return cfg.base_probability + span * (lookahead - days_until) / lookahead


def _horror_disliked(dislikes: Iterable[str]) -> bool:
    return any("horror" in item.lower() for item in dislikes)


def _when(days_until: int) -> str:
    if days_until == 0:
        return "today"
    if days_until == 1:
        return "tomorrow"
    return f"in {days_until} days"


class HolidayInjector:
    """The built-in ``holiday`` injector (see the module docstring). Construct it with
    :meth:`checked`, which makes sure the ``holidays`` package knows the country."""

    name = "holiday"

    def __init__(self, cfg: HolidayConfig) -> None:
        self.cfg = cfg

    @classmethod
    def checked(cls, cfg: HolidayConfig) -> HolidayInjector:
        """The injector, once the ``holidays`` package has a calendar for the country and
        subdivision; else :class:`ConfigError` naming the key."""
        import holidays

        try:
            holidays.country_holidays(cfg.country)
        except NotImplementedError:
            raise ConfigError(
                "context.holiday.country",
                f"got {cfg.country!r}, must be a country code the holidays package has a "
                "calendar for (ISO 3166-1, like 'US', 'GB', 'CA', 'DE')",
            ) from None
        if cfg.subdivision is not None:
            try:
                holidays.country_holidays(cfg.country, subdiv=cfg.subdivision)
            except NotImplementedError:
                raise ConfigError(
                    "context.holiday.subdivision",
                    f"got {cfg.subdivision!r}, must be a subdivision of {cfg.country} the "
                    "holidays package knows, or null",
                ) from None
        return cls(cfg)

    def _calendar(self, years: Iterable[int]) -> HolidayBase:
        import holidays

        plain = holidays.country_holidays(self.cfg.country)
        categories = [c for c in _CATEGORIES if c in plain.supported_categories]
        languages = getattr(plain, "supported_languages", ())
        return holidays.country_holidays(
            self.cfg.country,
            subdiv=self.cfg.subdivision,
            years=list(years),
            observed=False,
            categories=categories,
            language="en_US" if "en_US" in languages else None,
        )

    def candidates(self, today: date) -> list[tuple[date, HolidayKey]]:
        """Every ``include`` holiday from ``today`` to ``today + lookahead_days``, by date
        (ties in ``include`` order)."""
        end = today + timedelta(days=self.cfg.lookahead_days)
        years = range(today.year, end.year + 1)
        calendar = self._calendar(years)
        listed: dict[HolidayKey, list[date]] = {key: [] for key in self.cfg.include}
        for day, names in sorted(calendar.items()):
            for part in str(names).split("; "):
                for key in self.cfg.include:
                    if part == HOLIDAY_NAMES[key]:
                        listed[key].append(day)
        for key, (month, mday) in CULTURE_DAYS.items():
            if key in listed and not listed[key]:
                listed[key] = [date(year, month, mday) for year in years]
        order = {key: i for i, key in enumerate(self.cfg.include)}
        found = [(day, key) for key, days in listed.items() for day in days if today <= day <= end]
        return sorted(set(found), key=lambda item: (item[0], order[item[1]]))

    def inject(self, given: InjectorInput) -> Injection:
        cfg, today = self.cfg, given.today
        base: dict[str, Any] = {
            "date_used": today.isoformat(),
            "country": cfg.country,
            "subdivision": cfg.subdivision,
            "lookahead_days": cfg.lookahead_days,
            "base_probability": cfg.base_probability,
            "max_probability": cfg.max_probability,
        }
        found = self.candidates(today)
        if not found:
            return Injection(
                applied=False,
                reason="no_holiday_in_window",
                metadata={"applied": False, "reason": "no_holiday_in_window", **base},
            )
        day, key = found[0]
        days_until = (day - today).days
        probability = holiday_probability(cfg, days_until)
        roll = given.rng.random()
        applied = roll < probability
        softened = key == "halloween" and _horror_disliked(given.dislikes)
        reason = "roll_below_probability" if applied else "roll_not_below_probability"
        name = HOLIDAY_NAMES[key]
        return Injection(
            applied=applied,
            reason=reason,
            guidance=(self._line(name, day, days_until, softened),) if applied else (),
            probability=probability,
            roll=roll,
            metadata={
                "applied": applied,
                "reason": reason,
                **base,
                "holiday": name,
                "holiday_key": key,
                "holiday_date": day.isoformat(),
                "days_until": days_until,
                "computed_probability": probability,
                "roll": roll,
                "softened": softened,
            },
        )

    @staticmethod
    def _line(name: str, day: date, days_until: int, softened: bool) -> str:
        when = f"{name} is {_when(days_until)} ({day:%A} {day.day} {day:%B})"
        if softened:
            return (
                f"{when}: you MUST adopt it as an additional theme, but only through subtle "
                "nods (an autumn dusk, a warm lantern glow, a playful hint of costume), never "
                "anything frightening, gory or grotesque."
            )
        return (
            f"{when}: evoke it subtly; you MUST adopt it as an additional theme, woven into "
            "the concepts rather than replacing them."
        )
