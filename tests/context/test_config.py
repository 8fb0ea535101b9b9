"""``context.*`` is strict like every key: unknown keys, ranges, hemisphere names, dates,
injector and holiday names fail at load (exit 2 from the CLI) naming the full key; the
defaults are the original project's."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from image_project.cli import command as cli
from image_project.config.loading import load_config
from image_project.errors import ConfigError
from tests.test_app import REPO


def load(*overrides: str) -> object:
    return load_config(root=REPO, env={}, overrides=list(overrides))


def test_the_defaults_are_off_and_the_original_projects() -> None:
    context = load_config(root=REPO, env={}).context
    assert context.enabled is False and context.date is None
    assert context.injection_location == "prompt"
    assert context.injectors == ("season", "holiday") and context.plugins == ()
    assert context.season.hemisphere == "northern"
    h = context.holiday
    assert (h.country, h.lookahead_days, h.base_probability, h.max_probability) == (
        "US",
        14,
        0.15,
        0.55,
    )
    assert h.include == ("new_year", "valentines_day", "halloween", "thanksgiving", "christmas")


@pytest.mark.parametrize(
    ("word", "hemisphere"),
    [
        ("north", "northern"),
        ("Northern", "northern"),
        ("south", "southern"),
        ("southern", "southern"),
    ],
)
def test_hemisphere_names(word: str, hemisphere: str) -> None:
    cfg = load_config(root=REPO, env={}, overrides=[f"context.season.hemisphere={word}"])
    assert cfg.context.season.hemisphere == hemisphere


def test_the_date_is_a_real_day_from_yaml_or_a_string() -> None:
    for text in ("2026-10-25", '"2026-10-25"'):
        cfg = load_config(root=REPO, env={}, overrides=[f"context.date={text}"])
        assert cfg.context.date == date(2026, 10, 25)


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("context.colour=red", "context.colour", "unknown key"),
        ("context.season.hemisphere=east", "context.season.hemisphere", "'north', 'northern'"),
        ("context.season.equator=true", "context.season.equator", "unknown key"),
        ("context.holiday.lookahead_days=0", "context.holiday.lookahead_days", "1..366"),
        ("context.holiday.lookahead_days=7.0", "context.holiday.lookahead_days", "not an int"),
        ("context.holiday.base_probability=1.5", "context.holiday.base_probability", "[0, 1]"),
        ("context.holiday.max_probability=-0.1", "context.holiday.max_probability", "[0, 1]"),
        ("context.holiday.max_probability=0.1", "context.holiday.max_probability", ">= base"),
        ("context.holiday.include=[easter]", "context.holiday.include", "'easter' is not one"),
        ("context.holiday.country=U-S", "context.holiday.country", "country code"),
        ("context.injectors=[calendar]", "context.injectors", "'calendar' is not one"),
        ("context.injectors=[season, season]", "context.injectors", "listed twice"),
        ("context.injection_location=user", "context.injection_location", "'system'"),
        ("context.enabled=maybe", "context.enabled", "true or false"),
        ('context.date="2026-02-30"', "context.date", "no such day"),
        ('context.date="25/10/2026"', "context.date", "YYYY-MM-DD"),
        ("context.date=1800-01-01", "context.date", "1900-01-01"),
        ("context.date=20261025", "context.date", "YYYY-MM-DD"),
        ('context.plugins=["my pkg"]', "context.plugins", "not a module name"),
        ("context.plugin_settings={moon: 3}", "context.plugin_settings", "mappings"),
    ],
)
def test_a_bad_context_key_is_a_config_error_naming_it(override: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(override)
    assert info.value.key == key and words in info.value.message


def test_the_cli_exits_2_naming_the_key_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    for args, expected in (
        (["--set", "context.season.hemisphere=east"], "context.season.hemisphere: got 'east'"),
        (["--set", "context.enabled=true", "--set", "context.holiday.country=XX"], "country"),
    ):
        code = cli.main(["--offline", "--set", f"image.log_path={logs}", *args], env={}, root=REPO)
        assert code == cli.EXIT_CONFIG and expected in capsys.readouterr().err
    assert not logs.exists()
    with pytest.raises(SystemExit) as bad_date:
        cli.main(["--offline", "--date", "2026-13-01"], env={}, root=REPO)
    assert bad_date.value.code == 2
    assert "argument --date: got '2026-13-01', must be a date YYYY-MM-DD" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("2026-02-30", "day is out of range for month: February 2026 has 28 days"),
        ("2028-02-30", "February 2028 has 29 days"),
        ("2026-04-31", "April 2026 has 30 days"),
        ("2026-13-01", "month must be in 1..12"),
        ("2026-2-3", "(a 4-digit year, 2-digit month and day)"),
    ],
)
def test_a_bad_date_says_why(given: str, reason: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as bad_date:
        cli.main(["--offline", "--date", given], env={}, root=REPO)
    assert bad_date.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --date: got {given!r}, must be a date YYYY-MM-DD" in err
    assert reason in err


def test_date_without_context_enabled_is_an_error_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    args = ["--offline", "--date", "2026-10-25", "--set", f"image.log_path={logs}"]
    assert cli.main(args, env={}, root=REPO) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert "configuration error: context.enabled: --date 2026-10-25" in err
    assert "--set context.enabled=true" in err
    assert not logs.exists()
