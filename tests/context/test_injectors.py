"""The built-in injectors: the season of a date in either hemisphere; the holiday's window,
probability, roll, dates from the ``holidays`` calendars (country calendars and the culture
days), the Halloween softening, and its record when nothing is in the window; each injector's
own random stream; the guidance block."""

from __future__ import annotations

import random
from datetime import date

import pytest

from image_project.config.context_section import ContextConfig, HolidayConfig, SeasonConfig
from image_project.context.base import GUIDANCE_HEADER, Injection, InjectorInput, render_guidance
from image_project.context.holiday import HolidayInjector, holiday_probability
from image_project.context.inject import run_injectors
from image_project.context.loading import LoadedInjector, load_injectors
from image_project.context.season import SeasonInjector, season_of
from image_project.seeding import rng_for

HORROR = ("Gore, body horror or anything gruesome",)


def given(today: date, *, dislikes: tuple[str, ...] = (), roll: float = 0.0) -> InjectorInput:
    """An input whose rng's first draw is ``roll``."""

    class Fixed(random.Random):
        def random(self) -> float:
            return roll

    return InjectorInput(today=today, rng=Fixed(), preferences="Likes:\n- x", dislikes=dislikes)


def holiday(**settings: object) -> HolidayInjector:
    return HolidayInjector.checked(HolidayConfig.model_validate(settings))


@pytest.mark.parametrize(
    ("day", "north", "south"),
    [
        (date(2026, 1, 10), "winter", "summer"),
        (date(2026, 3, 1), "spring", "fall"),
        (date(2026, 5, 31), "spring", "fall"),
        (date(2026, 6, 1), "summer", "winter"),
        (date(2026, 10, 25), "fall", "spring"),
        (date(2026, 12, 1), "winter", "summer"),
    ],
)
def test_the_season_of_a_date_in_each_hemisphere(day: date, north: str, south: str) -> None:
    assert season_of(day, "northern") == north
    assert season_of(day, "southern") == south
    answer = SeasonInjector(SeasonConfig.model_validate({"hemisphere": "south"})).inject(given(day))
    assert answer.applied and answer.reason == "season_of_the_date"
    assert answer.metadata == {
        "season": south,
        "date_used": day.isoformat(),
        "hemisphere": "southern",
    }
    assert south in answer.guidance[0] and answer.probability is None and answer.roll is None


@pytest.mark.parametrize(("days_until", "expected"), [(0, 0.55), (7, 0.35), (14, 0.15)])
def test_the_probability_rises_from_base_to_max_as_the_holiday_nears(
    days_until: int, expected: float
) -> None:
    assert holiday_probability(HolidayConfig(), days_until) == pytest.approx(expected)


def test_the_nearest_holiday_in_the_window_applies_when_the_roll_is_below_p() -> None:
    injector = holiday()
    p = 0.15 + 0.4 * (14 - 6) / 14
    applied = injector.inject(given(date(2026, 10, 25), roll=p - 1e-9))
    assert applied.applied and applied.reason == "roll_below_probability"
    assert applied.probability == pytest.approx(p) and applied.roll == pytest.approx(p - 1e-9)
    meta = applied.metadata
    assert meta["holiday"] == "Halloween" and meta["holiday_key"] == "halloween"
    assert (meta["holiday_date"], meta["days_until"], meta["lookahead_days"]) == (
        "2026-10-31",
        6,
        14,
    )
    assert meta["computed_probability"] == applied.probability and meta["roll"] == applied.roll
    for key in ("applied", "date_used", "base_probability", "max_probability"):
        assert key in meta
    assert "Halloween is in 6 days" in applied.guidance[0] and "MUST" in applied.guidance[0]

    missed = injector.inject(given(date(2026, 10, 25), roll=p))
    assert not missed.applied and missed.reason == "roll_not_below_probability"
    assert missed.guidance == () and missed.probability == pytest.approx(p)


def test_halloween_is_softened_to_subtle_nods_when_the_dislikes_mention_horror() -> None:
    softened = holiday().inject(given(date(2026, 10, 30), dislikes=HORROR))
    plain = holiday().inject(given(date(2026, 10, 30), dislikes=("Clowns",)))
    assert softened.metadata["softened"] is True and plain.metadata["softened"] is False
    assert "subtle nods" in softened.guidance[0] and "subtle nods" not in plain.guidance[0]
    assert "Halloween is tomorrow" in softened.guidance[0]
    christmas = holiday().inject(given(date(2026, 12, 20), dislikes=HORROR))
    assert christmas.metadata["holiday"] == "Christmas Day" and not christmas.metadata["softened"]


def test_no_holiday_in_the_window_is_recorded_with_its_reason_and_no_roll() -> None:
    answer = holiday().inject(given(date(2026, 3, 1)))
    assert not answer.applied and answer.reason == "no_holiday_in_window"
    assert answer.probability is None and answer.roll is None and answer.guidance == ()
    assert answer.metadata["applied"] is False
    assert answer.metadata["reason"] == "no_holiday_in_window"
    assert answer.metadata["date_used"] == "2026-03-01"


def test_the_window_is_inclusive_and_crosses_the_new_year() -> None:
    assert holiday().inject(given(date(2026, 10, 17))).metadata["holiday_key"] == "halloween"
    assert holiday().inject(given(date(2026, 10, 16))).reason == "no_holiday_in_window"
    after_christmas = holiday().inject(given(date(2026, 12, 26)))
    assert after_christmas.metadata["holiday_date"] == "2027-01-01"
    on_the_day = holiday().inject(given(date(2026, 12, 25)))
    assert on_the_day.probability == pytest.approx(0.55) and "today" in on_the_day.guidance[0]


def test_dates_come_from_the_country_calendar_and_culture_days_count_everywhere() -> None:
    def keys(injector: HolidayInjector, year: int = 2026) -> list[tuple[str, str]]:
        return [(d.isoformat(), k) for d, k in injector.candidates(date(year, 1, 2))]

    wide = {"lookahead_days": 366}
    us = keys(holiday(**wide))
    assert ("2026-11-26", "thanksgiving") in us  # the fourth Thursday of November
    assert ("2026-02-14", "valentines_day") in us and ("2026-10-31", "halloween") in us
    gb = keys(holiday(country="GB", **wide))
    assert not any(k == "thanksgiving" for _, k in gb)  # not in the British calendar
    assert ("2026-10-31", "halloween") in gb and ("2026-12-25", "christmas") in gb
    ontario = keys(holiday(country="CA", subdivision="ON", **wide))
    assert ("2026-10-12", "thanksgiving") in ontario  # Canada's, in October
    only = keys(holiday(include=["christmas"], **wide))
    assert only == [("2026-12-25", "christmas")]
    assert keys(holiday(**wide), 2027)[0] == ("2027-02-14", "valentines_day")


def test_an_unknown_country_or_subdivision_is_a_config_error_naming_the_key() -> None:
    from image_project.errors import ConfigError

    with pytest.raises(ConfigError) as bad_country:
        holiday(country="XX")
    assert bad_country.value.key == "context.holiday.country"
    with pytest.raises(ConfigError) as bad_subdivision:
        holiday(subdivision="ZZ")
    assert bad_subdivision.value.key == "context.holiday.subdivision"


class _Draws:
    """A plugin-like injector that records its first draw."""

    name = "draws"

    def inject(self, given: InjectorInput) -> Injection:
        return Injection(applied=False, reason="just_drawing", roll=given.rng.random())


def test_each_injector_draws_from_its_own_stream_so_adding_one_shifts_no_other() -> None:
    cfg = ContextConfig(enabled=True)

    def holiday_roll(extra: tuple[LoadedInjector, ...], order: str) -> float | None:
        loaded = load_injectors(cfg)
        injectors = (*extra, *loaded) if order == "first" else (*loaded, *extra)
        record = run_injectors(
            injectors,
            run_seed=1,
            today=date(2026, 10, 25),
            date_source="fixed",
            location="prompt",
            preferences="",
            dislikes=(),
        )
        return next(i.roll for i in record.injectors if i.name == "holiday")

    alone = holiday_roll((), "last")
    assert alone == rng_for(1, "context", "holiday").random()
    extra = (LoadedInjector(_Draws(), "plugin", "tests.draws"),)
    assert holiday_roll(extra, "first") == holiday_roll(extra, "last") == alone


def test_the_guidance_block_is_the_header_and_one_bullet_per_line() -> None:
    assert render_guidance([]) == ""
    assert render_guidance(["- a", "b ", "  "]) == f"{GUIDANCE_HEADER}\n- a\n- b"
