"""The typed state of one run (:class:`RunState`) and what a run hands back: its inputs
(:func:`load_inputs`, checked before any model call), its result (:class:`RunResult`) or its
failure (:class:`RunFailed`), and the record built from the state (:meth:`RunState.to_record`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from image_project.backends.base import ImageReply, Usage
from image_project.backends.factory import Backends
from image_project.config.models import AppConfig
from image_project.engine.context import Context
from image_project.engine.recorder import DefaultStepRecorder
from image_project.engine.scope import Scope
from image_project.errors import (
    ImageProjectError,
)
from image_project.preflight import check_outputs
from image_project.record.context import ContextOff, ContextRecord
from image_project.record.events import ChatEvent, ImageEvent
from image_project.record.run import (
    SCHEMA_VERSION,
    BackendInfo,
    ConceptFilter,
    RunError,
    RunRecord,
    RunUsage,
    Timing,
    TitleRecord,
)
from image_project.record.scoring import ScoringOff
from image_project.record.upscale import UpscaleRecord
from image_project.stages.concepts import Categories, load_categories
from image_project.stages.profile import Profile, check_profile_size, load_profile
from image_project.stages.standard import Brief, Guidance
from image_project.stages.title import TitleResult
from image_project.store.writer import StoreOutcome, StoreWriter

if TYPE_CHECKING:
    from PIL.Image import Image

    from image_project.artifacts.pending import PendingTranscript
    from image_project.artifacts.upscale import SavedUpscale, Upscaled, UpscaleSettings
    from image_project.stages.scoring.flow import ScoringRun
    from image_project.stages.scoring.novelty import NoveltyState


logger = logging.getLogger("image_project.run")

PHASES: tuple[str, ...] = (
    "data_load",
    "context",
    "concept_selection",
    "concept_filter",
    "pipeline",
    "image",
    "title",
    "records",
)
"""The phases of a full run, in order; a prompt-only run stops after ``pipeline``; ``context``
runs only with ``context.enabled``."""


@dataclass(frozen=True)
class Inputs:
    """The data files a run reads, loaded and checked before any model call.

    ``known_titles`` and ``novelty``: the titles to avoid and the novelty history, read once
    for every run of a batch (:mod:`.batch`) so that a run asks the same whatever order the
    batch's runs finish in; None: the run reads them itself when it needs them."""

    categories: Categories
    profile: Profile
    known_titles: tuple[str, ...] | None = None
    novelty: NoveltyState | None = None


def load_inputs(cfg: AppConfig) -> Inputs:
    """Load the categories and profile files, check an explicitly configured caption font,
    then check the output directories and existing record CSVs
    (:func:`image_project.preflight.check_outputs`), so that none of them fails after model
    calls were paid for. Raises InputFileError naming the bad file or directory (and, for an
    output, its config key); the input files are checked first, so a bad one creates
    nothing."""
    font = cfg.image.caption_font_path
    if font is not None:
        from image_project.artifacts.image import load_caption_font

        load_caption_font(14, Path(font))  # InputFileError naming the file and the key
    inputs = Inputs(
        categories=load_categories(cfg.prompt.categories_path),
        profile=load_profile(cfg.prompt.profile_path),
    )
    check_profile_size(inputs.profile, cfg.prompt.profile_path, cfg.prompt.max_profile_chars)
    check_outputs(cfg)
    return inputs


@dataclass(frozen=True)
class RunResult:
    """A finished run: its record (what the transcript holds), where its files are, and
    whether it reached the run store (None when the store is disabled)."""

    record: RunRecord
    transcript_path: Path
    log_path: Path
    store: StoreOutcome | None = None
    unwritten: str | None = None
    """Set when the transcript could not be written (a full disk): one line saying so, and
    where the run is recorded instead."""


class RunFailed(ImageProjectError):
    """A run failed after it started; its transcript was written (unless ``unwritten``: one
    line saying it could not be, a full disk, and where the run is recorded instead). The
    cause is chained; ``error`` is the record's error and ``record`` the whole record."""

    def __init__(
        self, message: str, *, record: RunRecord, transcript: Path, unwritten: str | None = None
    ) -> None:
        assert record.error is not None
        self.record = record
        self.error: RunError = record.error
        self.phase = record.error.phase
        self.transcript_path = transcript
        self.unwritten = unwritten
        super().__init__(message)


def new_generation_id() -> str:
    """``YYYYmmdd_HHMMSS_`` (UTC) and 8 random hex digits (from the OS, never the run seed)."""
    return f"{datetime.now(UTC):%Y%m%d_%H%M%S}_{secrets.token_hex(4)}"


def utc_iso(timespec: str = "seconds") -> str:
    return datetime.now(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


@dataclass(frozen=True)
class Saved:
    """What the records phase wrote: the captioned JPEG and its manifest row, and the 4K
    JPEG (``upscale``, with the seconds its caption and encoding took) when there is one."""

    path: Path
    bytes: int
    seq: int
    title: TitleResult
    caption: str
    upscale: SavedUpscale | None = None
    upscale_s: float = 0.0


@dataclass(frozen=True)
class Loaded:
    """Phase ``data_load``: the run's checked input files, and the 4K image's checked
    settings (``upscale.enabled``, a full run; else None)."""

    inputs: Inputs
    upscale: UpscaleSettings | None = None


@dataclass(frozen=True)
class Contexted:
    """Phase ``context``: the injectors' record and where their guidance goes."""

    record: ContextRecord
    guidance: Guidance


@dataclass(frozen=True)
class Filtered:
    """Phase ``concept_filter``: its record (the concepts before and after) and the brief
    the prompt pipeline works from."""

    concept_filter: ConceptFilter
    brief: Brief


@dataclass(frozen=True)
class Prompted:
    """Phase ``pipeline``: the final image prompt, and the scoring run (with scoring)."""

    final_prompt: str
    scoring: ScoringRun | None = None


@dataclass(frozen=True)
class Pictured:
    """Phase ``image``: the image call's answer, its decoded pixels and its record."""

    reply: ImageReply
    frame: Image
    event: ImageEvent


@dataclass(frozen=True)
class ToRecord:
    """What the records phase writes: the final prompt, the concepts, the image, the title,
    and the 4K image (its settings and its pixels, when the run made one)."""

    final_prompt: str
    concepts: tuple[str, ...]
    picture: Pictured
    title: TitleResult
    upscale: UpscaleSettings | None = None
    upscaled: Upscaled | None = None


@dataclass
class Produced:
    """What the phases produced that the record holds, each set by the phase chain
    (:func:`image_project.run.phases.run_phases`) once its phase is done; read only by
    :meth:`RunState.to_record`, which records whatever the run got to. A phase never reads
    these: it is handed its inputs as typed values."""

    context: ContextRecord | None = None
    """The context injectors' record (``context.enabled`` only)."""
    concepts: tuple[str, ...] = ()
    concept_filter: ConceptFilter | None = None
    scoring: ScoringRun | None = None
    final_prompt: str | None = None
    upscale: UpscaleSettings | None = None
    """The 4K image's checked settings (``upscale.enabled``, a full run), else None."""
    saved: Saved | None = None


@dataclass
class Ledger:
    """Where the run is: phase times, the image and title phases not done yet, what a
    cut-off image call records, and the pending transcript
    (:mod:`image_project.artifacts.pending`) from the records phase's first write until the
    transcript is written."""

    phase_times: dict[str, float] = field(default_factory=dict)
    unfinished: list[str] = field(default_factory=list)
    """Of the ``image`` and ``title`` phases (run together), those not done yet."""
    cancel_reason: str = "the run was interrupted during the image call"
    """What a cut-off image call records as its error message."""
    pending: PendingTranscript | None = None


@dataclass(frozen=True)
class RunState:
    """One run: what it is given (config, backends, store, seed, ids, where its progress
    lines go, the engine context and its root scope), what its phases produced for the
    record (:class:`Produced`) and its ledger (:class:`Ledger`). What a phase hands to the
    next is a typed value (:mod:`image_project.run.phases`), never a field here."""

    cfg: AppConfig
    backends: Backends
    generation_id: str
    seed: int
    prompt_only: bool
    created_at: str
    ctx: Context
    root: Scope
    """The root scope of ``ctx`` (its runner's): every step of the run is its child or below
    it."""
    recorder: DefaultStepRecorder
    say: Callable[[str], None]
    started: float
    store: StoreWriter | None = None
    produced: Produced = field(default_factory=Produced)
    ledger: Ledger = field(default_factory=Ledger)

    def cut_off(self) -> list[str]:
        """The paths of the steps an interrupt or a failing sibling cut off: those still in
        flight, then the image call if it was recorded as cancelled."""
        cancelled = [e.path for e in self.ctx.steps if isinstance(e, ImageEvent) and e.cancelled]
        return [*self.recorder.in_flight, *cancelled]

    def announce(self, line: str) -> None:
        self.say(f"→ {line}")

    def _upscale_record(self) -> UpscaleRecord | None:
        """The 4K image's record, once the records phase wrote it."""
        up = self.produced.saved.upscale if self.produced.saved is not None else None
        if up is None:
            return None
        upscaler = (
            self.produced.upscale.upscaler
            if self.produced.upscale is not None and up.method == "realesrgan"
            else None
        )
        return UpscaleRecord(
            path=str(up.path),
            bytes=up.bytes,
            size=f"{up.size[0]}x{up.size[1]}",
            source_size=f"{up.source_size[0]}x{up.source_size[1]}",
            method=up.method,
            upscaler=str(upscaler.binary) if upscaler is not None else None,
            model=upscaler.model_name if upscaler is not None else None,
        )

    def to_record(self, error: RunError | None, wall_s: float) -> RunRecord:
        """The run's record from whatever it got to."""
        steps = self.ctx.steps  # in declared order (the recorder inserts by position)
        chats = [e for e in self.ctx.steps if isinstance(e, ChatEvent)]
        usage = Usage.total(e.usage for e in chats)
        saved = self.produced.saved
        return RunRecord(
            schema_version=SCHEMA_VERSION,
            generation_id=self.generation_id,
            seed=self.seed,
            created_at=self.created_at,
            run_mode="prompt_only" if self.prompt_only else "full",
            backend=BackendInfo(
                provider=self.backends.provider,
                description=self.backends.description,
                text_model=self.backends.text.default_model,
                image_model=self.backends.image.default_model,
                execution_mode=self.cfg.run.concurrency,
                preflight=self.backends.preflight,
            ),
            selected_concepts=self.produced.concepts,
            concept_filter=self.produced.concept_filter,
            steps=tuple(steps),
            final_image_prompt=self.produced.final_prompt,
            image_path=str(saved.path) if saved else None,
            image_bytes=saved.bytes if saved else None,
            upscale=self._upscale_record(),
            title_generation=(
                TitleRecord(
                    title=saved.title.title,
                    title_source=saved.title.source,
                    title_raw=saved.title.raw,
                    attempts=saved.title.attempts,
                    seq=saved.seq,
                    caption=saved.caption,
                )
                if saved
                else None
            ),
            blackbox_scoring=self.produced.scoring.record()
            if self.produced.scoring
            else ScoringOff(),
            context=self.produced.context or ContextOff(),
            usage=RunUsage(
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                total_tokens=usage.total_tokens,
                model_calls=len(chats),
                image_calls=(
                    1
                    if any(
                        isinstance(e, ImageEvent) and e.received_bytes is not None for e in steps
                    )
                    else 0
                ),
            ),
            timing=Timing(wall_s=wall_s, phases_s=dict(self.ledger.phase_times)),
            error=error,
        )
