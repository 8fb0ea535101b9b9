"""The configuration schema: frozen pydantic models, their field validators and bounds.

Contract:

* Every key has a default; ``config/config.yaml`` documents them all. Unknown keys are
  forbidden, and a missing sub-section is validated from ``{}`` so that its defaults pass the
  same validators as explicit values.
* Booleans are strict (:func:`parse_strict_bool`, :data:`StrictBool`): ``"false"`` is false,
  ``"maybe"`` is an error (the loader keeps YAML 1.1's ``on`` / ``off`` as strings, so they
  are errors too). Numbers never accept booleans or strings (``"4"``), and ints never
  accept floats (``4.0``).
* Relative paths resolve against the validation context's ``root`` after ``~`` and ``$VAR``
  expansion (``env`` in the context, else ``os.environ``). Existence is not checked here:
  files are the business of the code that opens them.
* Every number and string is bounded (counts, seconds, the seed, image sides, name and path
  lengths), so an absurd value fails here, naming the key and the allowed range, instead of
  at run time after model calls.

Validating a model directly raises pydantic's ``ValidationError``; this module's validators
raise ``_Invalid`` / ``_KeyedInvalid`` inside it, and
:func:`~image_project.config.loading.load_config` turns it into one :class:`ConfigError` with
the full dotted key. :func:`parse_strict_bool` raises :class:`ConfigError` itself.

Why one module of over 600 lines: it is one schema, one model per section of the YAML file,
and the sections refer to each other (the scoring section's judges, rubrics and evolution,
the app config's cross-section checks); the bounds, validators and the fallbacks each key
resolves to (``effective_*``) are read together when a key is added or changed.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    model_validator,
)

from image_project.config.store_url import check_store_url, default_store_url, redact_url
from image_project.errors import ConfigError, short_repr

__all__ = [
    "BUILTIN_INJECTORS",
    "BUILTIN_RUBRICS",
    "CONTEXT_DATE_MAX",
    "CONTEXT_DATE_MIN",
    "DEFAULT_RUBRIC",
    "HOLIDAY_KEYS",
    "IMAGE_SIDE_MAX",
    "IMAGE_SIDE_MIN",
    "MAX_JUDGES",
    "MAX_NAME_CHARS",
    "MAX_PATH_CHARS",
    "MAX_RUBRIC_CHARS",
    "MAX_RUN_SEED",
    "MAX_URL_CHARS",
    "UPSCALE_SIDE_MAX",
    "UPSCALE_SIDE_MIN",
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
    "NoveltyConfig",
    "ProfileView",
    "PromptConfig",
    "RubricSpec",
    "RunConfig",
    "ScoringConfig",
    "SeasonConfig",
    "StoreConfig",
    "StrictBool",
    "SurvivorCategory",
    "SurvivorQuota",
    "UpscaleConfig",
    "parse_strict_bool",
]

_TRUE_WORDS = frozenset({"true", "yes", "1"})
_FALSE_WORDS = frozenset({"false", "no", "0"})
_BOOL_ALLOWED = "true or false (also yes/no, 1/0)"

MAX_NAME_CHARS = 200
"""Longest model name, environment variable name or judge id."""
MAX_URL_CHARS = 2048
MAX_PATH_CHARS = 4096
"""Longest path (Linux's PATH_MAX)."""
MAX_RUN_SEED = 2**63 - 1
"""Largest ``prompt.random_seed``: a run seed is recorded in the transcript and the CSVs and
fed to :func:`~image_project.seeding.derive_seed`; it must stay a 64-bit int everywhere."""
IMAGE_SIDE_MIN, IMAGE_SIDE_MAX = 16, 4096
"""Pixels per side of ``image.size`` (the range the offline image backend renders)."""

_show = short_repr


# --------------------------------------------------------------------------- validators


class _Invalid(ValueError):
    """Raised by our field validators; the error translator turns it into a message.

    ``must`` replaces the allowed-values text derived from the field; ``note`` is appended;
    ``redact`` hides the input (for keys where a user may paste a secret); ``shown`` is then
    what the message shows instead (a URL without its password, say).
    """

    def __init__(
        self,
        must: str | None = None,
        *,
        note: str = "",
        redact: bool = False,
        shown: str | None = None,
    ):
        super().__init__(must or note or "invalid value")
        self.must = must
        self.note = note
        self.redact = redact
        self.shown = shown


class _KeyedInvalid(ValueError):
    """Raised by model validators: ``subkey`` is appended to the model's path."""

    def __init__(self, subkey: str, message: str) -> None:
        super().__init__(message)
        self.subkey = subkey
        self.message = message


def _bool_or_none(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def parse_strict_bool(value: object, key: str) -> bool:
    """``True``/``False``, ints 0/1, or the words true/false/yes/no/1/0 (any case, trimmed).

    Anything else (``None``, ``2``, ``1.0``, ``"maybe"``) raises :class:`ConfigError` for ``key``.
    """
    result = _bool_or_none(value)
    if result is None:
        raise ConfigError(key, f"got {_show(value)}, must be {_BOOL_ALLOWED}")
    return result


def _validate_strict_bool(value: object) -> bool:
    result = _bool_or_none(value)
    if result is None:
        raise _Invalid()
    return result


_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _reject_bool(value: object) -> object:
    """A number key takes a number: never a boolean, never a string (``"2"``, quoted in the
    YAML or in ``--set 'run.runs="2"'``), which is refused like a float for an int."""
    if isinstance(value, bool):
        raise _Invalid(note="a boolean is not a number")
    if isinstance(value, str):
        bare = value.strip()
        number = _NUMBER.fullmatch(bare) is not None and len(bare) <= 40
        raise _Invalid(
            note="a string is not a number" + (f"; write {bare} without quotes" if number else "")
        )
    return value


def _reject_bool_or_float(value: object) -> object:
    """An int key takes an int, never a float: ``4.0`` is refused like ``4.5`` instead of
    being silently truncated; nor a string (``"4"``)."""
    if isinstance(value, float):
        whole = f"; write {int(value)}" if value.is_integer() and abs(value) < 1e15 else ""
        raise _Invalid(note=f"a float is not an int{whole}")
    return _reject_bool(value)


def _non_blank(value: str) -> str:
    if not value.strip():
        raise _Invalid(f"a non-empty string of at most {MAX_NAME_CHARS} characters")
    if len(value) > MAX_NAME_CHARS:
        raise _Invalid(
            f"a non-empty string of at most {MAX_NAME_CHARS} characters (got {len(value)})"
        )
    return value


def _check_base_url(value: str | None) -> str | None:
    if value is None:
        return value
    if not value.startswith(("http://", "https://")) or len(value) > MAX_URL_CHARS:
        raise _Invalid(
            f"a URL starting with http:// or https:// of at most {MAX_URL_CHARS} characters, "
            "or null"
        )
    return value


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise _Invalid(
            "the NAME of an environment variable (like OPENAI_API_KEY), never the key itself",
            redact=True,
        )
    return value


_JUDGE_ID = re.compile(r"[A-Za-z0-9_.-]+")


def _check_judge_id(value: str) -> str:
    if not _JUDGE_ID.fullmatch(value) or len(value) > MAX_NAME_CHARS:
        raise _Invalid(
            f"a non-empty string of at most {MAX_NAME_CHARS} letters, digits, '_', '.' or '-'"
        )
    return value


_SIZE = re.compile(r"([1-9][0-9]{0,5})x([1-9][0-9]{0,5})")


def _check_size(value: str) -> str:
    if value == "auto":
        return value
    match = _SIZE.fullmatch(value)
    sides = (int(match.group(1)), int(match.group(2))) if match else ()
    if not sides or not all(IMAGE_SIDE_MIN <= side <= IMAGE_SIDE_MAX for side in sides):
        raise _Invalid(
            f"'WxH' with {IMAGE_SIDE_MIN}..{IMAGE_SIDE_MAX} pixels per side "
            "(like '1536x1024') or 'auto'"
        )
    return value


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _non_empty_path(value: object) -> object:
    if isinstance(value, str) and (not value.strip() or len(value) > MAX_PATH_CHARS):
        raise _Invalid(f"a non-empty path of at most {MAX_PATH_CHARS} characters")
    return value


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """Expand ``~`` and ``$VAR``/``${VAR}``, then anchor a relative path at the context root.

    ``info.context`` may carry ``root`` (a Path) and ``env`` (a mapping); without a context
    (a model built in code) ``os.environ`` is used and relative paths stay relative.
    """
    context = info.context if isinstance(info.context, Mapping) else {}
    env: Mapping[str, str] = context.get("env", os.environ)
    root: Path | None = context.get("root")
    text = str(value)

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in env:
            raise _Invalid(f"a path whose variables are set (${name} is not set)")
        return env[name]

    try:
        path = Path(_VAR.sub(substitute, text)).expanduser()
    except RuntimeError as exc:  # "~someone" where someone has no home directory
        raise _Invalid(f"a path whose '~' can be expanded ({exc})") from None
    if len(str(path)) > MAX_PATH_CHARS:
        raise _Invalid(f"a path of at most {MAX_PATH_CHARS} characters once expanded")
    if root is not None and not path.is_absolute():
        path = root / path
    return path


StrictBool = Annotated[bool, BeforeValidator(_validate_strict_bool)]
"""A bool that accepts only what :func:`parse_strict_bool` accepts."""

_Int = Annotated[int, BeforeValidator(_reject_bool_or_float)]
_Float = Annotated[float, BeforeValidator(_reject_bool)]
_Text = Annotated[str, AfterValidator(_non_blank)]
_ConfigPath = Annotated[Path, BeforeValidator(_non_empty_path), AfterValidator(_resolve_path)]


# --------------------------------------------------------------------------- models


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


class _Section(BaseModel):
    """Base of every config model: frozen, unknown keys forbidden, defaults validated.

    A missing sub-section is filled with ``{}`` before validation so that its defaults go
    through the same validators (path resolution in particular) as explicit values.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_default=True, allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_sections(cls, data: Any) -> Any:
        if isinstance(data, dict):
            missing: dict[str, dict[str, Any]] = {
                name: {}
                for name, field in cls.model_fields.items()
                if name not in data and _is_model(field.annotation)
            }
            if missing:
                data = {**data, **missing}
        return data


class BackendConfig(_Section):
    """Which model service to talk to and how hard to try."""

    provider: Literal["auto", "openai", "offline"] = "auto"
    base_url: Annotated[str | None, AfterValidator(_check_base_url)] = None
    api_key_env: Annotated[_Text, AfterValidator(_check_env_name)] = "OPENAI_API_KEY"
    text_model: _Text = "gpt-6-luna"
    max_concurrency: _Int = Field(default=8, ge=1, le=256)
    timeout_s: _Float = Field(default=120.0, gt=0.0, le=3600.0)
    max_attempts: _Int = Field(default=4, ge=1, le=20)
    backoff_initial_s: _Float = Field(default=1.0, ge=0.0, le=300.0)
    backoff_max_s: _Float = Field(default=30.0, ge=0.0, le=3600.0)
    max_retry_wait_s: _Float = Field(default=60.0, ge=0.0, le=3600.0)
    structured_outputs: StrictBool = True

    @model_validator(mode="after")
    def _check_backoff(self) -> Self:
        if self.backoff_max_s < self.backoff_initial_s:
            raise _KeyedInvalid(
                "backoff_max_s",
                f"got {_show(self.backoff_max_s)}, must be >= backoff_initial_s "
                f"({_show(self.backoff_initial_s)})",
            )
        return self


class RunConfig(_Section):
    mode: Literal["full", "prompt_only"] = "full"
    concurrency: Literal["concurrent", "sequential"] = "concurrent"
    runs: _Int = Field(default=1, ge=1, le=1000)


class NoveltyConfig(_Section):
    enabled: StrictBool = True
    window: _Int = Field(default=25, ge=0, le=10000)


BUILTIN_RUBRICS: tuple[str, ...] = ("default", "strict", "novelty_heavy", "profile_fit")
"""The built-in judge rubrics (their texts: ``image_project.stages.scoring.rubrics``)."""
ProfileView = Literal["raw", "dislikes_only", "hints"]
Aggregation = Literal["median", "weighted_median", "mean", "trimmed_mean"]
MAX_RUBRIC_CHARS = 20_000


class RubricSpec(BaseModel):
    """A judge's rubric: a built-in one by ``name`` (``text`` None), or a custom one whose
    ``text`` came from the config (``source: text``) or from a file read when the config was
    loaded (``source: file``, ``path`` absolute)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    source: Literal["builtin", "text", "file"] = "builtin"
    text: str | None = None
    path: str | None = None

    @property
    def label(self) -> str:
        """How records and the summary name the rubric: a built-in's name, ``custom`` for an
        inline text, ``file:<stem>`` for a file (so ``strict.md`` is not taken for the
        built-in ``strict``)."""
        return self.name if self.source != "file" else f"file:{self.name}"


DEFAULT_RUBRIC = RubricSpec(name="default")
"""The rubric of a judge that names none: the original judging instruction."""

_RUBRIC_MUST = (
    f"one of {', '.join(repr(n) for n in BUILTIN_RUBRICS)}, or a mapping with one key: "
    "text (the rubric itself) or file (a UTF-8 file holding it)"
)


def _rubric_text(text: object, what: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise _Invalid(_RUBRIC_MUST, note=f"{what} is empty")
    if len(text) > MAX_RUBRIC_CHARS:
        raise _Invalid(
            _RUBRIC_MUST, note=f"{what} has {len(text)} characters, at most {MAX_RUBRIC_CHARS}"
        )
    return text.strip()


def _read_rubric_file(value: object, info: ValidationInfo) -> RubricSpec:
    raw = _non_empty_path(value)
    if not isinstance(raw, str):
        raise _Invalid(_RUBRIC_MUST, note="file must be a path")
    path = _resolve_path(Path(raw), info)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _Invalid(
            _RUBRIC_MUST, note=f"cannot read {path}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _Invalid(_RUBRIC_MUST, note=f"{path} is not UTF-8 text") from None
    return RubricSpec(
        name=path.stem, source="file", text=_rubric_text(text, str(path)), path=str(path)
    )


def _parse_rubric(value: object, info: ValidationInfo) -> object:
    """A rubric name or ``{text: ...}`` / ``{file: ...}``, checked (the file read) now, at
    load, so that a missing or empty rubric fails before any model call."""
    if value is None or isinstance(value, RubricSpec):
        return value
    if isinstance(value, str):
        if value not in BUILTIN_RUBRICS:
            close = difflib.get_close_matches(value, BUILTIN_RUBRICS, n=1, cutoff=0.6)
            note = f"did you mean {close[0]!r}?" if close else ""
            raise _Invalid(_RUBRIC_MUST, note=note)
        return RubricSpec(name=value)
    if isinstance(value, Mapping) and len(value) == 1:
        ((key, content),) = value.items()
        if key == "text":
            return RubricSpec(name="custom", source="text", text=_rubric_text(content, "text"))
        if key == "file":
            return _read_rubric_file(content, info)
    raise _Invalid(_RUBRIC_MUST)


class JudgeConfig(_Section):
    """One judge of the ensemble; ``None`` fields fall back to the scoring defaults.

    ``rubric`` is what the judge scores by (default: ``default``, the original judging
    instruction); ``weight`` its weight in the weighted aggregations; ``profile`` which view
    of the person's profile it is shown: ``raw`` (the whole rendered profile), ``dislikes_only``
    or ``hints`` (the generator-safe hints)."""

    id: Annotated[str, AfterValidator(_check_judge_id)]
    model: _Text | None = None
    temperature: _Float | None = Field(default=None, ge=0.0, le=2.0)
    rubric: Annotated[RubricSpec | None, BeforeValidator(_parse_rubric)] = None
    weight: _Float = Field(default=1.0, ge=0.0, le=1000.0)
    profile: ProfileView = "raw"


MAX_JUDGES = 16


def _check_judge_count(value: object) -> object:
    if isinstance(value, (list, tuple)) and not 1 <= len(value) <= MAX_JUDGES:
        raise _Invalid(
            f"a list of 1..{MAX_JUDGES} judges, or null for one judge built from the defaults"
        )
    return value


@dataclass(frozen=True)
class EffectiveJudge:
    """A judge with every fallback applied: what the scoring stage actually runs."""

    id: str
    model: str
    temperature: float
    rubric: RubricSpec = DEFAULT_RUBRIC
    weight: float = 1.0
    profile: ProfileView = "raw"


SurvivorCategory = Literal["performance", "diversity", "potential"]
_CATEGORIES: tuple[SurvivorCategory, ...] = ("performance", "diversity", "potential")


class SurvivorQuota(_Section):
    """How many survivors of a round each category may take. Survivors are dealt one per
    category in the order performance, diversity, potential while the category still has
    quota, round after round; survivors beyond the whole quota are ``performance``. The
    default (one each) gives 1: performance; 2: + diversity; 3: + potential; 4: + performance."""

    performance: _Int = Field(default=1, ge=0, le=50)
    diversity: _Int = Field(default=1, ge=0, le=50)
    potential: _Int = Field(default=1, ge=0, le=50)

    def categories(self, survivors: int) -> tuple[SurvivorCategory, ...]:
        """The category of each of ``survivors`` survivors, in the order they are chosen."""
        left = {c: getattr(self, c) for c in _CATEGORIES}
        out: list[SurvivorCategory] = []
        while len(out) < survivors and any(left.values()):
            for category in _CATEGORIES:
                if left[category] and len(out) < survivors:
                    out.append(category)
                    left[category] -= 1
        out += ["performance"] * (survivors - len(out))
        return tuple(out)


class EvolutionConfig(_Section):
    """Multi-round selection (``prompt.scoring.evolution``; docs/scoring.md "Rounds").

    Round 0 is the ordinary card set and judge panel; each of ``generations`` later rounds
    breeds ``variants_per_survivor`` variants of each of the previous round's ``survivors``
    and judges them (beside their parents when ``keep_parents``). ``selector`` chooses the
    survivors in code (seeded, deterministic) or lets one model call propose them
    (validated; an invalid proposal is replaced by the code choice, loudly).
    ``near_duplicate_distance``: a variant whose token-set Jaccard distance to a candidate
    already in its round is below this is dropped before judging."""

    enabled: StrictBool = False
    generations: _Int = Field(default=2, ge=1, le=10)
    survivors: _Int = Field(default=3, ge=1, le=26)
    variants_per_survivor: _Int = Field(default=2, ge=1, le=10)
    keep_parents: StrictBool = True
    quota: SurvivorQuota = Field(default_factory=SurvivorQuota)
    selector: Literal["code", "llm"] = "code"
    selector_model: _Text | None = None
    near_duplicate_distance: _Float = Field(default=0.2, ge=0.0, le=1.0)


class ScoringConfig(_Section):
    """Black-box scoring (SPEC "Black-box scoring")."""

    enabled: StrictBool = False
    num_ideas: _Int = Field(default=6, ge=2, le=52)
    exploration_rate: _Float = Field(default=0.15, ge=0.0, le=0.5)
    judge_temperature: _Float = Field(default=0.0, ge=0.0, le=2.0)
    judge_model: _Text | None = None
    generator_temperature: _Float = Field(default=0.9, ge=0.0, le=2.0)
    generator_profile_abstraction: StrictBool = True
    max_reasks: _Int = Field(default=1, ge=0, le=5)
    judges: Annotated[tuple[JudgeConfig, ...] | None, BeforeValidator(_check_judge_count)] = None
    min_ok_judges: _Int | None = Field(default=None, ge=1, le=MAX_JUDGES)
    aggregation: Aggregation = "median"
    trim: _Int = Field(default=0, ge=0, le=MAX_JUDGES)
    novelty: NoveltyConfig = Field(default_factory=NoveltyConfig)
    evolution: EvolutionConfig = Field(default_factory=EvolutionConfig)

    @model_validator(mode="after")
    def _check_evolution(self) -> Self:
        """Survivors must be choosable from round 0's cards (later rounds have at least as
        many candidates unless variants are dropped as near-duplicates)."""
        evolution = self.evolution
        if evolution.enabled and evolution.survivors > self.num_ideas:
            raise _KeyedInvalid(
                "evolution.survivors",
                f"got {evolution.survivors}, must be <= num_ideas ({self.num_ideas}), the "
                "candidates of round 0",
            )
        return self

    @model_validator(mode="after")
    def _check_judges(self) -> Self:
        seen: dict[str, int] = {}
        for index, judge in enumerate(self.judges or ()):
            if judge.id in seen:
                raise _KeyedInvalid(
                    f"judges[{index}].id",
                    f"got {judge.id!r}, must be unique (judges[{seen[judge.id]}] has it too)",
                )
            seen[judge.id] = index
        count = self.judge_count
        if self.min_ok_judges is not None and self.min_ok_judges > count:
            raise _KeyedInvalid(
                "min_ok_judges",
                f"got {self.min_ok_judges}, must be an int in 1..{count} "
                f"(the number of judges) or null",
            )
        self._check_panel()
        return self

    def _check_panel(self) -> None:
        """Trim, weights and profile views that no run could honour fail now."""
        if self.trim and self.aggregation != "trimmed_mean":
            raise _KeyedInvalid(
                "trim",
                f"got {self.trim}, must be 0 unless aggregation is 'trimmed_mean' "
                f"(aggregation is {self.aggregation!r})",
            )
        quorum = self.effective_min_ok_judges
        if 2 * self.trim >= quorum:
            raise _KeyedInvalid(
                "trim",
                f"got {self.trim}, too large for the panel: 2*trim must be < min_ok_judges "
                f"({quorum}, the fewest ok judges a run goes on with), so that every card "
                "keeps a score after trimming",
            )
        judges = self.judges or ()
        zero = sum(1 for j in judges if j.weight == 0)
        kept = quorum - 2 * self.trim  # the fewest scores a card can be aggregated from
        if self.aggregation != "median" and zero and zero >= kept:
            raise _KeyedInvalid(
                "judges",
                f"{zero} judge(s) have weight 0, so the {kept} score(s) a card can be left "
                f"with (min_ok_judges {quorum}"
                + (f", trim {self.trim}" if self.trim else "")
                + f") could all weigh 0 and aggregation {self.aggregation!r} would have no "
                "weighted score; give fewer judges weight 0 or raise min_ok_judges",
            )
        for index, judge in enumerate(judges):
            if judge.profile == "hints" and not self.generator_profile_abstraction:
                raise _KeyedInvalid(
                    f"judges[{index}].profile",
                    "got 'hints', which needs generator_profile_abstraction: true (the hints "
                    "are made by the profile abstraction step)",
                )

    @property
    def judge_count(self) -> int:
        """How many judges run: ``len(judges)``, or 1 when ``judges`` is omitted."""
        return len(self.judges) if self.judges is not None else 1

    @property
    def effective_min_ok_judges(self) -> int:
        """``min_ok_judges``, or a majority of the ensemble (``len // 2 + 1``) when null."""
        if self.min_ok_judges is not None:
            return self.min_ok_judges
        return self.judge_count // 2 + 1

    def effective_judges(self, text_model: str) -> tuple[EffectiveJudge, ...]:
        """Each judge's model (own, else ``judge_model``, else ``text_model``: the text model
        of the backend the run actually uses) and temperature. The app calls this once per
        run; everything else (log, transcript, summary) reads its result.

        With ``judges`` omitted, one judge ``"judge"`` built from the defaults.
        """
        default_model = self.judge_model or text_model
        if self.judges is None:
            return (EffectiveJudge("judge", default_model, self.judge_temperature),)
        return tuple(
            EffectiveJudge(
                judge.id,
                judge.model or default_model,
                temperature,
                judge.rubric or DEFAULT_RUBRIC,
                judge.weight,
                judge.profile,
            )
            for judge, (_, _, temperature) in zip(self.judges, self._judge_settings(), strict=True)
        )

    def effective_selector_model(self, text_model: str) -> str:
        """The LLM survivor selector's model: ``evolution.selector_model``, else
        ``judge_model``, else ``text_model`` (the backend's). Resolved once per run, like the
        judges'; the pre-flight check, the step and the record read it."""
        return self.evolution.selector_model or self.judge_model or text_model

    def judge_temperatures(self) -> tuple[tuple[str, float], ...]:
        """``(judge id, temperature)`` per judge, every fallback applied (no model needed)."""
        return tuple((judge_id, t) for judge_id, _, t in self._judge_settings())

    def _judge_settings(self) -> tuple[tuple[str, str | None, float], ...]:
        if self.judges is None:
            return (("judge", None, self.judge_temperature),)
        return tuple(
            (
                judge.id,
                judge.model,
                judge.temperature if judge.temperature is not None else self.judge_temperature,
            )
            for judge in self.judges
        )


class PromptConfig(_Section):
    categories_path: _ConfigPath = Path("config/categories.csv")
    profile_path: _ConfigPath = Path("config/profile.csv")
    generations_path: _ConfigPath = Path("output/generations.csv")
    titles_manifest_path: _ConfigPath | None = None
    random_seed: _Int | None = Field(default=None, ge=0, le=MAX_RUN_SEED)
    refinement: Literal["final", "per_stage", "none"] = "final"
    text_temperature: _Float = Field(default=0.8, ge=0.0, le=2.0)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)


class ImageConfig(_Section):
    generation_path: _ConfigPath = Path("output/images")
    log_path: _ConfigPath = Path("output/logs")
    model: _Text = "gpt-image-2.6-sunburst"
    size: Annotated[str, AfterValidator(_check_size)] = "1536x1024"
    quality: Literal["low", "medium", "high", "xhigh", "max", "auto"] = "high"
    caption_font_path: _ConfigPath | None = None


_STORE_URL_MUST = (
    "sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DBNAME (a password is better "
    "left to PGPASSWORD or ~/.pgpass), or null"
)


def _check_store_url(value: str | None, info: ValidationInfo) -> str | None:
    """A store URL (:func:`image_project.config.store_url.check_store_url`); messages never show
    its password."""
    if value is None:
        return None
    shown = repr(redact_url(value[:200]))
    if len(value) > MAX_URL_CHARS:
        raise _Invalid(f"a URL of at most {MAX_URL_CHARS} characters", redact=True, shown=shown)
    context = info.context if isinstance(info.context, Mapping) else {}
    try:
        return check_store_url(value, context.get("root"))
    except ValueError as exc:
        reason = str(exc).split(", must be ", 1)[0].split(": ", 1)[-1]
        note = "" if reason.startswith("got ") else reason
        raise _Invalid(_STORE_URL_MUST, note=note, redact=True, shown=shown) from None


class StoreConfig(_Section):
    """The run store (:mod:`image_project.store`): every run is written to it at its end.
    ``url`` None = ``sqlite:///<image.log_path>/runs.sqlite``."""

    enabled: StrictBool = True
    url: Annotated[str | None, AfterValidator(_check_store_url)] = None


# --------------------------------------------------------------------------- context (issue 28)

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
        except ValueError:
            raise _Invalid(_DATE_MUST, note="no such day") from None
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


class HolidayConfig(_Section):
    """``context.holiday``: the nearest of the ``include`` holidays within ``lookahead_days``
    applies with probability ``base + (max - base) * (lookahead - days_until) / lookahead``.
    ``country`` (and ``subdivision``) pick the calendar of the ``holidays`` package that dates
    them; whether the package knows them is checked when context is enabled, before any call
    (``image_project.context.load_injectors``)."""

    country: Annotated[str, AfterValidator(_check_country)] = "US"
    subdivision: Annotated[str | None, AfterValidator(_check_subdivision)] = None
    include: Annotated[tuple[HolidayKey, ...], _names_from(HOLIDAY_KEYS, "holidays")] = (
        "new_year",
        "valentines_day",
        "halloween",
        "thanksgiving",
        "christmas",
    )
    lookahead_days: _Int = Field(default=14, ge=1, le=366)
    base_probability: _Float = Field(default=0.15, ge=0.0, le=1.0)
    max_probability: _Float = Field(default=0.55, ge=0.0, le=1.0)

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
    """Context injectors (``image_project.context``; README "Context"): lines of guidance
    from the run's date (the season, a nearby holiday) and from plugins, put where
    ``injection_location`` says. Off = the run is exactly as without this section."""

    enabled: StrictBool = False
    date: ContextDate = None
    injection_location: InjectionLocation = "prompt"
    injectors: Annotated[
        tuple[InjectorName, ...], _names_from(BUILTIN_INJECTORS, "built-in injectors")
    ] = ("season", "holiday")
    plugins: Annotated[tuple[str, ...], BeforeValidator(_check_modules)] = ()
    plugin_settings: Annotated[dict[str, dict[str, Any]], BeforeValidator(_check_settings)] = Field(
        default_factory=dict
    )
    season: SeasonConfig = Field(default_factory=SeasonConfig)
    holiday: HolidayConfig = Field(default_factory=HolidayConfig)


# --------------------------------------------------------------------------- upscale (4K)

UPSCALE_SIDE_MIN, UPSCALE_SIDE_MAX = 16, 8192
"""Pixels per side of the 4K image's target (8192 holds 8K's 7680x4320)."""
_RATIO_MIN, _RATIO_MAX = 0.1, 10.0
_RATIO_MUST = (
    f"a width/height ratio in [{_RATIO_MIN:g}, {_RATIO_MAX:g}]: a number (1.78), "
    "'W:H' or 'W/H' ('16:9', '9/16'), a [W, H] list, or null"
)
_RATIO_TEXT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*[:/]\s*([0-9]+(?:\.[0-9]+)?)\s*")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number == number and abs(number) != float("inf") else None


def _parse_ratio(value: object) -> object:
    """``target_aspect_ratio``: a number, ``"16:9"`` / ``"9/16"`` / ``"1.78"`` or
    ``[16, 9]``, as one float (width / height), within the allowed range."""
    if value is None:
        return None
    ratio: float | None = None
    if isinstance(value, str) and (match := _RATIO_TEXT.fullmatch(value)):
        width, height = float(match.group(1)), float(match.group(2))
        ratio = width / height if height > 0 else None
    elif isinstance(value, list | tuple) and len(value) == 2:
        sides = _number(value[0]), _number(value[1])
        if sides[0] is not None and sides[1] is not None and min(sides[0], sides[1]) > 0:
            ratio = sides[0] / sides[1]
    else:
        ratio = _number(value)
    if ratio is None or not _RATIO_MIN <= ratio <= _RATIO_MAX:
        note = ""
        if isinstance(value, int) and not isinstance(value, bool) and 60 <= value < 3600:
            high, low = divmod(value, 60)  # YAML 1.1 reads an unquoted 16:9 as 16*60+9
            note = (
                f"YAML reads an unquoted {high}:{low} as the base-60 number {value}; "
                f"quote it: '{high}:{low}'"
            )
        raise _Invalid(_RATIO_MUST, note=note)
    return ratio


def _check_tile(value: int) -> int:
    if 0 < value < 32:
        raise _Invalid("0 (the binary chooses) or an int in 32..4096")
    return value


_MODEL_FILE = re.compile(r"[A-Za-z0-9_.-]+")


def _check_model_name(value: str) -> str:
    if not _MODEL_FILE.fullmatch(value) or len(value) > MAX_NAME_CHARS or value.startswith("."):
        raise _Invalid(
            f"a model file name of at most {MAX_NAME_CHARS} letters, digits, '_', '.' or '-' "
            "(like 'realesrgan-x4plus'), without .param/.bin"
        )
    return value


class UpscaleConfig(_Section):
    """The 4K image (``upscale``; README "4K upscale", :mod:`image_project.artifacts.upscale`).

    The target is ``target_width_px`` x ``target_height_px`` (both or neither), else the long
    edge ``target_long_edge_px`` with ``target_aspect_ratio`` or the image's own ratio. The
    upscaler binary is ``realesrgan_binary``, else ``$REALESRGAN_NCNN_VULKAN_PATH``, else
    ``realesrgan-ncnn-vulkan`` on PATH; whether it exists (and its model files) is checked
    when a run starts, before any model call, only when ``enabled`` (:func:`image_project
    .preflight.check_upscale`), since finding it depends on the environment. ``output_path``
    None = beside the images (``image.generation_path``)."""

    enabled: StrictBool = False
    target_long_edge_px: _Int = Field(default=3840, ge=UPSCALE_SIDE_MIN, le=UPSCALE_SIDE_MAX)
    target_width_px: _Int | None = Field(default=None, ge=UPSCALE_SIDE_MIN, le=UPSCALE_SIDE_MAX)
    target_height_px: _Int | None = Field(default=None, ge=UPSCALE_SIDE_MIN, le=UPSCALE_SIDE_MAX)
    target_aspect_ratio: Annotated[float | None, BeforeValidator(_parse_ratio)] = None
    engine: Literal["realesrgan-ncnn-vulkan"] = "realesrgan-ncnn-vulkan"
    realesrgan_binary: _ConfigPath | None = None
    model_path: _ConfigPath | None = None
    model_name: Annotated[str, AfterValidator(_check_model_name)] = "realesrgan-x4plus"
    tile_size: Annotated[_Int, AfterValidator(_check_tile)] = Field(default=0, ge=0, le=4096)
    tta: StrictBool = False
    allow_fallback_resize: StrictBool = False
    timeout_s: _Float = Field(default=600.0, gt=0.0, le=7200.0)
    output_path: _ConfigPath | None = None

    @model_validator(mode="after")
    def _check_target(self) -> Self:
        width, height = self.target_width_px, self.target_height_px
        if (width is None) != (height is None):
            given, other = (
                ("target_width_px", "target_height_px")
                if width is not None
                else ("target_height_px", "target_width_px")
            )
            raise _KeyedInvalid(
                other,
                f"missing, must be set with {given} ({width or height}): an explicit target "
                "size needs both sides (or neither, for target_long_edge_px)",
            )
        ratio = self.target_aspect_ratio
        if ratio is not None and width is not None:
            raise _KeyedInvalid(
                "target_aspect_ratio",
                f"got {ratio:g}, cannot be combined with target_width_px x target_height_px "
                f"({width}x{height}); set one or the other",
            )
        if ratio is not None:
            short = round(self.target_long_edge_px / max(ratio, 1 / ratio))
            if short < UPSCALE_SIDE_MIN:
                raise _KeyedInvalid(
                    "target_aspect_ratio",
                    f"got {ratio:g}, which makes the short edge {short} px with "
                    f"target_long_edge_px {self.target_long_edge_px}; it must be at least "
                    f"{UPSCALE_SIDE_MIN}",
                )
        return self


class AppConfig(_Section):
    """The whole validated configuration. ``sources``: the files read, in merge order."""

    backend: BackendConfig = Field(default_factory=BackendConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    image: ImageConfig = Field(default_factory=ImageConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    upscale: UpscaleConfig = Field(default_factory=UpscaleConfig)
    sources: tuple[str, ...] = Field(default=(), exclude=True)

    @property
    def effective_store_url(self) -> str:
        """``store.url``, or the SQLite file ``<image.log_path>/runs.sqlite``."""
        return self.store.url or default_store_url(self.image.log_path)

    @property
    def effective_titles_manifest_path(self) -> Path:
        """``prompt.titles_manifest_path``, or ``<image.generation_path>/titles_manifest.csv``."""
        if self.prompt.titles_manifest_path is not None:
            return self.prompt.titles_manifest_path
        return self.image.generation_path / "titles_manifest.csv"

    @property
    def effective_upscale_path(self) -> Path:
        """``upscale.output_path``, or beside the images: ``image.generation_path``."""
        return self.upscale.output_path or self.image.generation_path


_INTERNAL_FIELDS = frozenset({"sources"})
