"""The ``season`` injector: the season of the run's date in ``context.season.hemisphere``.

Meteorological seasons by month, as the original project: December to February winter,
March to May spring, June to August summer, September to November fall; the southern
hemisphere is six months on. It always applies (reason ``season_of_the_date``) with one line
naming the season and suggesting its light and atmosphere; it draws nothing at random.
"""

from __future__ import annotations

from datetime import date
from typing import Final, Literal

from image_project.config.context_section import Hemisphere, SeasonConfig
from image_project.context.base import Injection, InjectorInput

Season = Literal["winter", "spring", "summer", "fall"]

SEASON_CUES: Final[dict[Season, str]] = {
    "winter": "low sun, long blue shadows, cold clear air, early dusk",
    "spring": "fresh green, soft rain-washed light, blossom, lengthening days",
    "summer": "high sun, warm haze, deep shade, long golden evenings",
    "fall": "low golden light, turning leaves, morning mist, early dark",
}
_BY_MONTH: Final[tuple[Season, ...]] = (
    "winter",
    "winter",
    "spring",
    "spring",
    "spring",
    "summer",
    "summer",
    "summer",
    "fall",
    "fall",
    "fall",
    "winter",
)


def season_of(day: date, hemisphere: Hemisphere) -> Season:
    """The season ``day`` falls in, in ``hemisphere``."""
    month = day.month if hemisphere == "northern" else (day.month + 5) % 12 + 1
    return _BY_MONTH[month - 1]


class SeasonInjector:
    """The built-in ``season`` injector."""

    name = "season"

    def __init__(self, cfg: SeasonConfig) -> None:
        self.hemisphere: Hemisphere = cfg.hemisphere

    def inject(self, given: InjectorInput) -> Injection:
        season = season_of(given.today, self.hemisphere)
        return Injection(
            applied=True,
            reason="season_of_the_date",
            guidance=(
                f"It is {season} in the {self.hemisphere} hemisphere: let {season} light and "
                f"atmosphere colour the scene where it fits ({SEASON_CUES[season]}).",
            ),
            metadata={
                "season": season,
                "date_used": given.today.isoformat(),
                "hemisphere": self.hemisphere,
            },
        )
