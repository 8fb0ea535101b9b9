"""The record of one run: what it was asked to do, every step it took, what it produced and
how it ended. The transcript file is this model's JSON; the CLI summary reads it.

``schema_version`` changes whenever a field changes meaning or is removed;
``docs/transcript.schema.json`` is generated from :class:`RunRecord` (``python -m
image_project.record``) and a test fails when it is stale.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, model_validator

from image_project.record.base import RecordModel
from image_project.record.context import ContextOff, ContextSection
from image_project.record.events import ChatEvent, ImageEvent, Reask, StepEvent
from image_project.record.scoring import ScoringOff, ScoringRecord, ScoringSection
from image_project.record.upscale import UpscaleRecord

SCHEMA_VERSION: Final = 2
"""Version 1 was the hand-built transcript of the first wave (no ``schema_version`` key)."""

TitleSource = Literal["llm", "llm_disambiguated", "fallback"]


PreflightMode = Literal["strict", "warn", "off"]
PreflightOutcome = Literal["listed", "no_list", "not_probed", "off"]


class PreflightRecord(RecordModel):
    """The pre-flight model check of one endpoint (``GET {url}/models``, before the first
    model call): ``key`` its config section (``backend``, ``backends.<name>``), ``mode`` its
    ``preflight`` setting, ``outcome`` what the list said (``listed``: a model list was read;
    ``no_list``: the endpoint has none or an unreadable one; ``not_probed``: the network
    policy refused the endpoint; ``off``: not asked), ``attempts`` the requests made (0 when
    not asked), ``retried`` why each failed attempt before the last was retried (``HTTP
    503``, ``HTTP 429 (Retry-After 1 s)``, ``timed out``, ...), ``warnings`` the missing
    models let through by ``preflight: warn``."""

    key: str
    url: str
    mode: PreflightMode
    outcome: PreflightOutcome
    attempts: int = 0
    retried: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


class BackendInfo(RecordModel):
    """Which backend answered: ``text_model`` is the default text model and ``image_model``
    the image model the run asks for (what actually answered is on each step);
    ``preflight`` the pre-flight model check of each endpoint the run uses (empty offline)."""

    provider: str
    description: str
    text_model: str
    image_model: str
    execution_mode: Literal["concurrent", "sequential"]
    preflight: tuple[PreflightRecord, ...] = ()


class ConceptFilter(RecordModel):
    """The dislike rewrite: the concepts before and after, and the dislikes it applied."""

    input: tuple[str, ...]
    output: tuple[str, ...]
    dislikes: tuple[str, ...]


class TitleRecord(RecordModel):
    """The title as captioned: where it came from (``llm``, ``llm_disambiguated``,
    ``fallback``), the answer it came from, how many answers the title step saw, the
    manifest ``seq`` and the caption text."""

    title: str
    title_source: TitleSource
    title_raw: str
    attempts: int
    seq: int
    caption: str


class RunUsage(RecordModel):
    """Token usage summed over every chat step, and the number of calls: ``model_calls`` the
    chat steps recorded, ``image_calls`` the image calls that returned a payload (a cut-off
    or failed call that received nothing is recorded as a step but not counted)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    model_calls: int = 0
    image_calls: int = 0


class Timing(RecordModel):
    """Wall time of the run and of each phase that ran (seconds)."""

    wall_s: float = 0.0
    phases_s: dict[str, float] = Field(default_factory=dict)


class RunError(RecordModel):
    """How a run ended when it did not succeed. ``type`` is the exception's class name, or
    ``interrupted`` after Ctrl-C / SIGTERM; ``phase`` the phase it happened in; ``step`` and
    ``path`` the innermost failing step; ``cancelled_paths`` the steps cut off. ``status`` /
    ``attempts`` are set for a transport error, ``reason`` / ``output_preview`` for a bad
    model answer. ``requests`` is how many requests the failing chat step sent, ``reasks``
    the answers its gates rejected before it failed (each with its error), so a step that
    re-asked twice and then timed out shows all three requests, not "attempt 1 of 1"."""

    type: str
    message: str
    phase: str
    step: str | None = None
    path: str | None = None
    cancelled_paths: tuple[str, ...] = ()
    status: int | None = None
    attempts: int | None = None
    reason: str | None = None
    output_preview: str | None = None
    requests: int | None = None
    reasks: tuple[Reask, ...] = ()


class RunRecord(RecordModel):
    """Everything one run produced, successful, failed or interrupted.

    ``steps`` holds every step in declared order (the chat and action steps of the step
    trees, the image call). ``image_path`` and ``image_bytes`` describe the captioned JPEG
    that was saved (None for a prompt-only or failed run); ``upscale`` the 4K JPEG saved with
    it (None unless ``upscale.enabled`` and the records were written); ``error`` is None
    exactly when the run succeeded.
    """

    schema_version: Literal[2]
    generation_id: str
    seed: int
    created_at: str
    run_mode: Literal["full", "prompt_only"]
    backend: BackendInfo
    selected_concepts: tuple[str, ...] = ()
    concept_filter: ConceptFilter | None = None
    steps: tuple[StepEvent, ...] = ()
    final_image_prompt: str | None = None
    image_path: str | None = None
    image_bytes: int | None = None
    upscale: UpscaleRecord | None = None
    title_generation: TitleRecord | None = None
    blackbox_scoring: ScoringSection = Field(default_factory=ScoringOff)
    # context injectors: the date, the guidance, every injector's decision
    context: ContextSection = Field(default_factory=ContextOff)
    usage: RunUsage = Field(default_factory=RunUsage)
    timing: Timing = Field(default_factory=Timing)
    error: RunError | None = None

    @model_validator(mode="before")
    @classmethod
    def _version_first(cls, data: Any) -> Any:
        """A transcript of another version fails with one clear message (reading a version 1
        transcript would otherwise report dozens of unrelated field errors)."""
        if isinstance(data, dict) and "generation_id" in data:
            version = data.get("schema_version")
            if version != SCHEMA_VERSION:
                found = "no schema_version (version 1)" if version is None else f"{version!r}"
                raise ValueError(
                    f"schema_version: this reads transcripts of schema_version "
                    f"{SCHEMA_VERSION}, the file has {found}"
                )
        return data

    @property
    def succeeded(self) -> bool:
        return self.error is None

    @property
    def chat_steps(self) -> tuple[ChatEvent, ...]:
        return tuple(s for s in self.steps if isinstance(s, ChatEvent))

    @property
    def image_step(self) -> ImageEvent | None:
        return next((s for s in self.steps if isinstance(s, ImageEvent)), None)


def stopped_reason(record: RunRecord) -> str:
    """Why a run ended early, in words (``the run was interrupted in phase pipeline``; ``""``
    for a run that succeeded)."""
    if record.error is None:
        return ""
    verb = "was interrupted" if record.error.type == "interrupted" else "failed"
    return f"the run {verb} in phase {record.error.phase}"


_BEFORE_PIPELINE = frozenset({"data_load", "context", "concept_selection", "concept_filter"})


def scoring_absent(record: RunRecord) -> str:
    """Why a run has no scoring record, in words that are true of what was recorded (``""``
    when it has one): ``scoring was off for this run`` for a run that got through; for one
    that stopped after its prompt pipeline had started without scoring, that scoring was not
    configured; for one that stopped before (an earlier phase, or the pipeline phase before
    its first step), that it stopped before scoring would have run, and that the record
    cannot tell whether scoring was configured."""
    if isinstance(record.blackbox_scoring, ScoringRecord):
        return ""
    if record.error is None:
        return "scoring was off for this run"
    stopped = stopped_reason(record)
    started = record.error.phase not in _BEFORE_PIPELINE and any(
        step.path.startswith("pipeline/") for step in record.steps
    )
    if started:
        return f"{stopped}; scoring was not configured (the prompt pipeline ran without it)"
    return (
        f"{stopped}, before the prompt pipeline where scoring runs (whether scoring was "
        "configured is not recorded)"
    )


def run_status(record: RunRecord) -> str:
    """``ok``, ``interrupted`` (Ctrl-C / SIGTERM) or ``failed``."""
    if record.error is None:
        return "ok"
    return "interrupted" if record.error.type == "interrupted" else "failed"
