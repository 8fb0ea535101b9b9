"""Strict config loading: defaults, strict bools, ranges, unknown keys, judges, overlays,
``--set`` overrides, file choice, path resolution and the judge-temperature warning.

(The provider and key decision is ``backends.factory.choose_provider``, tested in
``tests/backends/test_factory.py``.)"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from image_project.config import (
    AppConfig,
    EffectiveJudge,
    ScoringConfig,
    deep_merge,
    load_config,
    parse_strict_bool,
)
from image_project.errors import ConfigError

REPO_ROOT = Path(__file__).parents[1]


def make_root(tmp_path: Path, config: object = None, local: object = None) -> Path:
    """A project root with ``config/config.yaml`` (and optionally ``config.local.yaml``)."""
    (tmp_path / "config").mkdir(exist_ok=True)
    for name, content in (("config.yaml", config), ("config.local.yaml", local)):
        if content is None:
            continue
        text = content if isinstance(content, str) else yaml.safe_dump(content)
        (tmp_path / "config" / name).write_text(text, encoding="utf-8")
    return tmp_path


def load(tmp_path: Path, data: object = None, *overrides: str, **kw: Any) -> AppConfig:
    root = make_root(tmp_path, {} if data is None else data)
    return load_config(root=root, overrides=overrides, env=kw.pop("env", {}), **kw)


def judges_of(config: AppConfig) -> tuple[EffectiveJudge, ...]:
    """The judges of a run on the configured backend's text model."""
    return config.prompt.scoring.effective_judges(config.backend.text_model)


def config_error(tmp_path: Path, data: object = None, *overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, data, *overrides)
    return info.value


# --------------------------------------------------------------------------- defaults


def test_real_config_yaml_gives_the_documented_defaults() -> None:
    config = load_config(root=REPO_ROOT, env={})
    assert config.sources[0] == str(REPO_ROOT.resolve() / "config" / "config.yaml")
    backend = config.backend
    assert (backend.provider, backend.base_url, backend.api_key_env) == (
        "auto",
        None,
        "OPENAI_API_KEY",
    )
    assert (backend.text_model, backend.max_concurrency, backend.timeout_s) == (
        "gpt-4.1-mini",
        8,
        120.0,
    )
    assert (backend.max_attempts, backend.backoff_initial_s, backend.backoff_max_s) == (
        4,
        1.0,
        30.0,
    )
    assert backend.structured_outputs is True
    assert (config.run.mode, config.run.concurrency, config.run.runs) == ("full", "concurrent", 1)
    prompt = config.prompt
    assert prompt.random_seed is None
    assert (prompt.refinement, prompt.text_temperature) == ("final", 0.8)
    scoring = prompt.scoring
    assert scoring.enabled is False
    assert (scoring.num_ideas, scoring.exploration_rate, scoring.judge_temperature) == (
        6,
        0.15,
        0.0,
    )
    assert (scoring.judge_model, scoring.judges, scoring.min_ok_judges) == (None, None, None)
    assert (scoring.generator_temperature, scoring.generator_profile_abstraction) == (0.9, True)
    assert scoring.max_reasks == 1
    assert (scoring.novelty.enabled, scoring.novelty.window) == (True, 25)
    image = config.image
    assert (image.model, image.size, image.quality, image.caption_font_path) == (
        "gpt-image-2.6-sunburst",
        "1536x1024",
        "high",
        None,
    )


def test_real_config_yaml_matches_model_defaults() -> None:
    """config.yaml documents every key with exactly the code's default."""
    raw = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text(encoding="utf-8"))
    defaults = AppConfig().model_dump(mode="json")
    assert raw == defaults


def test_empty_config_file_means_all_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, "")
    assert config.prompt.scoring.num_ideas == 6
    assert config.image.generation_path == tmp_path.resolve() / "output" / "images"


def test_example_ensemble_overlay_is_valid() -> None:
    config = load_config(
        root=REPO_ROOT,
        config_path=REPO_ROOT / "config" / "scoring_ensemble.example.yaml",
        env={},
    )
    assert config.prompt.scoring.enabled is True
    judges = config.prompt.scoring.effective_judges(config.backend.text_model)
    assert [j.id for j in judges] == ["strict", "warm", "novel"]
    assert all(j.temperature == 0.0 for j in judges)
    assert config.prompt.scoring.effective_min_ok_judges == 2


def test_models_are_frozen() -> None:
    config = AppConfig()
    with pytest.raises(ValueError, match="frozen"):
        config.run.runs = 3


# --------------------------------------------------------------------------- strict bools


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        (1, True),
        (0, False),
        ("true", True),
        ("False", False),
        (" YES ", True),
        ("no", False),
        ("1", True),
        ("0", False),
    ],
)
def test_strict_bool_accepts(value: object, expected: bool, tmp_path: Path) -> None:
    assert parse_strict_bool(value, "x.y") is expected
    config = load(tmp_path, {"prompt": {"scoring": {"enabled": value}}})
    assert config.prompt.scoring.enabled is expected


@pytest.mark.parametrize("value", [None, 2, -1, 1.0, "maybe", "", "on", "tru", [True], {}])
def test_strict_bool_rejects(value: object, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_strict_bool(value, "x.y")
    assert info.value.key == "x.y"
    assert repr(value) in info.value.message

    error = config_error(tmp_path, {"prompt": {"scoring": {"novelty": {"enabled": value}}}})
    assert error.key == "prompt.scoring.novelty.enabled"
    assert repr(value) in error.message
    assert "true or false" in error.message


@pytest.mark.parametrize(
    "key",
    [
        "backend.structured_outputs",
        "prompt.scoring.enabled",
        "prompt.scoring.generator_profile_abstraction",
        "prompt.scoring.novelty.enabled",
    ],
)
def test_every_bool_field_is_strict(key: str, tmp_path: Path) -> None:
    error = config_error(tmp_path, None, f"{key}=maybe")
    assert error.key == key
    assert "'maybe'" in error.message
    value: Any = load(tmp_path, None, f"{key}='no'")
    for part in key.split("."):
        value = getattr(value, part)
    assert value is False


# --------------------------------------------------------------------------- ranges and types


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("prompt.scoring.num_ideas", 1, "1"),
        ("prompt.scoring.num_ideas", 53, "53"),
        ("prompt.scoring.exploration_rate", 0.6, "0.6"),
        ("prompt.scoring.novelty.window", -1, "-1"),
        ("backend.max_concurrency", 0, "0"),
        ("run.runs", 10**9, "1000000000"),
        ("backend.timeout_s", 0, "0"),
        ("backend.max_attempts", 21, "21"),
        ("prompt.scoring.max_reasks", 6, "6"),
        ("prompt.scoring.judge_temperature", 2.5, "2.5"),
        ("prompt.text_temperature", -0.1, "-0.1"),
        ("prompt.random_seed", -5, "-5"),
        ("prompt.scoring.num_ideas", "abc", "'abc'"),
        ("prompt.scoring.num_ideas", 2.5, "2.5"),
        ("backend.timeout_s", ".nan", "nan"),
        ("backend.provider", "OpenAI", "'OpenAI'"),
        ("run.mode", "fast", "'fast'"),
        ("image.quality", "ultra", "'ultra'"),
        ("image.size", "'1024'", "'1024'"),
        ("image.size", "10x0", "'10x0'"),
        ("backend.base_url", "localhost:11434", "'localhost:11434'"),
        ("backend.text_model", "''", "''"),
        ("backend.text_model", 5, "5"),
    ],
)
def test_out_of_range_or_wrong_type_names_path_and_value(
    key: str, value: object, shown: str, tmp_path: Path
) -> None:
    error = config_error(tmp_path, None, f"{key}={value}")
    assert error.key == key
    assert f"got {shown}" in error.message
    assert "must be" in error.message
    assert str(error).startswith(f"{key}: ")


def test_range_message_says_what_is_allowed(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"prompt": {"scoring": {"num_ideas": 1}}})
    assert str(error).startswith("prompt.scoring.num_ideas: got 1, must be an int")
    assert "2" in error.message and "52" in error.message


@pytest.mark.parametrize("key", ["prompt.random_seed", "run.runs", "backend.timeout_s"])
def test_a_bool_is_not_a_number(key: str, tmp_path: Path) -> None:
    error = config_error(tmp_path, None, f"{key}=true")
    assert error.key == key
    assert "True" in error.message


def test_int_looking_string_is_accepted_for_an_int(tmp_path: Path) -> None:
    config = load(tmp_path, {"prompt": {"random_seed": "42"}})
    assert config.prompt.random_seed == 42


def test_backoff_max_below_initial_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"backend": {"backoff_initial_s": 5, "backoff_max_s": 2}})
    assert error.key == "backend.backoff_max_s"
    assert "2" in error.message and "backoff_initial_s" in error.message


def test_api_key_env_must_be_a_name_and_a_pasted_key_is_not_echoed(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"backend": {"api_key_env": "sk-proj-SECRET123"}})
    assert error.key == "backend.api_key_env"
    assert "SECRET" not in str(error)
    assert "NAME" in error.message


def test_several_errors_are_listed_in_one_config_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"run": {"runs": 0}, "image": {"quality": "ultra"}})
    assert error.key == "run.runs"
    assert "image.quality" in error.message and "'ultra'" in error.message


def test_non_mapping_section_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"run": 5})
    assert error.key == "run"
    assert "got 5" in error.message and "mapping" in error.message


# --------------------------------------------------------------------------- unknown keys


@pytest.mark.parametrize(
    ("data", "key", "suggestion"),
    [
        ({"bakend": {}}, "bakend", "backend"),
        ({"prompt": {"scoring": {"num_idea": 3}}}, "prompt.scoring.num_idea", "num_ideas"),
        ({"image": {"sise": "auto"}}, "image.sise", "size"),
        (
            {"prompt": {"scoring": {"judges": [{"id": "a"}, {"id": "b", "temprature": 0}]}}},
            "prompt.scoring.judges[1].temprature",
            "temperature",
        ),
    ],
)
def test_unknown_key_names_the_path_and_suggests(
    data: object, key: str, suggestion: str, tmp_path: Path
) -> None:
    error = config_error(tmp_path, data)
    assert error.key == key
    assert "unknown key" in error.message
    assert f"did you mean {suggestion!r}" in error.message


def test_unknown_key_without_close_match_lists_valid_keys(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"run": {"zzzzzz": 1}})
    assert error.key == "run.zzzzzz"
    assert "concurrency" in error.message and "runs" in error.message


def test_sources_cannot_be_set_from_a_file(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"sources": ["x"]})
    assert error.key == "sources"
    assert "unknown key" in error.message


# --------------------------------------------------------------------------- judges


def test_duplicate_judge_ids_are_an_error(tmp_path: Path) -> None:
    judges = [{"id": "strict"}, {"id": "warm"}, {"id": "strict"}]
    error = config_error(tmp_path, {"prompt": {"scoring": {"judges": judges}}})
    assert error.key == "prompt.scoring.judges[2].id"
    assert "'strict'" in error.message and "unique" in error.message


def test_min_ok_judges_above_ensemble_size_is_an_error(tmp_path: Path) -> None:
    scoring = {"judges": [{"id": "a"}, {"id": "b"}], "min_ok_judges": 3}
    error = config_error(tmp_path, {"prompt": {"scoring": scoring}})
    assert error.key == "prompt.scoring.min_ok_judges"
    assert "got 3" in error.message and "2" in error.message


def test_min_ok_judges_above_one_without_judges_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"prompt": {"scoring": {"min_ok_judges": 2}}})
    assert error.key == "prompt.scoring.min_ok_judges"


def test_min_ok_judges_zero_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"prompt": {"scoring": {"min_ok_judges": 0}}})
    assert error.key == "prompt.scoring.min_ok_judges"
    assert "got 0" in error.message


def test_empty_judges_list_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"prompt": {"scoring": {"judges": []}}})
    assert error.key == "prompt.scoring.judges"
    assert "got []" in error.message


def test_more_than_sixteen_judges_is_an_error(tmp_path: Path) -> None:
    judges = [{"id": f"j{i}"} for i in range(17)]
    error = config_error(tmp_path, {"prompt": {"scoring": {"judges": judges}}})
    assert error.key == "prompt.scoring.judges"
    assert "16" in error.message


@pytest.mark.parametrize("bad_id", ["", "has space", "a/b", 7])
def test_bad_judge_id_is_an_error(bad_id: object, tmp_path: Path) -> None:
    judges = [{"id": "ok"}, {"id": bad_id}]
    error = config_error(tmp_path, {"prompt": {"scoring": {"judges": judges}}})
    assert error.key == "prompt.scoring.judges[1].id"
    assert repr(bad_id) in error.message


def test_judge_without_id_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"prompt": {"scoring": {"judges": [{"model": "m"}]}}})
    assert error.key == "prompt.scoring.judges[0].id"
    assert "missing" in error.message


def test_judge_temperature_out_of_range_is_an_error(tmp_path: Path) -> None:
    judges = [{"id": "a", "temperature": 3}]
    error = config_error(tmp_path, {"prompt": {"scoring": {"judges": judges}}})
    assert error.key == "prompt.scoring.judges[0].temperature"
    assert "got 3" in error.message


def test_effective_judges_default_to_one_judge_from_text_model() -> None:
    scoring = ScoringConfig()
    assert scoring.effective_judges("text-m") == (EffectiveJudge("judge", "text-m", 0.0),)
    assert scoring.effective_min_ok_judges == 1


def test_effective_judges_default_uses_judge_model_and_temperature() -> None:
    scoring = ScoringConfig(judge_model="judge-m", judge_temperature=0.2)
    assert scoring.effective_judges("text-m") == (EffectiveJudge("judge", "judge-m", 0.2),)


def test_effective_judges_apply_fallbacks_per_judge(tmp_path: Path) -> None:
    scoring = {
        "judge_model": "judge-m",
        "judges": [
            {"id": "a"},
            {"id": "b", "model": "own-m", "temperature": 0.0},
            {"id": "c", "model": None, "temperature": None},
        ],
    }
    config = load(tmp_path, {"prompt": {"scoring": scoring}, "backend": {"text_model": "t"}})
    assert judges_of(config) == (
        EffectiveJudge("a", "judge-m", 0.0),
        EffectiveJudge("b", "own-m", 0.0),
        EffectiveJudge("c", "judge-m", 0.0),
    )
    assert config.prompt.scoring.effective_min_ok_judges == 2
    without_judge_model = load(tmp_path, {"prompt": {"scoring": {"judges": [{"id": "a"}]}}})
    assert judges_of(without_judge_model)[0].model == "gpt-4.1-mini"


def test_judge_temperatures_apply_the_same_fallbacks_without_a_model() -> None:
    assert ScoringConfig(judge_temperature=0.3).judge_temperatures() == (("judge", 0.3),)
    scoring = ScoringConfig.model_validate(
        {
            "judge_temperature": 0.2,
            "judges": [
                {"id": "a"},
                {"id": "b", "temperature": 0.5},
                {"id": "c", "temperature": None, "model": "own-m"},
            ],
        }
    )
    assert scoring.judge_temperatures() == (("a", 0.2), ("b", 0.5), ("c", 0.2))
    assert scoring.judge_temperatures() == tuple(
        (j.id, j.temperature) for j in scoring.effective_judges("any-model")
    )


@pytest.mark.parametrize(("count", "majority"), [(1, 1), (2, 2), (3, 2), (4, 3), (16, 9)])
def test_min_ok_judges_defaults_to_majority(count: int, majority: int) -> None:
    scoring = ScoringConfig.model_validate({"judges": [{"id": f"j{i}"} for i in range(count)]})
    assert scoring.effective_min_ok_judges == majority


# --------------------------------------------------------------------------- --set overrides


def test_set_parses_values_as_yaml(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        None,
        "prompt.scoring.enabled=true",
        "run.runs=3",
        "prompt.scoring.judges=[{id: a}, {id: b, temperature: 0.5}]",
        "image.caption_font_path=null",
        "backend.base_url = http://localhost:11434/v1",
    )
    assert config.prompt.scoring.enabled is True
    assert config.run.runs == 3
    assert [j.id for j in judges_of(config)] == ["a", "b"]
    assert config.image.caption_font_path is None
    assert config.backend.base_url == "http://localhost:11434/v1"


def test_set_null_overrides_a_file_value(tmp_path: Path) -> None:
    data = {"prompt": {"random_seed": 7, "scoring": {"judges": [{"id": "x"}]}}}
    config = load(tmp_path, data, "prompt.random_seed=null", "prompt.scoring.judges=null")
    assert config.prompt.random_seed is None
    assert config.prompt.scoring.judges is None


def test_set_replaces_a_list(tmp_path: Path) -> None:
    data = {"prompt": {"scoring": {"judges": [{"id": "x"}, {"id": "y"}]}}}
    config = load(tmp_path, data, "prompt.scoring.judges=[{id: z}]")
    assert [j.id for j in judges_of(config)] == ["z"]


def test_set_later_item_wins(tmp_path: Path) -> None:
    assert load(tmp_path, None, "run.runs=2", "run.runs=5").run.runs == 5


def test_set_mapping_merges_into_a_mapping(tmp_path: Path) -> None:
    data = {"prompt": {"scoring": {"num_ideas": 9}}}
    config = load(tmp_path, data, "prompt.scoring={enabled: true}")
    assert (config.prompt.scoring.enabled, config.prompt.scoring.num_ideas) == (True, 9)


def test_set_unknown_key_is_caught_by_validation(tmp_path: Path) -> None:
    error = config_error(tmp_path, None, "prompt.scoring.num_idea=3")
    assert error.key == "prompt.scoring.num_idea"
    assert "num_ideas" in error.message


def test_set_creating_a_new_nested_mapping_is_an_unknown_key(tmp_path: Path) -> None:
    error = config_error(tmp_path, None, "prompt.scoring.extra.deep=1")
    assert error.key == "prompt.scoring.extra"
    assert "unknown key" in error.message


def test_set_below_a_non_mapping_is_an_error(tmp_path: Path) -> None:
    data = {"prompt": {"scoring": {"enabled": False}}}
    error = config_error(tmp_path, data, "prompt.scoring.enabled.x=1")
    assert error.key == "prompt.scoring.enabled.x"
    assert "prompt.scoring.enabled" in error.message and "not a mapping" in error.message


@pytest.mark.parametrize("item", ["run.runs", "=3", "  =3", "run..runs=3", "run.=3", ""])
def test_malformed_set_item_is_an_error(item: str, tmp_path: Path) -> None:
    error = config_error(tmp_path, None, item)
    assert repr(item) in error.message
    assert "dotted.key=value" in error.message


def test_set_value_with_bad_yaml_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, None, "prompt.scoring.judges=[a, b")
    assert error.key == "prompt.scoring.judges"
    assert "YAML" in error.message


# --------------------------------------------------------------------------- files and merging


def test_local_overlay_deep_merges(tmp_path: Path) -> None:
    root = make_root(
        tmp_path,
        config={"run": {"runs": 2, "mode": "prompt_only"}, "prompt": {"random_seed": 5}},
        local={
            "run": {"runs": 4},
            "prompt": {"random_seed": None, "scoring": {"judges": [{"id": "a"}]}},
        },
    )
    config = load_config(root=root, env={})
    assert (config.run.runs, config.run.mode) == (4, "prompt_only")
    assert config.prompt.random_seed is None
    assert [j.id for j in judges_of(config)] == ["a"]
    assert config.sources == (
        str(root.resolve() / "config" / "config.yaml"),
        str(root.resolve() / "config" / "config.local.yaml"),
    )


def test_local_overlay_replaces_lists() -> None:
    base = {"prompt": {"scoring": {"judges": [{"id": "a"}, {"id": "b"}], "num_ideas": 3}}}
    overlay = {"prompt": {"scoring": {"judges": [{"id": "c"}]}}}
    merged = deep_merge(base, overlay)
    assert merged == {"prompt": {"scoring": {"judges": [{"id": "c"}], "num_ideas": 3}}}
    assert base["prompt"]["scoring"]["judges"] == [{"id": "a"}, {"id": "b"}]


def test_local_overlay_shape_mismatch_names_the_key(tmp_path: Path) -> None:
    root = make_root(tmp_path, config={"prompt": {"scoring": {"num_ideas": 3}}}, local="prompt: 5")
    with pytest.raises(ConfigError) as info:
        load_config(root=root, env={})
    assert info.value.key == "prompt"

    root = make_root(tmp_path, config={"run": {"runs": 2}}, local="run:\n  runs: {a: 1}\n")
    with pytest.raises(ConfigError) as info:
        load_config(root=root, env={})
    assert info.value.key == "run.runs"


def test_missing_default_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config\.yaml"):
        load_config(root=tmp_path, env={})


def test_env_var_names_the_one_file_and_skips_the_overlay(tmp_path: Path) -> None:
    root = make_root(tmp_path, config={"run": {"runs": 2}}, local={"run": {"runs": 3}})
    other = tmp_path / "elsewhere.yaml"
    other.write_text("run:\n  runs: 7\n", encoding="utf-8")
    config = load_config(root=root, env={"IMAGE_PROJECT_CONFIG": str(other)})
    assert config.run.runs == 7
    assert config.sources == (str(other),)


def test_explicit_config_path_wins_over_env(tmp_path: Path) -> None:
    root = make_root(tmp_path, config={"run": {"runs": 2}})
    chosen = tmp_path / "chosen.yaml"
    chosen.write_text("run: {runs: 9}\n", encoding="utf-8")
    env = {"IMAGE_PROJECT_CONFIG": str(tmp_path / "nope.yaml")}
    config = load_config(root=root, config_path=chosen, env=env)
    assert config.run.runs == 9
    assert config.sources == (str(chosen),)


@pytest.mark.parametrize("via", ["env", "arg"])
def test_named_config_file_must_exist(via: str, tmp_path: Path) -> None:
    root = make_root(tmp_path, config={})
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as info:
        if via == "env":
            load_config(root=root, env={"IMAGE_PROJECT_CONFIG": str(missing)})
        else:
            load_config(root=root, config_path=missing, env={})
    assert str(missing) in str(info.value)


def test_yaml_syntax_error_names_the_file(tmp_path: Path) -> None:
    root = make_root(tmp_path, config="run:\n  runs: [1, 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(root=root, env={})
    assert str(root.resolve() / "config" / "config.yaml") in str(info.value)


def test_yaml_syntax_error_in_overlay_names_the_overlay(tmp_path: Path) -> None:
    root = make_root(tmp_path, config={}, local="run: {runs: 3\n")
    with pytest.raises(ConfigError, match=r"config\.local\.yaml"):
        load_config(root=root, env={})


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_non_mapping_top_level_names_the_file(text: str, tmp_path: Path) -> None:
    root = make_root(tmp_path, config=text)
    with pytest.raises(ConfigError, match=r"config\.yaml"):
        load_config(root=root, env={})


def test_duplicate_yaml_keys_are_an_error(tmp_path: Path) -> None:
    root = make_root(tmp_path, config="run:\n  runs: 2\n  runs: 3\n")
    with pytest.raises(ConfigError, match="duplicate key 'runs'"):
        load_config(root=root, env={})


# --------------------------------------------------------------------------- paths


def test_relative_paths_resolve_against_root(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        {
            "prompt": {"categories_path": "data/cats.csv", "titles_manifest_path": "t/m.csv"},
            "image": {"caption_font_path": "fonts/a.ttf"},
        },
    )
    root = tmp_path.resolve()
    assert config.prompt.categories_path == root / "data" / "cats.csv"
    assert config.prompt.profile_path == root / "config" / "profile.csv"
    assert config.prompt.generations_path == root / "output" / "generations.csv"
    assert config.prompt.titles_manifest_path == root / "t" / "m.csv"
    assert config.effective_titles_manifest_path == root / "t" / "m.csv"
    assert config.image.log_path == root / "output" / "logs"
    assert config.image.caption_font_path == root / "fonts" / "a.ttf"


def test_default_titles_manifest_is_under_generation_path(tmp_path: Path) -> None:
    config = load(tmp_path, {"image": {"generation_path": "imgs"}})
    assert config.prompt.titles_manifest_path is None
    expected = tmp_path.resolve() / "imgs" / "titles_manifest.csv"
    assert config.effective_titles_manifest_path == expected


def test_absolute_paths_stay_and_paths_need_not_exist(tmp_path: Path) -> None:
    elsewhere = tmp_path / "nowhere" / "gen.csv"
    config = load(tmp_path, {"prompt": {"generations_path": str(elsewhere)}})
    assert config.prompt.generations_path == elsewhere
    assert not elsewhere.exists()


def test_home_and_env_vars_are_expanded_in_paths(tmp_path: Path) -> None:
    env = {"DATA": "/srv/data", "HOME": str(tmp_path / "home")}
    data = {"prompt": {"generations_path": "${DATA}/g.csv", "profile_path": "$DATA/p.csv"}}
    config = load(tmp_path, data, env=env)
    assert config.prompt.generations_path == Path("/srv/data/g.csv")
    assert config.prompt.profile_path == Path("/srv/data/p.csv")
    home = load(tmp_path, {"image": {"log_path": "~/logs"}})
    assert home.image.log_path == Path("~/logs").expanduser()


def test_unset_env_var_in_a_path_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"image": {"log_path": "$NOPE/logs"}})
    assert error.key == "image.log_path"
    assert "'$NOPE/logs'" in error.message and "NOPE" in error.message


def test_empty_path_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, {"prompt": {"profile_path": ""}})
    assert error.key == "prompt.profile_path"


# --------------------------------------------------------------------------- logging


def test_scoring_settings_are_not_logged_at_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Which models the judges use depends on the backend the run picks, so the ensemble is
    # logged when a run starts, not when the config is loaded.
    with caplog.at_level(logging.INFO, logger="image_project"):
        load(tmp_path)
    assert not caplog.records
    with caplog.at_level(logging.INFO, logger="image_project"):
        load(tmp_path, None, "prompt.scoring.enabled=true")
    assert not [r for r in caplog.records if "black-box scoring" in r.getMessage()]
    assert not caplog.records


@pytest.mark.parametrize(
    "overrides",
    [
        ("prompt.scoring.judge_temperature=0.3",),
        ("prompt.scoring.judges=[{id: a}, {id: hot, temperature: 0.7}]",),
    ],
)
def test_non_zero_judge_temperature_warns(
    overrides: tuple[str, ...], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="image_project.config"):
        load(tmp_path, None, "prompt.scoring.enabled=true", *overrides)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "TEMPERATURE" in warnings[0].getMessage()


def test_judge_temperature_warning_names_the_judges_and_says_when_scoring_is_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    judges = "prompt.scoring.judges=[{id: a}, {id: hot, temperature: 0.7}]"
    with caplog.at_level(logging.WARNING, logger="image_project.config"):
        load(tmp_path, None, judges)
    (warning,) = caplog.records
    message = warning.getMessage()
    assert "judge 'hot' at 0.7" in message and "'a'" not in message
    assert "scoring is disabled" in message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="image_project.config"):
        load(tmp_path, None, judges, "prompt.scoring.enabled=true")
    (warning,) = caplog.records
    assert "scoring is disabled" not in warning.getMessage()


def test_zero_temperature_ensemble_does_not_warn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="image_project.config"):
        load(tmp_path, None, "prompt.scoring.judges=[{id: a, temperature: 0}, {id: b}]")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# --------------------------------------------------------------------------- public surface


def test_all_is_complete_and_exact() -> None:
    import image_project.config as package
    from image_project.config import loading, models

    # The package defines nothing itself; its modules do, so each one's __all__ is checked.
    for module in (package, models, loading):
        for name in module.__all__:
            assert hasattr(module, name), name
        public = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and getattr(value, "__module__", None) == module.__name__
            and callable(value)
        }
        assert public <= set(module.__all__), module.__name__
