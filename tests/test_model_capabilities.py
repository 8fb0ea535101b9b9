"""The model capability tables and the check that applies them to a configuration
(``image_project.config.capabilities``). The dates are fixed (``today=``), so the outcome does
not change as shutdown dates pass; the CLI-level tests are in ``tests/faults/test_bad_settings.py``.
"""

from __future__ import annotations

import logging
from datetime import date, timedelta
from typing import Any

import pytest

from image_project.config.capabilities import (
    IMAGE_MODELS,
    TEXT_MODELS,
    FlexibleSizes,
    ImageModel,
    TextModel,
    check_models,
    gives_no_logprobs,
    image_model,
    reasoning_effort_for,
    text_model,
)
from image_project.config.models import AppConfig
from image_project.errors import ConfigError

TODAY = date(2026, 11, 23)


def cfg(**sections: dict[str, Any]) -> AppConfig:
    return AppConfig.model_validate(sections)


def problem(config: AppConfig, **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        check_models(config, today=kwargs.pop("today", TODAY), **kwargs)
    return info.value


def scoring(**values: Any) -> dict[str, Any]:
    return {"scoring": {"enabled": True, **values}}


# --------------------------------------------------------------------------- the tables


def test_the_default_models_pass_and_the_text_model_honours_temperature_zero() -> None:
    defaults = AppConfig()
    assert check_models(defaults, today=TODAY) == ()
    entry = text_model(defaults.backend.text_model)
    assert entry is not None and entry.temperature in ("any", "reasoning_none")
    # Not scheduled to shut down within six months of the day the table was made.
    assert entry.shutdown is None or entry.shutdown > TODAY + timedelta(days=183)
    image = image_model(defaults.image.model)
    assert image is not None and image.shutdown is None
    assert defaults.image.quality in (image.qualities or ())


def test_table_entries_are_keyed_by_their_names_and_only_retiring_models_name_a_replacement() -> (
    None
):
    for name, text in TEXT_MODELS.items():
        assert text.name == name
        assert text.replacement is None or text.shutdown is not None, name
    for name, image in IMAGE_MODELS.items():
        assert image.name == name
        assert image.shutdown is None or image.replacement, name
        if isinstance(image.sizes, tuple):
            assert all(s == "auto" or s.count("x") == 1 for s in image.sizes)


def test_a_dated_snapshot_is_looked_up_by_its_base_name_and_unknown_models_are_none() -> None:
    assert text_model("gpt-4.1-mini-2025-04-14") == TEXT_MODELS["gpt-4.1-mini"]
    assert text_model("gpt-4o-2024-05-13") == TEXT_MODELS["gpt-4o-2024-05-13"]  # its own entry
    assert image_model("gpt-image-2.5-flare-2026-09-08") == IMAGE_MODELS["gpt-image-2.5-flare"]
    assert text_model("llama3.1") is None and image_model("sdxl-turbo") is None
    assert text_model("gpt-6-luna-mini") is None  # not a snapshot suffix


def test_reasoning_effort_none_only_for_models_that_need_it() -> None:
    assert reasoning_effort_for("gpt-6-luna") == "none"
    assert reasoning_effort_for("gpt-5.4") == "none"
    assert reasoning_effort_for("gpt-4.1-mini") is None
    assert reasoning_effort_for("o3") is None
    assert reasoning_effort_for("llama3.1") is None


@pytest.mark.parametrize(
    ("size", "why"),
    [
        ("1000x1000", "not a multiple of 16 (try '992x992')"),
        ("3904x1600", "long side 3904 is above the maximum 3840"),
        ("3072x768", "4.00:1, more than 3:1"),
        ("3840x2400", "9,216,000 pixels, above the maximum 8,294,400"),
        ("512x512", "262,144 pixels, below the minimum 655,360"),
    ],
)
def test_flexible_size_rule_names_the_broken_rule(size: str, why: str) -> None:
    width, height = (int(side) for side in size.split("x"))
    reason = FlexibleSizes().problem(width, height)
    assert reason is not None and why in reason


@pytest.mark.parametrize("size", ["1024x640", "1536x1024", "1024x1536", "3840x2160", "2880x2880"])
def test_flexible_size_rule_accepts_valid_sizes(size: str) -> None:
    width, height = (int(side) for side in size.split("x"))
    assert FlexibleSizes().problem(width, height) is None


# --------------------------------------------------------------------------- image settings


@pytest.mark.parametrize(
    ("image", "key", "expected"),
    [
        (
            {"size": "1000x1000"},
            "image.size",
            "each side a multiple of 16 and at most 3840",
        ),
        ({"size": "3072x768"}, "image.size", "the long side at most 3 times the short one"),
        ({"size": "3904x1600"}, "image.size", "above the maximum 3840"),
        ({"size": "3840x2400"}, "image.size", "655,360..8,294,400 pixels in all"),
        ({"size": "256x256"}, "image.size", "below the minimum 655,360"),
        (
            {"model": "gpt-image-2", "quality": "max"},
            "image.quality",
            "must be one of 'low', 'medium', 'high', 'auto' (the qualities gpt-image-2 offers)",
        ),
        (
            {"model": "gpt-image-1.5", "size": "1024x1792"},
            "image.size",
            "must be one of '1024x1024', '1536x1024', '1024x1536', 'auto'",
        ),
        (
            {"model": "gpt-image-1"},
            "image.model",
            "OpenAI shut down on 2026-10-23; OpenAI recommends gpt-image-2.6-sunburst",
        ),
        ({"model": "dall-e-3"}, "image.model", "shut down on 2026-05-12"),
    ],
)
def test_bad_image_settings_name_the_key_and_the_allowed_values(
    image: dict[str, str], key: str, expected: str
) -> None:
    error = problem(cfg(image=image))
    assert error.key == key
    assert expected in error.message
    assert error.message.startswith("got ")


def test_every_image_problem_is_listed_in_one_error() -> None:
    error = problem(cfg(image={"model": "gpt-image-2", "size": "1000x1000", "quality": "max"}))
    assert error.key == "image.size"
    assert "1 more problem(s)" in error.message and "image.quality: got 'max'" in error.message


def test_an_image_model_the_table_does_not_know_is_not_checked() -> None:
    config = cfg(image={"model": "local-diffusion", "size": "100x300", "quality": "max"})
    assert check_models(config, today=TODAY) == ()


def test_an_image_model_shutting_down_later_warns_and_is_still_checked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = cfg(image={"model": "gpt-image-1.5", "size": "1024x1024", "quality": "low"})
    with caplog.at_level(logging.WARNING, logger="image_project.config"):
        warnings = check_models(config, today=TODAY)
    assert warnings == (
        "image.model: 'gpt-image-1.5' is scheduled to shut down on 2026-12-01 (in 8 days); "
        "OpenAI recommends gpt-image-2.6-sunburst or gpt-image-2.6-flare",
    )
    assert "MODEL SHUTDOWN AHEAD" in caplog.text
    # On the day itself it is shut down.
    assert problem(config, today=date(2026, 12, 1)).key == "image.model"


# --------------------------------------------------------------------------- text models, judges


def test_a_judge_at_temperature_zero_on_a_model_that_cannot_honour_it_fails_with_the_reason() -> (
    None
):
    judges = [{"id": "warm"}, {"id": "strict", "model": "gpt-6.1-sol", "temperature": 0}]
    error = problem(cfg(prompt=scoring(judges=judges)))
    assert error.key == "prompt.scoring.judges[1].model"
    assert "cannot honour temperature 0 for judge 'strict'" in error.message
    assert "runs only at its default temperature, 1" in error.message
    assert "gpt-6-luna" in error.message


def test_the_judge_model_key_is_named_when_the_judges_inherit_it() -> None:
    error = problem(cfg(prompt=scoring(judge_model="gpt-6-astra")))
    assert error.key == "prompt.scoring.judge_model"
    assert "judge 'judge'" in error.message


def test_a_judge_at_the_default_temperature_one_may_use_such_a_model() -> None:
    judges = [{"id": "a", "model": "gpt-6.1-sol", "temperature": 1}]
    assert check_models(cfg(prompt=scoring(judges=judges)), today=TODAY) == ()


def test_judges_are_not_checked_while_scoring_is_off() -> None:
    config = cfg(prompt={"scoring": {"judge_model": "gpt-6.1-sol"}})
    assert check_models(config, today=TODAY) == ()


def test_a_text_model_that_cannot_honour_temperature_fails_for_the_prompt_steps() -> None:
    error = problem(cfg(backend={"text_model": "gpt-6.1-sol"}))
    assert error.key == "backend.text_model"
    assert "prompt.text_temperature" in error.message


def test_a_shut_down_text_model_is_an_error_naming_the_replacement() -> None:
    error = problem(cfg(backend={"text_model": "o3"}), today=date(2026, 12, 11))
    assert error.key == "backend.text_model"
    assert "shut down on 2026-12-11; OpenAI recommends gpt-6.1-sol" in error.message
    # Before its shutdown it still fails: o3 cannot honour the pipeline's temperatures.
    assert "cannot honour" in problem(cfg(backend={"text_model": "o3"})).message


def test_the_old_default_text_model_warns_about_its_shutdown() -> None:
    warnings = check_models(cfg(backend={"text_model": "gpt-4.1-mini-2025-04-14"}), today=TODAY)
    assert warnings == (
        "backend.text_model: 'gpt-4.1-mini-2025-04-14' is scheduled to shut down on 2027-01-14 "
        "(in 52 days); OpenAI recommends gpt-6-luna",
    )


def test_unknown_text_and_judge_models_are_not_blocked() -> None:
    judges = [{"id": "a", "model": "llama3.1", "temperature": 0}]
    config = cfg(backend={"text_model": "qwen3"}, prompt=scoring(judges=judges))
    assert check_models(config, today=TODAY) == ()


def test_structured_outputs_and_seed_columns_are_checked() -> None:
    table = {
        "no-schema": TextModel("no-schema", "any", structured_outputs=False),
        "no-seed": TextModel("no-seed", "any", seed=False),
    }
    error = problem(cfg(backend={"text_model": "no-schema"}), text_models=table)
    assert error.key == "backend.structured_outputs"
    assert "set backend.structured_outputs: false" in error.message
    relaxed = cfg(backend={"text_model": "no-schema", "structured_outputs": False})
    assert check_models(relaxed, today=TODAY, text_models=table) == ()
    error = problem(cfg(backend={"text_model": "no-seed"}), text_models=table)
    assert (error.key, "rejects the seed" in error.message) == ("backend.text_model", True)


def test_a_custom_image_table_is_used() -> None:
    table = {"tiny": ImageModel("tiny", ("64x64",), ("low",))}
    error = problem(cfg(image={"model": "tiny", "size": "128x128"}), image_models=table)
    assert (error.key, error.message) == (
        "image.size",
        "got '128x128', must be one of '64x64' (the sizes tiny accepts)\n"
        "  (1 more problem(s)):\n"
        "  image.quality: got 'high', must be one of 'low' (the qualities tiny offers)",
    )


def test_the_llm_selector_model_is_checked_like_the_judges() -> None:
    evolution = {"enabled": True, "selector": "llm", "selector_model": "gpt-4-turbo"}
    error = problem(cfg(prompt=scoring(evolution=evolution)))
    assert error.key == "prompt.scoring.evolution.selector_model"
    assert "shut down on 2026-10-23" in error.message
    # Without its own model the selector runs on judge_model (checked under that key), and
    # with the code selector no selector model is called at all.
    inherited = scoring(judge_model="gpt-4-turbo", evolution={"enabled": True, "selector": "llm"})
    assert "prompt.scoring.judge_model" in problem(cfg(prompt=inherited)).key
    code = {"enabled": True, "selector": "code", "selector_model": "gpt-4-turbo"}
    assert check_models(cfg(prompt=scoring(evolution=code)), today=TODAY) == ()


def test_reasoning_model_families_give_no_logprobs_by_name_or_table() -> None:
    for name in ("o1", "o3-mini", "o4-mini-2025-04-16", "gpt-5", "gpt-5.4", "o3-pro-new"):
        assert gives_no_logprobs(name) is not None, name
    assert gives_no_logprobs("gpt-6.1-sol") is not None  # runs only at temperature 1
    for name in ("gpt-4.1-mini", "gpt-6-luna", "qwen2.5-coder-0.5b-instruct", "o10", "gpt-50"):
        assert gives_no_logprobs(name) is None, name
    table = {"says-no": TextModel("says-no", "any", logprobs=False)}
    assert gives_no_logprobs("says-no", table) == "the model returns no token log-probabilities"


def test_a_logprobs_judge_on_a_reasoning_model_is_refused_naming_the_judge_and_model() -> None:
    judges: list[dict[str, Any]] = [
        {"id": "warm"},
        {"id": "strict", "model": "o4-mini", "protocol": "logprobs"},
    ]
    error = problem(cfg(prompt=scoring(judges=judges)), today=date(2026, 1, 1))
    assert error.key == "prompt.scoring.judges[1].protocol"
    assert "judge 'strict'" in error.message and "'o4-mini'" in error.message
    assert "reasoning model" in error.message and "pairwise" in error.message
    # The same judge under another protocol is only checked for its temperature.
    judges[1] = {"id": "strict", "model": "o4-mini", "temperature": 1, "protocol": "pairwise"}
    warnings = check_models(cfg(prompt=scoring(judges=judges)), today=date(2026, 1, 1))
    assert all("scheduled to shut down" in w for w in warnings)
    # The panel default names its own key; a model no table knows is checked by its family.
    error = problem(
        cfg(
            prompt=scoring(
                judge_protocol="logprobs", judge_model="gpt-5.9-new", judge_temperature=1
            )
        )
    )
    assert error.key == "prompt.scoring.judge_protocol" and "'gpt-5.9-new'" in error.message


def test_a_logprobs_judge_on_a_backend_that_gives_none_is_refused() -> None:
    judges = [{"id": "strict", "model": "qwen2.5", "protocol": "logprobs"}]
    config = cfg(backend={"logprobs": False}, prompt=scoring(judges=judges))
    error = problem(config)
    assert error.key == "prompt.scoring.judges[0].protocol"
    assert "backend.logprobs: false" in error.message and "'qwen2.5'" in error.message
    assert check_models(cfg(prompt=scoring(judges=judges)), today=TODAY) == ()
