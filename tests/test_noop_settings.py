"""A setting a config file sets while the setting that opens it is closed would do nothing,
and is an error at load naming both keys (:mod:`image_project.config.dependencies`): every
such dependency is a row of :data:`ROWS`, and the checks at the end fail when a gated
section gains a key, or the schema a section with an ``enabled`` switch, that no row
covers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from image_project.cli.command import EXIT_CONFIG, main
from image_project.config.dependencies import GATES, READ_WHEN_CLOSED
from image_project.config.fields import _Section
from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from image_project.errors import ConfigError

SCORING = "prompt.scoring.enabled"
NOVELTY = "prompt.scoring.novelty.enabled"
WINDOW = "prompt.scoring.novelty.window"
EVOLUTION = "prompt.scoring.evolution.enabled"
SELECTOR = "prompt.scoring.evolution.selector"
CONTEXT = "context.enabled"
INJECTORS = "context.injectors"
UPSCALE = "upscale.enabled"


@dataclass(frozen=True)
class Row:
    """A file writing ``file`` (dotted keys), with ``sets`` as ``--set``s: ``key`` does
    nothing while ``gates`` are closed; ``opens`` (default: each gate ``=true``) make it
    load."""

    key: str
    file: dict[str, Any]
    gates: tuple[str, ...]
    sets: tuple[str, ...] = ()
    opens: tuple[str, ...] = field(default=())

    @property
    def opening(self) -> tuple[str, ...]:
        return self.opens or tuple(f"{gate}=true" for gate in self.gates)


def row(key: str, value: Any, *gates: str, **kw: Any) -> Row:
    file = {**kw.pop("file", {}), key: value}
    return Row(key, file, gates, **kw)


def scoring(key: str, value: Any, *gates: str, **kw: Any) -> Row:
    return row(f"prompt.scoring.{key}", value, *(gates or (SCORING,)), **kw)


ROUNDS = (SCORING, EVOLUTION)
ON = (f"{SCORING}=true",)
ROWS: tuple[Row, ...] = (
    scoring("num_ideas", 8),
    scoring("exploration_rate", 0.3),
    scoring("judge_temperature", 0.5),
    scoring("judge_protocol", "pointwise"),
    scoring("judge_model", "judge-m"),
    scoring("judge_backend", "offline"),
    scoring("generator_temperature", 0.5),
    scoring("generator_profile_abstraction", False),
    scoring("max_reasks", 2),
    scoring("min_ok_cards", 3),
    scoring("judges", [{"id": "a"}]),
    scoring("min_ok_judges", 1),
    scoring("aggregation", "mean"),
    scoring(
        "trim",
        1,
        sets=(
            "prompt.scoring.aggregation=trimmed_mean",
            "prompt.scoring.judges=[{id: a}, {id: b}, {id: c}]",
            "prompt.scoring.min_ok_judges=3",
        ),
    ),
    scoring("normalise", "none"),
    scoring("novelty.enabled", False),
    scoring("novelty.window", 5),
    scoring("novelty.penalty_per_share", 10),
    scoring("novelty.max_penalty", 50),
    scoring("novelty.min_share", 0.5),
    *(
        scoring(f"novelty.{key}", value, NOVELTY, file={NOVELTY: False}, sets=ON)
        for key, value in (
            ("window", 5),
            ("penalty_per_share", 10),
            ("max_penalty", 50),
            ("min_share", 0.5),
        )
    ),
    *(
        scoring(f"novelty.{key}", value, WINDOW, file={WINDOW: 0}, sets=ON, opens=(f"{WINDOW}=5",))
        for key, value in (("penalty_per_share", 10), ("max_penalty", 50), ("min_share", 0.5))
    ),
    scoring("evolution.enabled", True),
    *(
        scoring(f"evolution.{key}", value, *ROUNDS)
        for key, value in (
            ("generations", 3),
            ("survivors", 2),
            ("variants_per_survivor", 3),
            ("keep_parents", False),
            ("quota.performance", 2),
            ("quota.diversity", 0),
            ("quota.potential", 0),
            ("selector", "llm"),
            ("near_duplicate_distance", 0.5),
        )
    ),
    scoring("evolution.generations", 3, EVOLUTION, sets=ON),
    *(
        scoring(
            f"evolution.{key}",
            value,
            *ROUNDS,
            SELECTOR,
            opens=(f"{SCORING}=true", f"{EVOLUTION}=true", f"{SELECTOR}=llm"),
        )
        for key, value in (("selector_model", "selector-m"), ("selector_backend", "offline"))
    ),
    *(
        scoring(
            f"evolution.{key}",
            value,
            SELECTOR,
            sets=(*ON, f"{EVOLUTION}=true"),
            opens=(f"{SELECTOR}=llm",),
        )
        for key, value in (("selector_model", "selector-m"), ("selector_backend", "offline"))
    ),
    Row(
        "prompt.scoring.judges[0].weight",
        {"prompt.scoring.judges": [{"id": "a", "weight": 2}, {"id": "b"}]},
        ("prompt.scoring.aggregation",),
        sets=ON,
        opens=("prompt.scoring.aggregation=weighted_median",),
    ),
    row("run.parallel_cap", 8, "run.parallel", opens=("run.parallel=auto",)),
    row("context.date", "2026-10-25", CONTEXT),
    row("context.injection_location", "system", CONTEXT),
    row("context.injectors", ["season"], CONTEXT),
    row("context.plugins", ["my_injector"], CONTEXT),
    row("context.plugin_settings", {"moon": {"phase_source": "table"}}, CONTEXT),
    row("context.season.hemisphere", "southern", CONTEXT),
    row("context.holiday.country", "GB", CONTEXT),
    row("context.holiday.subdivision", "CA", CONTEXT),
    row("context.holiday.include", ["christmas"], CONTEXT),
    row("context.holiday.lookahead_days", 7, CONTEXT),
    row("context.holiday.base_probability", 0.1, CONTEXT),
    row("context.holiday.max_probability", 0.9, CONTEXT),
    row(
        "context.season.hemisphere",
        "southern",
        INJECTORS,
        file={INJECTORS: ["holiday"]},
        sets=(f"{CONTEXT}=true",),
        opens=(f"{INJECTORS}=[season, holiday]",),
    ),
    row(
        "context.holiday.country",
        "GB",
        INJECTORS,
        file={INJECTORS: ["season"]},
        sets=(f"{CONTEXT}=true",),
        opens=(f"{INJECTORS}=[season, holiday]",),
    ),
    row("upscale.target_long_edge_px", 2000, UPSCALE),
    row("upscale.target_aspect_ratio", 1.5, UPSCALE),
    row("upscale.target_width_px", 2000, UPSCALE, file={"upscale.target_height_px": 1000}),
    row("upscale.realesrgan_binary", "/opt/realesrgan/realesrgan-ncnn-vulkan", UPSCALE),
    row("upscale.model_path", "/opt/realesrgan/models", UPSCALE),
    row("upscale.model_name", "realesrgan-x4plus-anime", UPSCALE),
    row("upscale.tile_size", 64, UPSCALE),
    row("upscale.tta", True, UPSCALE),
    row("upscale.allow_fallback_resize", True, UPSCALE),
    row("upscale.timeout_s", 60, UPSCALE),
    row(
        "upscale.target_long_edge_px",
        2000,
        "upscale.target_width_px",
        file={"upscale.target_width_px": 2000, "upscale.target_height_px": 1000},
        sets=(f"{UPSCALE}=true",),
        opens=("upscale.target_width_px=null", "upscale.target_height_px=null"),
    ),
)

SINGLE_VALUED = frozenset({"upscale.engine"})
"""Gated keys with one allowed value: a file cannot set them to anything but the default."""


def nested(dotted: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        node = out
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def load(tmp_path: Path, file: dict[str, Any], *sets: str) -> AppConfig:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(nested(file)), encoding="utf-8")
    return load_config(root=tmp_path, config_path=path, overrides=sets, env={})


@pytest.mark.parametrize("case", ROWS, ids=[f"{r.key}-{'+'.join(r.gates)}" for r in ROWS])
def test_a_setting_that_would_do_nothing_is_an_error_naming_what_opens_it(
    case: Row, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, case.file, *case.sets)
    assert info.value.key == case.key, str(info.value)
    assert "does nothing unless" in info.value.message
    for gate in case.gates:
        assert gate in info.value.message
    load(tmp_path, case.file, *case.sets, *case.opening)


@pytest.mark.parametrize("key", sorted(READ_WHEN_CLOSED))
def test_a_key_read_while_its_gate_is_closed_loads(key: str, tmp_path: Path) -> None:
    value = "sqlite:///runs.sqlite" if key == "store.url" else "4k"
    gate = key.rsplit(".", 1)[0] + ".enabled"
    load(tmp_path, {gate: False, key: value})


def test_a_key_written_at_its_default_is_not_set(tmp_path: Path) -> None:
    load(tmp_path, {SCORING: False, "prompt.scoring.num_ideas": 6, "upscale.tta": False})


def test_the_overrides_are_one_runs_changes(tmp_path: Path) -> None:
    """A key an override sets is not checked; a gate an override closes leaves the files'
    keys alone; a gate the files close still counts when an override closes another."""
    load(tmp_path, {}, "prompt.scoring.num_ideas=8", "prompt.scoring.evolution.generations=3")
    load(tmp_path, {SCORING: True, "prompt.scoring.num_ideas": 8}, f"{SCORING}=false")
    kept = {UPSCALE: True, "upscale.tta": True, "upscale.target_long_edge_px": 2000}
    load(tmp_path, kept, f"{UPSCALE}=false")
    with pytest.raises(ConfigError) as info:
        load(tmp_path, {SCORING: True, "prompt.scoring.evolution.generations": 3}, f"{SCORING}=0")
    assert info.value.key == "prompt.scoring.evolution.generations"
    assert EVOLUTION in info.value.message


def test_the_command_line_exits_2_naming_the_key_and_the_switch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("prompt:\n  scoring:\n    evolution:\n      generations: 3\n", "utf-8")
    assert main(["--config", str(path), "--offline"], env={}, root=tmp_path) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith("configuration error: prompt.scoring.evolution.generations: got 3,")
    assert f"--set {SCORING}=true --set {EVOLUTION}=true" in err
    assert not (tmp_path / "output").exists()


# --------------------------------------------------------------------------- completeness


def _sections(model: type[BaseModel], prefix: str = "") -> dict[str, type[BaseModel]]:
    """Every section of the schema, by dotted key."""
    out = {prefix: model}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, _Section):
            out.update(_sections(annotation, f"{prefix}.{name}" if prefix else name))
    return out


def _leaves(model: type[BaseModel], prefix: str) -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        annotation, key = info.annotation, f"{prefix}.{name}"
        if isinstance(annotation, type) and issubclass(annotation, _Section):
            out += _leaves(annotation, key)
        elif not (get_origin(annotation) is Literal and len(get_args(annotation)) == 1):
            out.append(key)
    return out


SECTIONS = _sections(AppConfig)


def test_every_section_with_a_switch_is_a_gate() -> None:
    switched = {key for key, model in SECTIONS.items() if "enabled" in model.model_fields}
    assert switched == {g.section for g in GATES if g.switch == "enabled"}


@pytest.mark.parametrize(
    "gate", [g for g in GATES if not g.keys], ids=[g.key for g in GATES if not g.keys]
)
def test_every_key_an_enabled_switch_closes_has_a_row(gate: Any) -> None:
    """A key added to a gated section fails here until a row says what it needs (or
    :data:`READ_WHEN_CLOSED` says what reads it while the section is off)."""
    written = {key for r in ROWS for key in r.file}
    for key in _leaves(SECTIONS[gate.section], gate.section):
        if key == gate.key or key in READ_WHEN_CLOSED or key in SINGLE_VALUED:
            continue
        assert key in written, f"{key} is closed by {gate.key} but no row of ROWS sets it"
        assert any(key in r.file and gate.key in r.gates for r in ROWS), (key, gate.key)


def test_every_gate_and_every_key_it_lists_has_a_row() -> None:
    for gate in GATES:
        if gate.section == "store":  # store.url is read while the store is off
            continue
        rows = [r for r in ROWS if gate.key in r.gates]
        assert rows, f"no row is closed by {gate.key}"
        for key in gate.keys:
            dotted = f"{gate.section}.{key}".replace("[]", "[0]")
            assert any(r.key.startswith(dotted) for r in rows), (gate.key, key)


def test_every_single_valued_key_has_one_value() -> None:
    for key in SINGLE_VALUED:
        section, name = key.rsplit(".", 1)
        assert len(get_args(SECTIONS[section].model_fields[name].annotation)) == 1
