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

from image_project.config.fields import parse_strict_bool
from image_project.config.loading import deep_merge, load_config
from image_project.config.models import AppConfig, EffectiveJudge, RubricSpec, ScoringConfig
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
        "gpt-6-luna",
        8,
        120.0,
    )
    assert (backend.max_attempts, backend.backoff_initial_s, backend.backoff_max_s) == (
        4,
        1.0,
        30.0,
    )
    assert backend.max_retry_wait_s == 60.0
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
    judges = config.prompt.scoring.effective_judges(
        config.backend.text_model, {"local": config.backends["local"].text_model}
    )
    assert [j.id for j in judges] == ["strict", "warm", "novel"]
    assert judges[2].backend == "local" and judges[2].model == "qwen3-8b-local"
    assert all(j.temperature == 0.0 for j in judges)
    assert len({j.model for j in judges}) == 2  # a mixed-model panel (docs/panel.md)
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


@pytest.mark.parametrize("word", ["on", "off", "On", "OFF"])
@pytest.mark.parametrize(
    "key",
    [
        "backend.structured_outputs",
        "prompt.scoring.enabled",
        "prompt.scoring.generator_profile_abstraction",
        "prompt.scoring.novelty.enabled",
    ],
)
def test_yaml_on_and_off_are_not_booleans_in_a_file_or_in_set(
    key: str, word: str, tmp_path: Path
) -> None:
    """YAML 1.1 reads on/off as booleans; the strict rule does not accept them."""
    *parents, leaf = key.split(".")
    text = "".join(f"{'  ' * depth}{part}:\n" for depth, part in enumerate(parents))
    text += f"{'  ' * len(parents)}{leaf}: {word}\n"
    for error in (config_error(tmp_path, text), config_error(tmp_path, None, f"{key}={word}")):
        assert error.key == key
        assert error.message.startswith(f"got {word!r}, must be true or false")


def test_yaml_on_is_plain_text_for_a_string_key_and_yes_no_stay_booleans(tmp_path: Path) -> None:
    config = load(tmp_path, "backend:\n  text_model: on\nprompt:\n  scoring:\n    enabled: yes\n")
    assert config.backend.text_model == "on"
    assert config.prompt.scoring.enabled is True
    assert load(tmp_path, None, "prompt.scoring.enabled=No").prompt.scoring.enabled is False


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
        ("backend.max_retry_wait_s", -1, "-1"),
        ("backend.max_retry_wait_s", "true", "True"),
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


@pytest.mark.parametrize(
    ("key", "value", "note"),
    [
        ("run.runs", "4.0", "(a float is not an int; write 4)"),
        ("prompt.scoring.num_ideas", "6.0", "(a float is not an int; write 6)"),
        ("prompt.random_seed", "42.0", "(a float is not an int; write 42)"),
        ("backend.max_attempts", "2.5", "(a float is not an int)"),
    ],
)
def test_an_int_key_refuses_a_float_even_a_whole_one(
    key: str, value: str, note: str, tmp_path: Path
) -> None:
    error = config_error(tmp_path, None, f"{key}={value}")
    assert error.key == key
    assert error.message.startswith(f"got {float(value)!r}, must be an int")
    assert error.message.endswith(note)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("run.runs", '"2"'),
        ("prompt.random_seed", "'42'"),
        ("backend.timeout_s", '"30"'),
    ],
)
def test_a_number_written_as_a_string_is_refused_like_a_float(
    tmp_path: Path, key: str, value: str
) -> None:
    """``--set 'run.runs="2"'`` used to pass while ``2.0`` was refused."""
    error = config_error(tmp_path, None, f"{key}={value}")
    assert error.key == key
    bare = value.strip("'\"")
    assert error.message.startswith(f"got {bare!r}, must be ")
    assert error.message.endswith(f"(a string is not a number; write {bare} without quotes)")
    assert load(tmp_path, None, f"{key}={bare}") is not None


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
        "enabled": True,
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
    without_judge_model = load(
        tmp_path, {"prompt": {"scoring": {"enabled": True, "judges": [{"id": "a"}]}}}
    )
    assert judges_of(without_judge_model)[0].model == "gpt-6-luna"


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
    example = error.message.rsplit("like ", 1)[1]
    assert example == "run.runs=3"
    assert load(tmp_path, None, example).run.runs == 3  # the suggestion itself is valid


def test_set_value_with_bad_yaml_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, None, "prompt.scoring.judges=[a, b")
    assert error.key == "prompt.scoring.judges"
    assert "YAML" in error.message and "\n" not in error.message
    assert "line 1, column " in error.message


# --------------------------------------------------------------------------- files and merging


def test_local_overlay_deep_merges(tmp_path: Path) -> None:
    root = make_root(
        tmp_path,
        config={"run": {"runs": 2, "mode": "prompt_only"}, "prompt": {"random_seed": 5}},
        local={
            "run": {"runs": 4},
            "prompt": {"random_seed": None, "scoring": {"enabled": True, "judges": [{"id": "a"}]}},
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


def test_missing_default_config_falls_back_to_the_built_in_one(tmp_path: Path) -> None:
    # No config/config.yaml is no error; tests/test_defaults.py has the details.
    assert load_config(root=tmp_path, env={}).sources[0].endswith("defaults/config.yaml")


def test_a_missing_named_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file not found: .*nowhere\.yaml"):
        load_config(root=tmp_path, config_path=tmp_path / "nowhere.yaml", env={})


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
def test_a_config_path_that_is_a_directory_says_so(via: str, tmp_path: Path) -> None:
    root = make_root(tmp_path, config={})
    folder = tmp_path / "config"
    with pytest.raises(ConfigError) as info:
        if via == "env":
            load_config(root=root, env={"IMAGE_PROJECT_CONFIG": str(folder)})
        else:
            load_config(root=root, config_path=folder, env={})
    assert str(info.value).startswith(f"config path {folder} is a directory (")
    assert str(info.value).endswith(f"name the YAML file itself, like {folder / 'config.yaml'}")


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


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("run:\n  runs: [1, 2\nimage: {}\n", "3:6", "expected ',' or ']', but got ':'"),
        ("run:\n  runs: 2\n  runs: 3\n", "3:3", "found duplicate key 'runs'"),
        ("run:\n\truns: 2\n", "2:1", "cannot start any token"),
    ],
)
def test_malformed_yaml_is_one_line_with_file_line_and_column(
    tmp_path: Path, text: str, where: str, what: str
) -> None:
    """PyYAML's own message is several lines with source excerpts (8 for an unclosed list)."""
    root = make_root(tmp_path, config=text)
    with pytest.raises(ConfigError) as info:
        load_config(root=root, env={})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{root / 'config' / 'config.yaml'}:{where}: invalid YAML: ")
    assert what in message


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


# --------------------------------------------------------------------------- judge panels
# rubric, weight and profile view per judge; aggregation and trim of the panel's scores


def scoring(**values: Any) -> dict[str, Any]:
    """A config holding ``prompt.scoring`` = ``values``, scoring on (its keys do nothing
    otherwise: tests/test_noop_settings.py)."""
    return {"prompt": {"scoring": {"enabled": True, **values}}}


def panel_error(tmp_path: Path, *judges: dict[str, Any], **values: Any) -> ConfigError:
    """The ConfigError of a panel of ``judges`` (and more ``prompt.scoring`` values)."""
    return config_error(tmp_path, scoring(judges=list(judges), **values))


RUBRIC_MUST = "must be one of 'default', 'strict', 'novelty_heavy', 'profile_fit'"


@pytest.mark.parametrize(
    ("rubric", "suggestion"),
    [
        ("strct", "strict"),
        ("Strict", "strict"),
        ("novelty-heavy", "novelty_heavy"),
        ("profile_fitt", "profile_fit"),
        ("defualt", "default"),
    ],
)
def test_near_miss_rubric_names_the_key_and_suggests(
    rubric: str, suggestion: str, tmp_path: Path
) -> None:
    error = panel_error(tmp_path, {"id": "a", "rubric": rubric})
    assert error.key == "prompt.scoring.judges[0].rubric"
    assert f"got {rubric!r}" in error.message
    assert RUBRIC_MUST in error.message
    assert f"did you mean {suggestion!r}?" in error.message
    assert str(error).startswith(f"prompt.scoring.judges[0].rubric: got {rubric!r}, ")


@pytest.mark.parametrize("rubric", ["harsh", "", 5, True, ["strict"]])
def test_unknown_rubric_names_the_key_and_lists_the_choices(rubric: object, tmp_path: Path) -> None:
    error = panel_error(tmp_path, {"id": "a"}, {"id": "b", "rubric": rubric})
    assert error.key == "prompt.scoring.judges[1].rubric"
    assert RUBRIC_MUST in error.message
    assert "text" in error.message and "file" in error.message
    assert "did you mean" not in error.message


def test_missing_rubric_file_is_an_error_naming_the_resolved_path(tmp_path: Path) -> None:
    error = panel_error(tmp_path, {"id": "a", "rubric": {"file": "rubrics/nope.md"}})
    assert error.key == "prompt.scoring.judges[0].rubric"
    assert "cannot read" in error.message
    assert str(tmp_path.resolve() / "rubrics" / "nope.md") in error.message
    assert "FileNotFoundError" in error.message


def test_rubric_file_that_is_a_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "rubrics").mkdir()
    error = panel_error(tmp_path, {"id": "a", "rubric": {"file": "rubrics"}})
    assert error.key == "prompt.scoring.judges[0].rubric"
    assert "cannot read" in error.message


@pytest.mark.parametrize("content", [b"", b"   \n\t\n", b"\xef\xbb\xbf\n"])
def test_empty_rubric_file_is_an_error(content: bytes, tmp_path: Path) -> None:
    (tmp_path / "empty.md").write_bytes(content)
    error = panel_error(tmp_path, {"id": "a", "rubric": {"file": "empty.md"}})
    assert error.key == "prompt.scoring.judges[0].rubric"
    assert f"{tmp_path.resolve() / 'empty.md'} is empty" in error.message


@pytest.mark.parametrize("content", [b"caf\xe9 rubric\n", b"\xff\xfeb\x00a\x00d\x00"])
def test_non_utf8_rubric_file_is_an_error(content: bytes, tmp_path: Path) -> None:
    (tmp_path / "latin1.md").write_bytes(content)
    error = panel_error(tmp_path, {"id": "a", "rubric": {"file": "latin1.md"}})
    assert error.key == "prompt.scoring.judges[0].rubric"
    assert f"{tmp_path.resolve() / 'latin1.md'} is not UTF-8 text" in error.message


def test_overlong_rubric_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "long.md").write_text("x" * 20_001, encoding="utf-8")
    error = panel_error(tmp_path, {"id": "a", "rubric": {"file": "long.md"}})
    assert error.key == "prompt.scoring.judges[0].rubric"
    assert "20001 characters, at most 20000" in error.message


@pytest.mark.parametrize("text", ["", "   ", "\n\n", None, 7])
def test_empty_rubric_text_is_an_error(text: object, tmp_path: Path) -> None:
    error = panel_error(tmp_path, {"id": "a", "rubric": {"text": text}})
    assert error.key == "prompt.scoring.judges[0].rubric"
    assert RUBRIC_MUST in error.message
    assert "text is empty" in error.message


def test_overlong_rubric_text_is_an_error(tmp_path: Path) -> None:
    error = panel_error(tmp_path, {"id": "a", "rubric": {"text": "y" * 20_001}})
    assert error.key == "prompt.scoring.judges[0].rubric"
    assert "text has 20001 characters, at most 20000" in error.message


@pytest.mark.parametrize(
    "rubric",
    [
        {"text": "be harsh", "file": "r.md"},
        {"text": "be harsh", "name": "strict"},
        {"path": "r.md"},
        {"name": "strict"},
        {},
    ],
)
def test_rubric_mapping_needs_exactly_one_key_text_or_file(
    rubric: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "r.md").write_text("a rubric", encoding="utf-8")
    error = panel_error(tmp_path, {"id": "a", "rubric": rubric})
    assert error.key == "prompt.scoring.judges[0].rubric"
    assert "a mapping with one key: text (the rubric itself) or file" in error.message


@pytest.mark.parametrize(("weight", "shown"), [(-1, "-1"), (-0.5, "-0.5"), (1001, "1001")])
def test_judge_weight_out_of_range_names_the_key(weight: float, shown: str, tmp_path: Path) -> None:
    error = panel_error(tmp_path, {"id": "a", "weight": weight})
    assert error.key == "prompt.scoring.judges[0].weight"
    assert f"got {shown}, must be a number in [0, 1000]" in error.message


@pytest.mark.parametrize("weight", [".nan", ".inf", "true", "heavy"])
def test_judge_weight_must_be_a_finite_number(weight: str, tmp_path: Path) -> None:
    error = config_error(
        tmp_path, None, f"prompt.scoring.judges=[{{id: a}}, {{id: b, weight: {weight}}}]"
    )
    assert error.key == "prompt.scoring.judges[1].weight"
    assert "must be" in error.message


@pytest.mark.parametrize(
    ("judges", "min_ok", "trim", "quorum"),
    [
        (3, None, 1, 2),
        (4, None, 2, 3),
        (5, 4, 2, 4),
        (1, None, 1, 1),
        (16, 1, 1, 1),
    ],
)
def test_trim_too_large_for_the_panel_is_an_error(
    judges: int, min_ok: int | None, trim: int, quorum: int, tmp_path: Path
) -> None:
    error = config_error(
        tmp_path,
        scoring(
            judges=[{"id": f"j{i}"} for i in range(judges)],
            min_ok_judges=min_ok,
            aggregation="trimmed_mean",
            trim=trim,
        ),
    )
    assert error.key == "prompt.scoring.trim"
    assert f"got {trim}, too large for the panel" in error.message
    assert f"2*trim must be < min_ok_judges ({quorum}," in error.message


def test_trim_too_large_without_judges_is_an_error(tmp_path: Path) -> None:
    error = config_error(tmp_path, scoring(aggregation="trimmed_mean", trim=1))
    assert error.key == "prompt.scoring.trim"
    assert "min_ok_judges (1," in error.message


@pytest.mark.parametrize(("judges", "min_ok", "trim"), [(3, 3, 1), (5, None, 1), (5, 5, 2)])
def test_trim_that_the_quorum_leaves_scores_for_is_valid(
    judges: int, min_ok: int | None, trim: int, tmp_path: Path
) -> None:
    config = load(
        tmp_path,
        scoring(
            judges=[{"id": f"j{i}"} for i in range(judges)],
            min_ok_judges=min_ok,
            aggregation="trimmed_mean",
            trim=trim,
        ),
    )
    assert (config.prompt.scoring.aggregation, config.prompt.scoring.trim) == (
        "trimmed_mean",
        trim,
    )


@pytest.mark.parametrize("aggregation", ["median", "weighted_median", "mean", None])
def test_trim_without_trimmed_mean_is_an_error(aggregation: str | None, tmp_path: Path) -> None:
    values: dict[str, Any] = {"judges": [{"id": f"j{i}"} for i in range(5)], "trim": 1}
    if aggregation is not None:
        values["aggregation"] = aggregation
    error = config_error(tmp_path, scoring(**values))
    assert error.key == "prompt.scoring.trim"
    assert "must be 0 unless aggregation is 'trimmed_mean'" in error.message
    assert f"(aggregation is {aggregation or ScoringConfig().aggregation!r})" in error.message


@pytest.mark.parametrize("value", [-1, 17, 1.5, "one"])
def test_trim_must_be_a_small_int(value: object, tmp_path: Path) -> None:
    error = config_error(tmp_path, scoring(aggregation="trimmed_mean", trim=value))
    assert error.key == "prompt.scoring.trim"
    assert f"got {value!r}" in error.message


def test_unknown_aggregation_names_the_key_and_the_choices(tmp_path: Path) -> None:
    error = config_error(tmp_path, scoring(aggregation="average"))
    assert error.key == "prompt.scoring.aggregation"
    assert "got 'average'" in error.message
    assert "'median', 'weighted_median', 'mean', 'trimmed_mean'" in error.message


@pytest.mark.parametrize("aggregation", ["mean", "weighted_median", "trimmed_mean"])
def test_all_zero_weights_with_a_weighted_aggregation_is_an_error(
    aggregation: str, tmp_path: Path
) -> None:
    judges = [{"id": "a", "weight": 0}, {"id": "b", "weight": 0.0}, {"id": "c", "weight": 0}]
    error = config_error(tmp_path, scoring(judges=judges, aggregation=aggregation, min_ok_judges=3))
    assert error.key == "prompt.scoring.judges"
    assert "3 judge(s) have weight 0" in error.message
    assert f"aggregation {aggregation!r} would have no weighted score" in error.message


@pytest.mark.parametrize(
    ("weights", "extra"),
    [
        ([1, 0, 0], {"aggregation": "mean"}),  # a fails: b and c meet the quorum of 2
        ([1, 0, 1], {"aggregation": "trimmed_mean", "trim": 1, "min_ok_judges": 3}),
    ],
    ids=["quorum-of-zero-weights", "trimmed-to-zero-weights"],
)
def test_a_panel_that_could_be_left_with_only_zero_weights_is_an_error(
    weights: list[float], extra: dict[str, object], tmp_path: Path
) -> None:
    """Checked at load, not after the model calls: the ok judges a run may be left with
    (or the scores left after trimming) could all weigh 0."""
    judges = [{"id": name, "weight": w} for name, w in zip("abc", weights, strict=True)]
    error = config_error(tmp_path, scoring(judges=judges, **extra))
    assert error.key == "prompt.scoring.judges"
    assert "could all weigh 0" in error.message


def test_zero_weights_are_valid_with_one_weighted_judge_and_do_nothing_with_the_median(
    tmp_path: Path,
) -> None:
    zero = [{"id": "a", "weight": 0}, {"id": "b", "weight": 0}]
    # The median ignores weights, so a weight is a setting that does nothing.
    error = config_error(tmp_path, scoring(judges=zero, aggregation="median"))
    assert error.key == "prompt.scoring.judges[0].weight"
    assert "prompt.scoring.aggregation" in error.message
    # The mean weighs the scores, so all-zero weights are an error.
    assert (
        config_error(tmp_path, scoring(judges=zero, aggregation="mean")).key
        == "prompt.scoring.judges"
    )
    some = [{"id": "a", "weight": 0}, {"id": "b", "weight": 0.5}]
    config = load(tmp_path, scoring(judges=some, aggregation="mean"))
    assert [j.weight for j in judges_of(config)] == [0.0, 0.5]


def test_hints_profile_without_the_abstraction_is_an_error(tmp_path: Path) -> None:
    error = panel_error(
        tmp_path,
        {"id": "a", "profile": "raw"},
        {"id": "b", "profile": "hints"},
        generator_profile_abstraction=False,
    )
    assert error.key == "prompt.scoring.judges[1].profile"
    assert "got 'hints'" in error.message
    assert "generator_profile_abstraction: true" in error.message


def test_hints_profile_with_the_abstraction_is_valid(tmp_path: Path) -> None:
    config = load(tmp_path, scoring(judges=[{"id": "a", "profile": "hints"}]))
    assert judges_of(config)[0].profile == "hints"
    off = load(
        tmp_path,
        scoring(
            judges=[{"id": "a", "profile": "dislikes_only"}, {"id": "b"}],
            generator_profile_abstraction=False,
        ),
    )
    assert [j.profile for j in judges_of(off)] == ["dislikes_only", "raw"]


@pytest.mark.parametrize("profile", ["hint", "full", "RAW", "", None])
def test_unknown_profile_view_names_the_key_and_the_choices(
    profile: object, tmp_path: Path
) -> None:
    error = panel_error(tmp_path, {"id": "a", "profile": profile})
    assert error.key == "prompt.scoring.judges[0].profile"
    assert f"got {profile!r}" in error.message
    assert "'raw', 'dislikes_only', 'hints'" in error.message


def test_relative_rubric_file_resolves_against_the_root_and_is_read_at_load(
    tmp_path: Path,
) -> None:
    (tmp_path / "rubrics").mkdir()
    rubric = tmp_path / "rubrics" / "harsh.md"
    rubric.write_text("\n  Score 0-100; be harsh.\n- craft: +0 to +20\n\n", encoding="utf-8")
    config = load(tmp_path, scoring(judges=[{"id": "a", "rubric": {"file": "rubrics/harsh.md"}}]))
    (judge,) = judges_of(config)
    assert judge.rubric == RubricSpec(
        name="harsh",
        source="file",
        text="Score 0-100; be harsh.\n- craft: +0 to +20",
        path=str(tmp_path.resolve() / "rubrics" / "harsh.md"),
    )
    # read once, at load: a later change of the file does not reach the loaded config
    rubric.write_text("changed", encoding="utf-8")
    assert judges_of(config)[0].rubric.text == "Score 0-100; be harsh.\n- craft: +0 to +20"


def test_rubric_file_path_expands_variables_and_accepts_a_bom(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "bom.md").write_bytes("\ufeffBe kind.".encode())
    config = load(
        tmp_path,
        scoring(judges=[{"id": "a", "rubric": {"file": "${RUBRICS}/bom.md"}}]),
        env={"RUBRICS": str(elsewhere)},
    )
    rubric = judges_of(config)[0].rubric
    assert (rubric.name, rubric.source, rubric.text) == ("bom", "file", "Be kind.")
    assert rubric.path == str(elsewhere / "bom.md")


def test_rubric_text_and_builtin_names_are_valid(tmp_path: Path) -> None:
    judges = [
        {"id": "t", "rubric": {"text": "  Reward bold colour.  "}},
        {"id": "s", "rubric": "strict"},
        {"id": "n", "rubric": "novelty_heavy"},
        {"id": "p", "rubric": "profile_fit"},
        {"id": "d", "rubric": "default"},
        {"id": "z", "rubric": None},
    ]
    rubrics = [j.rubric for j in judges_of(load(tmp_path, scoring(judges=judges)))]
    assert rubrics == [
        RubricSpec(name="custom", source="text", text="Reward bold colour."),
        RubricSpec(name="strict"),
        RubricSpec(name="novelty_heavy"),
        RubricSpec(name="profile_fit"),
        RubricSpec(name="default"),
        RubricSpec(name="default"),
    ]
    assert all(r.source == "builtin" and r.text is None for r in rubrics[1:])


def test_effective_judges_carry_rubric_weight_and_profile_with_defaults(tmp_path: Path) -> None:
    judges = [
        {"id": "plain"},
        {"id": "taste", "rubric": "profile_fit", "weight": 2.5, "profile": "dislikes_only"},
        {"id": "hinted", "weight": 0, "profile": "hints", "model": "own-m"},
    ]
    config = load(
        tmp_path, scoring(judges=judges, aggregation="weighted_median", judge_model="judge-m")
    )
    assert config.prompt.scoring.aggregation == "weighted_median"
    assert config.prompt.scoring.trim == 0
    assert judges_of(config) == (
        EffectiveJudge("plain", "judge-m", 0.0, RubricSpec(name="default"), 1.0, "raw"),
        EffectiveJudge(
            "taste", "judge-m", 0.0, RubricSpec(name="profile_fit"), 2.5, "dislikes_only"
        ),
        EffectiveJudge("hinted", "own-m", 0.0, RubricSpec(name="default"), 0.0, "hints"),
    )
    plain = judges_of(config)[0]
    assert (plain.rubric.name, plain.rubric.source, plain.weight, plain.profile) == (
        "default",
        "builtin",
        1.0,
        "raw",
    )


def test_the_one_default_judge_has_the_default_rubric_weight_and_profile(tmp_path: Path) -> None:
    (judge,) = judges_of(load(tmp_path))
    assert judge == EffectiveJudge("judge", "gpt-6-luna", 0.0)
    assert (judge.rubric, judge.weight, judge.profile) == (RubricSpec(name="default"), 1.0, "raw")
    scoring_config = load(tmp_path).prompt.scoring
    assert (scoring_config.aggregation, scoring_config.trim) == ("median", 0)
    assert scoring_config.normalise == "robust"


def test_panel_settings_can_be_set_from_the_command_line(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        None,
        "prompt.scoring.judges=[{id: a, rubric: strict, weight: 3}, {id: b}, {id: c}]",
        "prompt.scoring.aggregation=trimmed_mean",
        "prompt.scoring.min_ok_judges=3",
        "prompt.scoring.trim=1",
    )
    assert [(j.id, j.rubric.name, j.weight) for j in judges_of(config)] == [
        ("a", "strict", 3.0),
        ("b", "default", 1.0),
        ("c", "default", 1.0),
    ]
    error = config_error(tmp_path, None, "prompt.scoring.judges=[{id: a, rubric: strct}]")
    assert error.key == "prompt.scoring.judges[0].rubric"


@pytest.mark.parametrize(
    ("rubric", "expected"),
    [
        ("strct", "got 'strct', " + RUBRIC_MUST),
        ({"file": "rubrics/missing.md"}, "cannot read"),
    ],
)
def test_cli_rubric_error_exits_2_naming_the_key(
    rubric: object, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from image_project.cli.command import main
    from tests.faults.common import write_config

    config = write_config(
        tmp_path, prompt={"scoring": {"enabled": True, "judges": [{"id": "a", "rubric": rubric}]}}
    )
    code = main(["--config", str(config)], env={}, root=tmp_path)
    assert code == 2
    captured = capsys.readouterr()
    assert "configuration error: prompt.scoring.judges[0].rubric: " in captured.err
    assert expected in captured.err
    assert "Traceback" not in captured.err
    assert not (tmp_path / "out").exists()
