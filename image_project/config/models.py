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

The shared validators and the section base class are :mod:`.fields`; the self-contained
``context`` and ``upscale`` sections are :mod:`.context_section` and :mod:`.upscale_section`
(their names are re-exported here); this module holds the other sections and
:class:`AppConfig`, whose cross-section checks read them together.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Self, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    model_validator,
)

from image_project.config.context_section import (
    ContextConfig,
)
from image_project.config.fields import (
    MAX_RUN_SEED,
    MAX_URL_CHARS,
    StrictBool,
    _check_base_url,
    _check_env_name,
    _check_judge_id,
    _check_size,
    _ConfigPath,
    _Float,
    _Int,
    _Invalid,
    _KeyedInvalid,
    _non_empty_path,
    _reject_bool_or_float,
    _resolve_path,
    _Section,
    _show,
    _Text,
)
from image_project.config.store_url import check_store_url, default_store_url, redact_url
from image_project.config.upscale_section import (
    UpscaleConfig,
)
from image_project.config.wire_section import (
    RoleStyle,
    SchemaDialect,
    TokenLimitParam,
    TokenLimitsConfig,
)


class BackendConfig(_Section):
    """Which model service to talk to and how hard to try."""

    provider: Literal["auto", "openai", "offline"] = "auto"
    """Which model service: ``openai``; ``offline`` (the built-in offline backend: no network,
    placeholder answers, a drawn preview image); ``auto`` = ``openai`` when the variable
    ``api_key_env`` names is set or ``base_url`` is given, else ``offline``."""
    base_url: Annotated[str | None, AfterValidator(_check_base_url)] = None
    """An OpenAI-compatible server instead of api.openai.com (Ollama, vLLM, llama.cpp, ...),
    like ``http://localhost:11434/v1``; null = OpenAI."""
    api_key_env: Annotated[_Text, AfterValidator(_check_env_name)] = "OPENAI_API_KEY"
    """The NAME of the environment variable holding the API key, never the key itself."""
    text_model: _Text = "gpt-6-luna"
    """The chat model of every text step (and of the judges and the selector unless they name
    their own)."""
    max_concurrency: _Int = Field(default=8, ge=1, le=256)
    """Model calls in flight at once on this backend, across the whole run or batch; halved for
    a while after a 429."""
    timeout_s: _Float = Field(default=120.0, gt=0.0, le=3600.0)
    """Seconds before one request attempt is abandoned."""
    max_attempts: _Int = Field(default=4, ge=1, le=20)
    """Transport attempts per call (1 = no retry): 429, 408, 409, 5xx, timeouts and connection
    errors are retried; a badly shaped answer is a re-ask, not a retry."""
    backoff_initial_s: _Float = Field(default=1.0, ge=0.0, le=300.0)
    """The first jittered exponential wait between attempts, in seconds (a ``Retry-After``
    header wins)."""
    backoff_max_s: _Float = Field(default=30.0, ge=0.0, le=3600.0)
    """The longest such wait, in seconds; at least ``backoff_initial_s``."""
    max_retry_wait_s: _Float = Field(default=60.0, ge=0.0, le=3600.0)
    """The longest ``Retry-After`` a server may ask for before a retry; a longer one fails that
    call at once, naming the wait."""
    structured_outputs: StrictBool = True
    """Ask the server for JSON-schema structured outputs; false: the schema is spelled out at
    the end of the last user message and the answer validated after the fact."""
    logprobs: StrictBool = True
    """Whether the endpoint returns token log-probabilities; false: a ``logprobs`` judge on
    it is refused before any call (exit 2)."""
    max_output_tokens: TokenLimitsConfig = Field(default_factory=TokenLimitsConfig)
    token_limit_param: TokenLimitParam = "max_completion_tokens"
    """The name of the output-token limit in the request: ``max_completion_tokens`` (OpenAI's)
    or ``max_tokens`` (older OpenAI-compatible servers)."""
    role_style: RoleStyle = "system"
    """``system``: one leading system message; ``user``: the system text folded into the first
    user message, for chat templates without a system role."""
    schema_dialect: SchemaDialect = "openai_strict"
    """How the answer schema is sent: ``openai_strict`` (OpenAI's strict subset) or ``grammar``
    (keeping string lengths and patterns, for servers that compile schemas into a grammar)."""
    preflight: Literal["auto", "strict", "warn", "off"] = "auto"
    """The pre-flight model check (``GET /models``) before the first call: ``strict`` fails
    on a model the endpoint does not list, ``warn`` says so and runs, ``off`` does not ask;
    ``auto`` is ``strict`` for api.openai.com and servers on this machine (their lists are
    what they serve) and ``warn`` elsewhere (see docs/models.md)."""

    @model_validator(mode="after")
    def _check_backoff(self) -> Self:
        if self.backoff_max_s < self.backoff_initial_s:
            raise _KeyedInvalid(
                "backoff_max_s",
                f"got {_show(self.backoff_max_s)}, must be >= backoff_initial_s "
                f"({_show(self.backoff_initial_s)})",
            )
        return self


OFFLINE_BACKEND = "offline"
"""The role reference (``image.backend: offline``, ...) naming the built-in offline backend."""
MAX_BACKENDS = 16


def _check_backend_ref(value: str | None) -> str | None:
    """A role's backend reference: null, ``offline`` or a name (checked against ``backends``
    by :class:`AppConfig`, which sees both)."""
    return None if value is None else _check_judge_id(value)


_BackendRef = Annotated[str | None, AfterValidator(_check_backend_ref)]


def _check_backend_names(value: dict[str, BackendConfig]) -> dict[str, BackendConfig]:
    if len(value) > MAX_BACKENDS:
        raise _Invalid(f"a mapping of at most {MAX_BACKENDS} named backends")
    for name in value:
        if name == OFFLINE_BACKEND:
            raise _KeyedInvalid(
                name, "the name 'offline' is reserved for the built-in offline backend"
            )
        try:
            _check_judge_id(name)
        except _Invalid as exc:
            raise _KeyedInvalid(name, f"got the name {name!r}, must be {exc.must}") from None
    return value


_PARALLEL_MUST = "'auto' or an int in 1..1000"


def _check_parallel(value: object) -> object:
    """``run.parallel``: ``auto``, or a whole number of runs in flight (never a bool, a
    float or a quoted number)."""
    if value == "auto":
        return value
    if isinstance(value, str):
        raise _Invalid(_PARALLEL_MUST)
    value = _reject_bool_or_float(value)
    if not isinstance(value, int) or not 1 <= value <= 1000:
        raise _Invalid(_PARALLEL_MUST)
    return value


class RunConfig(_Section):
    mode: Literal["full", "prompt_only"] = "full"
    """``full`` = prompt pipeline, image and caption; ``prompt_only`` = stop after the final
    prompt."""
    concurrency: Literal["concurrent", "sequential"] = "concurrent"
    """``concurrent``: independent model calls run at once; ``sequential``: one call at a time.
    Same result for the same seed and answers."""
    runs: _Int = Field(default=1, ge=1, le=1000)
    """How many generations to make."""
    parallel: Annotated[int | Literal["auto"], BeforeValidator(_check_parallel)] = 1
    """Runs in flight at once in this process (``--parallel``): an int, or ``auto`` = as many as
    the rate limit's budget allows, at most ``parallel_cap``."""
    parallel_cap: _Int = Field(default=16, ge=1, le=256)
    """The most runs ``auto`` keeps in flight."""


class NoveltyConfig(_Section):
    """Novelty (``prompt.scoring.novelty``; docs/aggregation.md "Novelty"): a card loses
    ``penalty_per_share`` points per unit of the recent-motif share it repeats, at most
    ``max_penalty``; a motif counts when it is in at least ``min_share`` of the last
    ``window`` final prompts (and in two of them)."""

    enabled: StrictBool = True
    """Penalise cards that repeat motifs of recent final prompts (read from
    ``prompt.generations_path``)."""
    window: _Int = Field(default=25, ge=0, le=10000)
    """How many recent generations to look at; 0 turns the history off."""
    penalty_per_share: _Float = Field(default=50.0, ge=0.0, le=100.0)
    """Points a card loses per unit of recent-motif share it repeats (a motif in every recent
    prompt = 1)."""
    max_penalty: _Float = Field(default=125.0, ge=0.0, le=250.0)
    """The most points the novelty penalty takes from a card."""
    min_share: _Float = Field(default=0.2, gt=0.0, le=1.0)
    """A motif counts when it is in at least this share of the window's prompts (and in two of
    them)."""


BUILTIN_RUBRICS: tuple[str, ...] = ("default", "strict", "novelty_heavy", "profile_fit")
"""The built-in judge rubrics (their texts: ``image_project.stages.scoring.rubrics``)."""
ProfileView = Literal["raw", "dislikes_only", "hints"]
JudgeProtocol = Literal["list", "reasoned", "pointwise", "pairwise", "logprobs"]
"""How a judge is asked (docs/protocols.md): ``list`` every card in one
call, a bare score each; ``reasoned`` every card in one call, a short rationale before each
score; ``pointwise`` one call per card; ``pairwise`` one call per pair of cards, scores
fitted from the outcomes (Bradley-Terry); ``logprobs`` as ``list``, each score weighted by
its digit tokens' probabilities where the endpoint returns them."""
JUDGE_PROTOCOLS: tuple[str, ...] = get_args(JudgeProtocol)
Aggregation = Literal["median", "weighted_median", "mean", "trimmed_mean"]
Normalise = Literal["none", "ranks", "zscores", "robust"]
MAX_RUBRIC_CHARS = 20_000


class RubricSpec(BaseModel):
    """A judge's rubric: a built-in one by ``name`` (``text`` None), or a custom one whose
    ``text`` came from the config (``source: text``) or from a file read when the config was
    loaded (``source: file``, ``path`` absolute)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

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
    """The judge's name in records and the summary; unique."""
    model: _Text | None = None
    """null = ``judge_model``, else the text model of the judge's backend."""
    backend: _BackendRef = None
    """null = ``judge_backend``; ``offline``, or a name under ``backends``."""
    temperature: _Float | None = Field(default=None, ge=0.0, le=2.0)
    """null = ``judge_temperature``."""
    rubric: Annotated[RubricSpec | None, BeforeValidator(_parse_rubric)] = None
    """What the judge scores by; null = ``default`` (the original judging instruction). ``{file:
    path}`` is read when the config is loaded."""
    weight: _Float = Field(default=1.0, ge=0.0, le=1000.0)
    """The judge's weight in ``weighted_median``, ``mean`` and ``trimmed_mean`` (ignored by
    ``median``)."""
    profile: ProfileView = "raw"
    """What the judge is shown of the person: ``raw`` (the whole profile), ``dislikes_only`` or
    ``hints`` (the generator-safe hints; needs ``generator_profile_abstraction``)."""
    protocol: JudgeProtocol | None = None
    """How the judge is asked; null = ``judge_protocol``."""


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
    backend: str | None = None
    """The backend that serves it: None = the main ``backend:``, ``offline``, or a name in
    ``backends``."""
    protocol: JudgeProtocol = "list"


SurvivorCategory = Literal["performance", "diversity", "potential"]
_CATEGORIES: tuple[SurvivorCategory, ...] = ("performance", "diversity", "potential")


class SurvivorQuota(_Section):
    """How many survivors of a round each category may take. Survivors are dealt one per
    category in the order performance, diversity, potential while the category still has
    quota, round after round; survivors beyond the whole quota are ``performance``. The
    default (one each) gives 1: performance; 2: + diversity; 3: + potential; 4: + performance."""

    performance: _Int = Field(default=1, ge=0, le=50)
    """Survivors of a round taken for their rank: the best-ranked candidate not chosen yet."""
    diversity: _Int = Field(default=1, ge=0, le=50)
    """Survivors taken among the candidates at or above the round's median for being farthest
    from the survivors already chosen."""
    potential: _Int = Field(default=1, ge=0, le=50)
    """Survivors taken among the rest for the highest single judge score, then the widest
    spread."""

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
    """Multi-round selection (``prompt.scoring.evolution``; docs/rounds.md).

    Round 0 is the ordinary card set and judge panel; each of ``generations`` later rounds
    breeds ``variants_per_survivor`` variants of each of the previous round's ``survivors``
    and judges them (beside their parents when ``keep_parents``). ``selector`` chooses the
    survivors in code (seeded, deterministic) or lets one model call propose them
    (validated; an invalid proposal is replaced by the code choice, loudly).
    ``near_duplicate_distance``: a variant whose token-set Jaccard distance to a candidate
    already in its round is below this is dropped before judging."""

    enabled: StrictBool = False
    """Multi-round selection; off = one round, the record exactly as without this section."""
    generations: _Int = Field(default=2, ge=1, le=10)
    """Rounds after round 0."""
    survivors: _Int = Field(default=3, ge=1, le=26)
    """Survivors per round (at most ``num_ideas``): the cards whose variants make the next
    round."""
    variants_per_survivor: _Int = Field(default=2, ge=1, le=10)
    """Variants bred from each survivor per round, concurrently."""
    keep_parents: StrictBool = True
    """Survivors are judged again beside their variants, so a round's scores share one scale
    (and a survivor can still win the final pick)."""
    quota: SurvivorQuota = Field(default_factory=SurvivorQuota)
    selector: Literal["code", "llm"] = "code"
    """Who chooses the survivors: ``code`` (seeded, deterministic) or ``llm`` (one call proposes
    them with reasons; an invalid proposal is re-asked, then replaced by the code choice,
    loudly)."""
    selector_model: _Text | None = None
    """The ``llm`` selector's model; null = ``judge_model``, else its backend's text model."""
    selector_backend: _BackendRef = None
    """The ``llm`` selector's backend; null = ``judge_backend``."""
    near_duplicate_distance: _Float = Field(default=0.2, ge=0.0, le=1.0)
    """A variant closer than this (token-set Jaccard distance) to a candidate already in its
    round is dropped before judging."""


class ScoringConfig(_Section):
    """Black-box scoring (SPEC "Black-box scoring")."""

    enabled: StrictBool = False
    """Black-box scoring instead of the standard pipeline; off = the standard pipeline, exactly."""
    num_ideas: _Int = Field(default=6, ge=2, le=52)
    """Idea cards per run, each from its own seeded model call (ids ``A``..``Z``, ``AA``,
    ``AB``, ...)."""
    exploration_rate: _Float = Field(default=0.15, ge=0.0, le=0.5)
    """Probability of exploring (a weighted pick among the top cards) instead of taking the best
    card."""
    judge_temperature: _Float = Field(default=0.0, ge=0.0, le=2.0)
    """The temperature of every judge that names none; anything but 0 makes the selection vary
    between identical runs (a WARNING at load)."""
    judge_protocol: JudgeProtocol = "list"
    """How every judge that names no ``protocol`` is asked (docs/protocols.md)."""
    judge_model: _Text | None = None
    """The model of every judge that names none; null = the text model of the judge's backend."""
    judge_backend: _BackendRef = None
    """The backend of every judge that names none: null = the main ``backend``, ``offline``, or
    a name under ``backends``."""
    generator_temperature: _Float = Field(default=0.9, ge=0.0, le=2.0)
    """Temperature of the idea-card and variant generators."""
    generator_profile_abstraction: StrictBool = True
    """true: generators get broad hints abstracted from the profile; false: only the concepts
    and the dislikes. Either way never the raw likes."""
    max_reasks: _Int = Field(default=1, ge=0, le=5)
    """Re-asks of a malformed hints, card, judge or selector answer, each with the reason;
    refusals are never re-asked."""
    min_ok_cards: _Int | None = Field(default=None, ge=2, le=52)
    """How many cards must pass their gates for the run to go on (at most ``num_ideas``); null =
    2."""
    judges: Annotated[tuple[JudgeConfig, ...] | None, BeforeValidator(_check_judge_count)] = None
    """The judge panel; null = one judge with id ``judge`` built from the defaults."""
    min_ok_judges: _Int | None = Field(default=None, ge=1, le=MAX_JUDGES)
    """How many judges must answer well for the run to go on (at most the number of judges);
    null = a majority, ``len(judges) // 2 + 1``."""
    aggregation: Aggregation = "median"
    """How a card's ok scores become one: ``median`` (weights ignored), ``weighted_median``,
    ``mean`` (weighted) or ``trimmed_mean``."""
    trim: _Int = Field(default=0, ge=0, le=MAX_JUDGES)
    """Scores dropped at each end by ``trimmed_mean`` (must be 0 with any other aggregation);
    ``2 x trim`` must be < ``min_ok_judges``."""
    normalise: Normalise = "robust"
    """Every judge put on a common scale within the round before the aggregation: ``none``,
    ``zscores``, ``robust`` (z-scores with each judge's spread shrunk towards the panel's) or
    ``ranks``."""
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
    def _check_cards(self) -> Self:
        if self.min_ok_cards is not None and self.min_ok_cards > self.num_ideas:
            raise _KeyedInvalid(
                "min_ok_cards",
                f"got {self.min_ok_cards}, must be an int in 2..num_ideas ({self.num_ideas}) "
                "or null",
            )
        return self

    @property
    def effective_min_ok_cards(self) -> int:
        """``min_ok_cards``, or 2 when null: the fewest cards worth judging."""
        return self.min_ok_cards if self.min_ok_cards is not None else 2

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

    def effective_judges(
        self, text_model: str, backend_models: Mapping[str, str] | None = None
    ) -> tuple[EffectiveJudge, ...]:
        """Each judge's backend (own ``backend``, else ``judge_backend``, else None: the main
        one), model (own, else ``judge_model``, else the text model of its backend:
        ``text_model`` for the main backend, ``backend_models[name]`` for another) and
        temperature. The app calls this once per run with the models of the backends it
        built; everything else (log, transcript, summary) reads its result.

        With ``judges`` omitted, one judge ``"judge"`` built from the defaults.
        """
        models = backend_models or {}

        def model_of(backend: str | None) -> str:
            return text_model if backend is None else models.get(backend, text_model)

        if self.judges is None:
            backend = self.judge_backend
            model = self.judge_model or model_of(backend)
            return (
                EffectiveJudge(
                    "judge",
                    model,
                    self.judge_temperature,
                    backend=backend,
                    protocol=self.judge_protocol,
                ),
            )
        out = []
        for judge, (_, _, temperature) in zip(self.judges, self._judge_settings(), strict=True):
            backend = judge.backend or self.judge_backend
            out.append(
                EffectiveJudge(
                    judge.id,
                    judge.model or self.judge_model or model_of(backend),
                    temperature,
                    judge.rubric or DEFAULT_RUBRIC,
                    judge.weight,
                    judge.profile,
                    backend,
                    judge.protocol or self.judge_protocol,
                )
            )
        return tuple(out)

    @property
    def selector_backend(self) -> str | None:
        """The LLM survivor selector's backend: ``evolution.selector_backend``, else
        ``judge_backend``, else None (the main one)."""
        return self.evolution.selector_backend or self.judge_backend

    def effective_selector_model(
        self, text_model: str, backend_models: Mapping[str, str] | None = None
    ) -> str:
        """The LLM survivor selector's model: ``evolution.selector_model``, else
        ``judge_model``, else the text model of its backend (:attr:`selector_backend`;
        ``text_model`` for the main one). Resolved once per run, like the judges'; the
        pre-flight check, the step and the record read it."""
        backend = self.selector_backend
        own = text_model if backend is None else (backend_models or {}).get(backend, text_model)
        return self.evolution.selector_model or self.judge_model or own

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
    """The art concepts to draw from (CSV, one column per category)."""
    profile_path: _ConfigPath = Path("config/profile.csv")
    """The taste profile (CSV: Likes / Dislikes columns, or ``category,item[,notes]`` rows)."""
    generations_path: _ConfigPath = Path("output/generations.csv")
    """One row per finished generation; also the history of the novelty penalty."""
    titles_manifest_path: _ConfigPath | None = None
    """The numbered titles manifest; null = ``<image.generation_path>/titles_manifest.csv``."""
    random_seed: _Int | None = Field(default=None, ge=0, le=MAX_RUN_SEED)
    """The run seed; null = a fresh random seed, recorded in the transcript. Every random choice
    of a run is derived from it."""
    refinement: Literal["final", "per_stage", "none"] = "final"
    """Tree-of-thought refinement of the prompt: ``final`` (once, at the end), ``per_stage`` or
    ``none``."""
    text_temperature: _Float = Field(default=0.8, ge=0.0, le=2.0)
    """Temperature of the prompt-writing steps."""
    max_profile_chars: _Int = Field(default=20_000, ge=100, le=10_000_000)
    """The longest profile, as the text the prompts carry, checked when it is loaded (before
    any call): a profile is a page of taste, not a database."""
    max_prompt_chars: _Int = Field(default=200_000, ge=1_000, le=100_000_000)
    """The longest request (system prompt and every message, in characters), checked before
    each call is sent."""
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)


class ImageConfig(_Section):
    generation_path: _ConfigPath = Path("output/images")
    """Where images are saved (and the titles manifest, by default)."""
    log_path: _ConfigPath = Path("output/logs")
    """Where run transcripts (``<generation_id>_transcript.json``) are written, and the default
    SQLite store."""
    model: _Text = "gpt-image-2.6-sunburst"
    """The image model."""
    size: Annotated[str, AfterValidator(_check_size)] = "1536x1024"
    """The image size in pixels; the model's own limits are checked too (docs/models.md)."""
    quality: Literal["low", "medium", "high", "xhigh", "max", "auto"] = "high"
    """The image quality the model is asked for."""
    caption_font_path: _ConfigPath | None = None
    """A TrueType/OpenType font for the caption; null = the caption code's default font."""
    backend: _BackendRef = None
    """The image's backend: null = the main ``backend``, ``offline`` (the drawn preview image),
    or a name under ``backends``."""


_STORE_URL_MUST = (
    "sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME (psycopg 3; a password is better "
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
    """Write runs to the run store for ``image-project runs`` (docs/store.md says which runs are
    written)."""
    url: Annotated[str | None, AfterValidator(_check_store_url)] = None
    """Where: null = ``sqlite:///<image.log_path>/runs.sqlite``; a ``sqlite:///`` path or a
    PostgreSQL database shared by several machines."""


class ReviewConfig(_Section):
    """The review site (``image-project review``): ``max_image_pixels`` is the largest image
    (width x height) it publishes; a larger one is skipped with the reason."""

    max_image_pixels: _Int = Field(default=70_000_000, ge=1, le=1_000_000_000)
    """The largest image (width x height) the review site publishes; a larger one is skipped
    with the reason."""


class AppConfig(_Section):
    """The whole validated configuration. ``sources``: the files read, in merge order."""

    backend: BackendConfig = Field(default_factory=BackendConfig)
    backends: Annotated[dict[str, BackendConfig], AfterValidator(_check_backend_names)] = Field(
        default_factory=dict
    )
    """More backends by name, for the roles that name one (docs/models.md "Backends per role");
    ``offline`` is reserved, at most 16."""
    run: RunConfig = Field(default_factory=RunConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    image: ImageConfig = Field(default_factory=ImageConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    upscale: UpscaleConfig = Field(default_factory=UpscaleConfig)
    review: ReviewConfig = Field(default_factory=ReviewConfig)
    sources: tuple[str, ...] = Field(default=(), exclude=True)

    @model_validator(mode="after")
    def _check_backend_refs(self) -> Self:
        """Every role's backend reference names ``offline`` or a backend in ``backends``."""
        for key, ref in self.backend_refs():
            if ref is not None and ref != OFFLINE_BACKEND and ref not in self.backends:
                known = ", ".join(repr(name) for name in self.backends) or "none defined"
                raise _KeyedInvalid(
                    key,
                    f"got {ref!r}, must be null (the main backend:), 'offline' (the built-in "
                    f"offline backend) or a name defined under backends ({known})",
                )
        return self

    def backend_refs(self) -> tuple[tuple[str, str | None], ...]:
        """``(dotted key, reference)`` of every role's backend reference, used or not."""
        scoring = self.prompt.scoring
        refs: list[tuple[str, str | None]] = [("image.backend", self.image.backend)]
        refs.append(("prompt.scoring.judge_backend", scoring.judge_backend))
        refs += [
            (f"prompt.scoring.judges[{i}].backend", judge.backend)
            for i, judge in enumerate(scoring.judges or ())
        ]
        refs.append(
            ("prompt.scoring.evolution.selector_backend", scoring.evolution.selector_backend)
        )
        return tuple(refs)

    def backend_config(self, ref: str | None) -> BackendConfig | None:
        """The section a role reference names: the main ``backend:`` for None, a section of
        ``backends`` for its name, None for ``offline``."""
        if ref is None:
            return self.backend
        return None if ref == OFFLINE_BACKEND else self.backends[ref]

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
