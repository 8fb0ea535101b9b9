"""What each known OpenAI model accepts, checked against the configuration before any call.

Two small tables, :data:`TEXT_MODELS` and :data:`IMAGE_MODELS`, hold what the OpenAI API
documents (or was seen to do) for the models a user is likely to configure. Where each entry
comes from is in ``docs/models.md``; keep that page and these tables in step. Today's entries
were looked up on 2026-11-23.

* A **text model** says whether it honours ``temperature`` (``"any"``: a non-reasoning model;
  ``"reasoning_none"``: only when ``reasoning_effort: "none"`` is sent, which the OpenAI
  adapter then does, see :func:`reasoning_effort_for`; ``"default_only"``: a reasoning model
  that runs only at its default temperature, 1), whether it supports JSON-schema structured
  outputs, the Chat Completions ``seed`` and token log-probabilities, and its shutdown date.
* An **image model** says which sizes it accepts (a fixed list, or the flexible rule of
  :class:`FlexibleSizes`), which ``quality`` values it offers, and its shutdown date.
* ``None`` in a column means "not known": that property is not checked.

:func:`check_models` applies the tables to a configuration, for the models a run served by
the OpenAI-compatible provider would call: ``backend.text_model``, every judge's model
and the LLM survivor selector's (when scoring, and that selector, are on) and
``image.model``. A model the tables do not know (a local server's
``llama3.1``, a model newer than the table) is never blocked. The offline backend serves every
request itself (any temperature; 16..4096 pixels per side at any quality, which the schema
already enforces), so the factory does not apply the tables to it.

Lookups ignore a dated snapshot suffix: ``gpt-4.1-mini-2025-04-14`` is looked up as
``gpt-4.1-mini`` unless the snapshot has an entry of its own.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Literal, TypeVar

from image_project.config.models import JUDGE_PROTOCOLS, AppConfig
from image_project.errors import ConfigError

logger = logging.getLogger("image_project.config")

Temperature = Literal["any", "reasoning_none", "default_only"]


@dataclass(frozen=True)
class TextModel:
    """One chat model's capabilities (``None``: not known, not checked)."""

    name: str
    temperature: Temperature | None
    structured_outputs: bool | None = None
    seed: bool | None = None
    shutdown: date | None = None
    replacement: str | None = None
    logprobs: bool | None = None


@dataclass(frozen=True)
class FlexibleSizes:
    """The GPT Image 2 family's rule: ``auto``, or ``WxH`` with both sides multiples of
    ``multiple`` and at most ``max_edge``, the long side at most ``max_ratio`` times the short
    one, and ``min_pixels..max_pixels`` pixels in all."""

    multiple: int = 16
    max_edge: int = 3840
    max_ratio: int = 3
    min_pixels: int = 655_360
    max_pixels: int = 8_294_400

    def describe(self) -> str:
        return (
            f"'auto' or 'WxH' with each side a multiple of {self.multiple} and at most "
            f"{self.max_edge}, the long side at most {self.max_ratio} times the short one, and "
            f"{self.min_pixels:,}..{self.max_pixels:,} pixels in all"
        )

    def problem(self, width: int, height: int) -> str | None:
        """Why ``width x height`` breaks the rule, or None."""
        step = self.multiple
        if width % step or height % step:
            near = f"{_round_to(width, step)}x{_round_to(height, step)}"
            return f"{width}x{height} has a side that is not a multiple of {step} (try {near!r})"
        if max(width, height) > self.max_edge:
            return f"its long side {max(width, height)} is above the maximum {self.max_edge}"
        if max(width, height) > self.max_ratio * min(width, height):
            ratio = max(width, height) / min(width, height)
            return f"its sides are {ratio:.2f}:1, more than {self.max_ratio}:1"
        pixels = width * height
        if pixels > self.max_pixels:
            return f"it has {pixels:,} pixels, above the maximum {self.max_pixels:,}"
        if pixels < self.min_pixels:
            return f"it has {pixels:,} pixels, below the minimum {self.min_pixels:,}"
        return None


def _round_to(value: int, step: int) -> int:
    return max(step, round(value / step) * step)


@dataclass(frozen=True)
class ImageModel:
    """One image model's capabilities (``None``: not known, not checked)."""

    name: str
    sizes: tuple[str, ...] | FlexibleSizes | None
    qualities: tuple[str, ...] | None
    shutdown: date | None = None
    replacement: str | None = None


_GPT_IMAGE_2 = FlexibleSizes()
_FIXED_GPT_IMAGE_1 = ("1024x1024", "1536x1024", "1024x1536", "auto")
_BASIC_QUALITIES = ("low", "medium", "high", "auto")
_ALL_QUALITIES = ("low", "medium", "high", "xhigh", "max", "auto")

_GPT4_END = date(2027, 1, 14)
_OCT_2026_END = date(2026, 10, 23)
_DEC_2026_END = date(2026, 12, 11)
_IMAGE_1X_END = date(2026, 12, 1)
_IMAGE_2X = "gpt-image-2.6-sunburst or gpt-image-2.6-flare"


_SHUT_DOWN_2026_10_23: tuple[tuple[str, Temperature, str], ...] = (
    ("gpt-4o-2024-05-13", "any", "gpt-5.6-sol"),
    ("gpt-4.1-nano", "any", "gpt-5.6-luna"),
    ("gpt-4", "any", "gpt-5.6-sol"),
    ("gpt-4-turbo", "any", "gpt-5.6-sol"),
    ("gpt-3.5-turbo", "any", "gpt-5.6-terra"),
    ("o1", "default_only", "gpt-5.6-sol"),
    ("o3-mini", "default_only", "gpt-5.6-sol"),
    ("o4-mini", "default_only", "gpt-5.6-terra"),
)


def _text(*entries: TextModel) -> dict[str, TextModel]:
    return {entry.name: entry for entry in entries}


def _image(*entries: ImageModel) -> dict[str, ImageModel]:
    return {entry.name: entry for entry in entries}


TEXT_MODELS: Mapping[str, TextModel] = _text(
    # Current models (no shutdown date announced).
    TextModel("gpt-6-luna", "reasoning_none", structured_outputs=True),
    TextModel("gpt-6.1-sol", "default_only"),
    TextModel("gpt-6-astra", "default_only"),
    TextModel("gpt-5.4", "reasoning_none"),
    TextModel("gpt-5.1", "reasoning_none", shutdown=date(2027, 4, 1)),
    # Deprecated: shut down on 2027-01-14, replaced by gpt-6-luna.
    *(
        TextModel(name, "any", True, True, shutdown=_GPT4_END, replacement="gpt-6-luna")
        for name in ("gpt-4.1", "gpt-4.1-mini", "gpt-4o", "gpt-4o-mini")
    ),
    # Deprecated: shut down on 2026-12-11.
    *(
        TextModel(name, "default_only", shutdown=_DEC_2026_END, replacement=instead)
        for name, instead in (
            ("gpt-5", "gpt-6.1-sol"),
            ("gpt-5-mini", "gpt-6.1-terra"),
            ("gpt-5-nano", "gpt-6-luna"),
            ("o3", "gpt-6.1-sol"),
        )
    ),
    # Shut down on 2026-10-23 (the replacements the deprecations page named then).
    *(
        TextModel(name, temperature, shutdown=_OCT_2026_END, replacement=instead)
        for name, temperature, instead in _SHUT_DOWN_2026_10_23
    ),
    # The offline backend's own model (listed for completeness; it honours everything).
    TextModel("offline-text-1", "any", True, True),
)
"""Chat models by name; sources per entry in ``docs/models.md``."""

IMAGE_MODELS: Mapping[str, ImageModel] = _image(
    ImageModel("gpt-image-2.6-sunburst", _GPT_IMAGE_2, _ALL_QUALITIES),
    ImageModel("gpt-image-2.6-flare", _GPT_IMAGE_2, _ALL_QUALITIES),
    ImageModel("gpt-image-2.5-sunburst", _GPT_IMAGE_2, _ALL_QUALITIES),
    ImageModel("gpt-image-2.5-flare", _GPT_IMAGE_2, _ALL_QUALITIES),
    ImageModel("gpt-image-2", _GPT_IMAGE_2, _BASIC_QUALITIES),
    ImageModel("gpt-image-1.5", _FIXED_GPT_IMAGE_1, _BASIC_QUALITIES, _IMAGE_1X_END, _IMAGE_2X),
    ImageModel("gpt-image-1-mini", _FIXED_GPT_IMAGE_1, _BASIC_QUALITIES, _IMAGE_1X_END, _IMAGE_2X),
    ImageModel(
        "chatgpt-image-latest", _FIXED_GPT_IMAGE_1, _BASIC_QUALITIES, _IMAGE_1X_END, _IMAGE_2X
    ),
    ImageModel("gpt-image-1", _FIXED_GPT_IMAGE_1, _BASIC_QUALITIES, _OCT_2026_END, _IMAGE_2X),
    ImageModel("dall-e-3", None, None, date(2026, 5, 12), _IMAGE_2X),
    ImageModel("dall-e-2", None, None, date(2026, 5, 12), _IMAGE_2X),
    # The offline backend's own model: 16..4096 pixels per side (the schema's bounds), any
    # quality the schema allows.
    ImageModel("offline-image-1", None, None),
)
"""Image models by name; sources per entry in ``docs/models.md``."""

_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_Entry = TypeVar("_Entry", TextModel, ImageModel)


def _lookup(name: str, table: Mapping[str, _Entry]) -> _Entry | None:
    if name in table:
        return table[name]
    base = _SNAPSHOT.sub("", name)
    return table.get(base) if base != name else None


def text_model(name: str, table: Mapping[str, TextModel] = TEXT_MODELS) -> TextModel | None:
    """The table's entry for chat model ``name`` (a dated snapshot falls back to its base
    name), or None when the table does not know it."""
    return _lookup(name, table)


def image_model(name: str, table: Mapping[str, ImageModel] = IMAGE_MODELS) -> ImageModel | None:
    """The table's entry for image model ``name`` (snapshots as :func:`text_model`)."""
    return _lookup(name, table)


def reasoning_effort_for(
    model: str, table: Mapping[str, TextModel] = TEXT_MODELS
) -> Literal["none"] | None:
    """``"none"`` for a model that honours ``temperature`` only with reasoning off (the
    OpenAI adapter then sends ``reasoning_effort: "none"``), else None (send nothing)."""
    entry = text_model(model, table)
    return "none" if entry is not None and entry.temperature == "reasoning_none" else None


# --------------------------------------------------------------------------- checking


@dataclass(frozen=True)
class _Use:
    """One model a run calls: the config key that chose it and the temperature it gets
    (None: the pipeline's own steps, which send several temperatures)."""

    key: str
    model: str
    temperature: float | None = None
    who: str = ""
    backend: str | None = None
    protocol: str | None = None
    protocol_key: str = ""


def _text_key(backend: str | None) -> str:
    return "backend.text_model" if backend is None else f"backends.{backend}.text_model"


def _text_uses(cfg: AppConfig) -> list[_Use]:
    uses = [_Use("backend.text_model", cfg.backend.text_model)]
    scoring = cfg.prompt.scoring
    if not scoring.enabled:
        return uses
    models = {name: b.text_model for name, b in cfg.backends.items()}
    for index, judge in enumerate(scoring.effective_judges(cfg.backend.text_model, models)):
        if scoring.judges is not None and scoring.judges[index].model is not None:
            key = f"prompt.scoring.judges[{index}].model"
        elif scoring.judge_model is not None:
            key = "prompt.scoring.judge_model"
        else:
            key = _text_key(judge.backend)
        who = f"judge {judge.id!r}"
        own = scoring.judges is not None and scoring.judges[index].protocol is not None
        protocol_key = (
            f"prompt.scoring.judges[{index}].protocol" if own else "prompt.scoring.judge_protocol"
        )
        uses.append(
            _Use(
                key,
                judge.model,
                judge.temperature,
                who,
                judge.backend,
                judge.protocol,
                protocol_key,
            )
        )
    evolution = scoring.evolution
    if evolution.enabled and evolution.selector == "llm":
        if evolution.selector_model is not None:
            key = "prompt.scoring.evolution.selector_model"
        elif scoring.judge_model is not None:
            key = "prompt.scoring.judge_model"
        else:
            key = _text_key(scoring.selector_backend)
        model = scoring.effective_selector_model(cfg.backend.text_model, models)
        who = "the LLM survivor selector"
        uses.append(_Use(key, model, 0.0, who, scoring.selector_backend))
    return uses


_REASONING_FAMILY = re.compile(r"^(o1|o3|o4|gpt-5)([-.]|$)")
"""OpenAI's reasoning model families, whose Chat Completions return no token
log-probabilities (the API rejects ``logprobs``), known to the table or not."""


def gives_no_logprobs(name: str, table: Mapping[str, TextModel] = TEXT_MODELS) -> str | None:
    """Why model ``name`` returns no token log-probabilities, or None when it may: a
    reasoning model (the o1, o3, o4 and gpt-5 families by name; a table entry that runs only
    at its default temperature), or an entry that says so."""
    entry = text_model(name, table)
    if entry is not None and entry.logprobs is not None:
        return None if entry.logprobs else "the model returns no token log-probabilities"
    if _REASONING_FAMILY.match(name) or (entry is not None and entry.temperature == "default_only"):
        return "a reasoning model, which returns no token log-probabilities"
    return None


def _logprobs_problem(cfg: AppConfig, use: _Use, table: Mapping[str, TextModel]) -> str | None:
    """Why a judge whose protocol needs log-probabilities cannot get them from its model or
    backend."""
    backend = cfg.backend_config(use.backend)
    section = "backend" if use.backend is None else f"backends.{use.backend}"
    if backend is not None and not backend.logprobs:
        why = f"its backend says it gives none ({section}.logprobs: false)"
    else:
        found = gives_no_logprobs(use.model, table)
        if found is None:
            return None
        why = f"its model {use.model!r} is {found}" if found.startswith("a ") else found
    return (
        f"got {use.protocol!r} for {use.who} (model {use.model!r}), but {why}; choose protocol "
        f"{_protocols_without('logprobs')} for it"
    )


Need = Literal["logprobs"]
"""What a judging protocol may need of its model and backend beyond a chat completion:
``logprobs``, the answer tokens' log-probabilities."""

PROTOCOL_NEEDS: Mapping[str, frozenset[Need]] = {"logprobs": frozenset({"logprobs"})}
"""The needs of each judging protocol that has any, by its name. The protocols themselves
are the stages' (``image_project/stages/scoring/protocols/``), a layer above the
configuration, so what the configuration checks before any call is declared here;
``tests/stages/scoring/protocols/test_registry.py`` fails when a protocol asks for what
this table does not say it needs, or the other way round."""

_NEED_PROBLEMS: Mapping[Need, Callable[[AppConfig, _Use, Mapping[str, TextModel]], str | None]] = {
    "logprobs": _logprobs_problem
}


def _protocols_without(need: Need) -> str:
    """The protocols that do not need ``need``, as a message lists them."""
    *others, last = [p for p in JUDGE_PROTOCOLS if need not in PROTOCOL_NEEDS.get(p, ())]
    return f"{', '.join(others)} or {last}" if others else last


def _shutdown_problem(
    name: str, shutdown: date | None, replacement: str | None, today: date
) -> tuple[str | None, str | None]:
    """``(error, warning)`` for a model's shutdown date."""
    if shutdown is None:
        return None, None
    instead = f"; OpenAI recommends {replacement}" if replacement else ""
    if shutdown <= today:
        return f"got {name!r}, which OpenAI shut down on {shutdown.isoformat()}{instead}", None
    days = (shutdown - today).days
    return None, (
        f"{name!r} is scheduled to shut down on {shutdown.isoformat()} (in {days} days){instead}"
    )


def _temperature_problem(use: _Use, entry: TextModel) -> str | None:
    if entry.temperature != "default_only":
        return None
    why = (
        "a reasoning model that runs only at its default temperature, 1 (the API rejects "
        "any other value); use a model that accepts temperature, such as gpt-6-luna"
    )
    if use.temperature is None:
        return (
            f"got {use.model!r}, which cannot honour the temperatures the prompt steps send "
            f"(prompt.text_temperature and the fixed 0.0-0.25 of the rewrite, hints and "
            f"title steps): {why}"
        )
    if use.temperature == 1:
        return None
    return (
        f"got {use.model!r}, which cannot honour temperature {use.temperature:g} for "
        f"{use.who}: {why}, or give {use.who} temperature 1"
    )


def _text_problems(
    cfg: AppConfig,
    table: Mapping[str, TextModel],
    today: date,
    served: Collection[str | None] = (None,),
) -> tuple[list[tuple[str, str]], list[str]]:
    problems: list[tuple[str, str]] = []
    warnings: list[str] = []
    for use in _text_uses(cfg):
        entry = text_model(use.model, table)
        backend = cfg.backend_config(use.backend) if use.backend in served else None
        needs = PROTOCOL_NEEDS.get(use.protocol or "", frozenset())
        for need in sorted(needs) if backend is not None else ():
            problem = _NEED_PROBLEMS[need](cfg, use, table)
            if problem:
                problems.append((use.protocol_key, problem))
        if entry is None or backend is None:
            continue
        error, warning = _shutdown_problem(use.model, entry.shutdown, entry.replacement, today)
        if warning:
            warnings.append(f"{use.key}: {warning}")
        found = error or _temperature_problem(use, entry)
        if found:
            problems.append((use.key, found))
        if backend.structured_outputs and entry.structured_outputs is False:
            section = "backend" if use.backend is None else f"backends.{use.backend}"
            problems.append(
                (
                    f"{section}.structured_outputs",
                    f"got True, but {use.key} {use.model!r} does not support JSON-schema "
                    "structured outputs; set backend.structured_outputs: false",
                )
            )
        if entry.seed is False:
            problems.append(
                (use.key, f"got {use.model!r}, which rejects the seed that every call sends")
            )
    return problems, warnings


def _size_problem(size: str, sizes: tuple[str, ...] | FlexibleSizes, model: str) -> str | None:
    if isinstance(sizes, tuple):
        if size in sizes:
            return None
        allowed = ", ".join(repr(s) for s in sizes)
        return f"got {size!r}, must be one of {allowed} (the sizes {model} accepts)"
    if size == "auto":
        return None
    width, _, height = size.partition("x")
    problem = sizes.problem(int(width), int(height))
    if problem is None:
        return None
    return f"got {size!r}, must be {sizes.describe()} for {model}: {problem}"


def _image_problems(
    cfg: AppConfig, table: Mapping[str, ImageModel], today: date
) -> tuple[list[tuple[str, str]], list[str]]:
    image = cfg.image
    entry = image_model(image.model, table)
    if entry is None:
        return [], []
    error, warning = _shutdown_problem(image.model, entry.shutdown, entry.replacement, today)
    warnings = [f"image.model: {warning}"] if warning else []
    if error:
        return [("image.model", error)], warnings
    problems: list[tuple[str, str]] = []
    if entry.sizes is not None:
        size_problem = _size_problem(image.size, entry.sizes, image.model)
        if size_problem:
            problems.append(("image.size", size_problem))
    if entry.qualities is not None and image.quality not in entry.qualities:
        allowed = ", ".join(repr(q) for q in entry.qualities)
        problems.append(
            (
                "image.quality",
                f"got {image.quality!r}, must be one of {allowed} (the qualities "
                f"{image.model} offers)",
            )
        )
    return problems, warnings


def _unique(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(items))


def _today() -> date:
    """The current UTC date (a seam for tests that run the CLI on a fixed date)."""
    return datetime.now(UTC).date()


def check_models(
    cfg: AppConfig,
    *,
    today: date | None = None,
    text_models: Mapping[str, TextModel] = TEXT_MODELS,
    image_models: Mapping[str, ImageModel] = IMAGE_MODELS,
    openai_refs: Collection[str | None] = (None,),
) -> tuple[str, ...]:
    """Check the configured models against the tables, before any call.

    Raises ONE :class:`ConfigError` naming the first bad key and the allowed values (further
    problems listed in its message, as the loader does): a model that is shut down, a text
    model or judge that cannot honour its temperature, structured outputs or a seed a model
    does not support, a judge whose protocol needs log-probabilities (``logprobs``,
    :data:`PROTOCOL_NEEDS`) on a model (a reasoning model, :func:`gives_no_logprobs`) or
    backend (``logprobs: false``) that gives none,
    an image size or quality the image model would reject. Returns the
    warnings (each also logged at WARNING on ``image_project.config``): models scheduled to
    shut down. ``today`` defaults to the current UTC date.

    ``openai_refs``: the backends (role references: None for the main ``backend:``, names
    in ``backends:``) that the OpenAI-compatible provider serves; only the models they serve
    are checked (a role on the offline backend needs no check). Default: the main one.
    """
    today = today or _today()
    text, text_warnings = _text_problems(cfg, text_models, today, openai_refs)
    image, image_warnings = (
        _image_problems(cfg, image_models, today) if cfg.image.backend in openai_refs else ([], [])
    )
    warnings = tuple(dict.fromkeys(text_warnings + image_warnings))
    for warning in warnings:
        logger.warning("MODEL SHUTDOWN AHEAD: %s", warning)
    problems = _unique(text + image)
    if problems:
        key, message = problems[0]
        if len(problems) > 1:
            rest = "".join(f"\n  {k}: {m}" for k, m in problems[1:])
            message = f"{message}\n  ({len(problems) - 1} more problem(s)):{rest}"
        raise ConfigError(key, message)
    return warnings
