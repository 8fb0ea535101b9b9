"""Strict configuration: pydantic models, YAML loading, ``--set`` overrides.

Import from here; the package re-exports the public names of its two modules:

* :mod:`image_project.config.models`: the frozen pydantic models (:class:`AppConfig` and its
  sections), their validators, :data:`StrictBool`, :func:`parse_strict_bool` and the bounds
  every number and string is held to.
* :mod:`image_project.config.loading`: :func:`load_config` (file choice, YAML, the local
  overlay via :func:`deep_merge`, ``--set`` overrides) and the translation of every
  validation problem into ONE :class:`~image_project.errors.ConfigError` naming the full
  dotted key.

:mod:`image_project.config.capabilities` (imported by name, not re-exported here) holds the
table of what each known OpenAI model accepts and :func:`~image_project.config.capabilities.check_models`,
which the backend factory applies before any model call (``docs/models.md``).
:mod:`image_project.config.store_url` (likewise) holds what a ``store.url`` may be, and
:mod:`image_project.config.defaults` the built-in defaults (package data) and ``init``;
:mod:`image_project.config.dependencies` the keys that only matter while another key opens
them, which :func:`load_config` checks.

Each module's docstring states its part of the contract.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""

from image_project.config.loading import CONFIG_ENV_VAR, MAX_NESTING, deep_merge, load_config
from image_project.config.models import (
    BUILTIN_INJECTORS,
    BUILTIN_RUBRICS,
    CONTEXT_DATE_MAX,
    CONTEXT_DATE_MIN,
    DEFAULT_RUBRIC,
    HOLIDAY_KEYS,
    IMAGE_SIDE_MAX,
    IMAGE_SIDE_MIN,
    JUDGE_PROTOCOLS,
    MAX_JUDGES,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    MAX_RUBRIC_CHARS,
    MAX_RUN_SEED,
    MAX_URL_CHARS,
    Aggregation,
    AppConfig,
    BackendConfig,
    ContextConfig,
    ContextDate,
    EffectiveJudge,
    EvolutionConfig,
    Hemisphere,
    HolidayConfig,
    HolidayKey,
    ImageConfig,
    InjectionLocation,
    InjectorName,
    JudgeConfig,
    JudgeProtocol,
    Normalise,
    NoveltyConfig,
    ProfileView,
    PromptConfig,
    ReviewConfig,
    RubricSpec,
    RunConfig,
    ScoringConfig,
    SeasonConfig,
    StrictBool,
    SurvivorCategory,
    SurvivorQuota,
    UpscaleConfig,
    parse_strict_bool,
)

__all__ = [
    "BUILTIN_INJECTORS",
    "BUILTIN_RUBRICS",
    "CONFIG_ENV_VAR",
    "CONTEXT_DATE_MAX",
    "CONTEXT_DATE_MIN",
    "DEFAULT_RUBRIC",
    "HOLIDAY_KEYS",
    "IMAGE_SIDE_MAX",
    "IMAGE_SIDE_MIN",
    "JUDGE_PROTOCOLS",
    "MAX_JUDGES",
    "MAX_NAME_CHARS",
    "MAX_NESTING",
    "MAX_PATH_CHARS",
    "MAX_RUBRIC_CHARS",
    "MAX_RUN_SEED",
    "MAX_URL_CHARS",
    "Aggregation",
    "AppConfig",
    "BackendConfig",
    "ContextConfig",
    "ContextDate",
    "EffectiveJudge",
    "EvolutionConfig",
    "Hemisphere",
    "HolidayConfig",
    "HolidayKey",
    "ImageConfig",
    "InjectionLocation",
    "InjectorName",
    "JudgeConfig",
    "JudgeProtocol",
    "Normalise",
    "NoveltyConfig",
    "ProfileView",
    "PromptConfig",
    "ReviewConfig",
    "RubricSpec",
    "RunConfig",
    "ScoringConfig",
    "SeasonConfig",
    "StrictBool",
    "SurvivorCategory",
    "SurvivorQuota",
    "UpscaleConfig",
    "deep_merge",
    "load_config",
    "parse_strict_bool",
]
