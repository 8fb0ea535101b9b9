"""One generation, end to end: :func:`run_generation`.

The run is a sequence of phases, each one ``async def`` over the run's typed state
(:class:`RunState`); a short driver owns the phase names, their timing, error attribution,
interruption and writing the record::

    data_load -> concept_selection -> concept_filter -> pipeline -> image | title -> records

(``error.phase`` names the one that failed; a prompt-only run stops after ``pipeline``.)
The ``image`` and ``title`` phases run at the same time (both need only the final prompt;
the ``records`` phase captions the image with the title once both are done), one after the
other in the ``sequential`` execution mode. A failure in either cancels the other and is
attributed to its own phase; ``timing.phases_s.image`` spans both, ``phases_s.title`` is the
title's own time.

Guarantees:

* Every random choice derives from the run seed (:mod:`image_project.seeding`), recorded.
* The run's :class:`~image_project.record.run.RunRecord` is written as the transcript on
  success **and** on failure, with ``error {type, message, phase, step, path,
  cancelled_paths}`` when the run failed (plus ``status, attempts`` for a transport error,
  ``reason, output_preview`` for a bad model answer). A cancelled run (Ctrl-C) has
  ``error.type == "interrupted"`` and the steps that were in flight as ``cancelled_paths``.
* A failed run leaves no image, manifest row or generations row: the image is written, the
  manifest row appended and the generations row appended only in the ``records`` phase, the
  whole phase under the manifest lock (which also makes ``seq`` unique across processes); if
  any of it fails, the image is removed and the manifest cut back, so no half is left. The
  records phase is shielded from cancellation, so an interrupt never splits it.
* The record is then written to the run store (:mod:`image_project.store`; success,
  failure and interrupt alike) in one transaction. The transcript stays the source of
  truth: a store that cannot be written is reported loudly and changes nothing else. With a
  PostgreSQL store, ``seq`` is allocated inside that store transaction (opened in the
  records phase), so machines sharing the store never share a number.
* Each fact is decided once: the run seed (:func:`image_project.seeding.run_seed`), the judge
  models (:meth:`~image_project.config.ScoringConfig.effective_judges` with the backend's text
  model), the image model (the image backend's ``default_model``; the model that answered is
  recorded), the saved image's size (the file on disk). Progress lines, the log, the record
  and the CLI summary all read those values.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from image_project.artifacts import (
    append_generation_row,
    append_manifest_row,
    existing_titles,
    file_size,
    manifest_lock,
    next_seq,
    read_manifest,
    transcript_path,
    truncate_back,
    write_transcript,
)
from image_project.backends.base import ImageReply, ImageRequest, Usage
from image_project.backends.factory import Backends
from image_project.config import AppConfig
from image_project.engine import ChatRunner, Context, DefaultStepRecorder, Node
from image_project.errors import (
    BackendError,
    ImageProjectError,
    ModelOutputError,
    add_cancelled_paths,
    locate,
    location_of,
)
from image_project.preflight import check_outputs
from image_project.progress import ProgressRecorder, counted
from image_project.record import (
    SCHEMA_VERSION,
    ActionEvent,
    BackendInfo,
    ChatEvent,
    ConceptFilter,
    ImageEvent,
    RunError,
    RunRecord,
    RunUsage,
    ScoringOff,
    StepError,
    Timing,
    TitleRecord,
)
from image_project.seeding import derive_seed, run_seed
from image_project.stages.concepts import Categories, load_categories, select_concepts
from image_project.stages.profile import Profile, avoid_list, load_profile, render_guidance
from image_project.stages.standard import (
    CONCEPTS_KEY,
    DALLE_PROMPT_KEY,
    SYSTEM_PROMPT,
    Brief,
    dislike_rewrite_step,
    prompt_pipeline,
)
from image_project.stages.title import TitleResult, resolve_collision, run_title
from image_project.store.writer import StoreOutcome, StoreWriter

if TYPE_CHECKING:
    from PIL.Image import Image

    from image_project.stages.scoring import ScoringRun

__all__ = [
    "PHASES",
    "Inputs",
    "RunFailed",
    "RunResult",
    "RunState",
    "load_inputs",
    "new_generation_id",
    "run_generation",
]

logger = logging.getLogger("image_project.run")

PHASES: tuple[str, ...] = (
    "data_load",
    "concept_selection",
    "concept_filter",
    "pipeline",
    "image",
    "title",
    "records",
)
"""The phases of a full run, in order; a prompt-only run stops after ``pipeline``."""


@dataclass(frozen=True)
class Inputs:
    """The data files a run reads, loaded and checked before any model call."""

    categories: Categories
    profile: Profile


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


class RunFailed(ImageProjectError):
    """A run failed after it started; its transcript was written. The cause is chained;
    ``error`` is the record's error and ``record`` the whole record."""

    def __init__(self, message: str, *, record: RunRecord, transcript: Path) -> None:
        assert record.error is not None
        self.record = record
        self.error: RunError = record.error
        self.phase = record.error.phase
        self.transcript_path = transcript
        super().__init__(message)


def new_generation_id() -> str:
    """``YYYYmmdd_HHMMSS_`` (UTC) and 8 random hex digits (from the OS, never the run seed)."""
    return f"{datetime.now(UTC):%Y%m%d_%H%M%S}_{secrets.token_hex(4)}"


def _utc_iso(timespec: str = "seconds") -> str:
    return datetime.now(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


class _BufferedFileHandler(logging.FileHandler):
    """A log file written through the file's own buffer: no flush (a system call) per record,
    only for a WARNING or worse (so a problem is on disk at once) and on close."""

    def flush(self) -> None:
        return None

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        if record.levelno >= logging.WARNING:
            super().flush()

    def close(self) -> None:
        super().flush()
        super().close()


class _RunLog:
    """A per-run log file next to the transcript, attached to the package logger."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.handler = _BufferedFileHandler(path, encoding="utf-8")
        self.handler.setLevel(logging.DEBUG)
        self.handler.setFormatter(
            logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s")
        )
        self.root = logging.getLogger("image_project")
        self.previous_level = self.root.level
        self.root.addHandler(self.handler)
        if self.root.level == logging.NOTSET or self.root.level > logging.DEBUG:
            self.root.setLevel(logging.DEBUG)

    def close(self) -> None:
        self.root.removeHandler(self.handler)
        self.root.setLevel(self.previous_level)
        self.handler.close()


@dataclass(frozen=True)
class _Saved:
    """What the records phase wrote: the captioned JPEG and its manifest row."""

    path: Path
    bytes: int
    seq: int
    title: TitleResult
    caption: str


@dataclass
class RunState:
    """The typed state of one run, filled in phase by phase. Steps that capture values for
    later steps do so in ``ctx.outputs`` (the engine's captures); everything a phase hands to
    a later phase is a field here."""

    cfg: AppConfig
    backends: Backends
    generation_id: str
    seed: int
    prompt_only: bool
    created_at: str
    ctx: Context
    runner: ChatRunner
    recorder: DefaultStepRecorder
    say: Callable[[str], None]
    started: float
    store: StoreWriter | None = None
    inputs: Inputs | None = None
    concepts: tuple[str, ...] = ()
    concept_filter: ConceptFilter | None = None
    brief: Brief | None = None
    scoring: ScoringRun | None = None
    final_prompt: str | None = None
    image: ImageReply | None = None
    image_event: ImageEvent | None = None
    frame: Image | None = None
    """The image's decoded pixels (checked in phase ``image``), for the records phase."""
    title: TitleResult | None = None
    saved: _Saved | None = None
    image_order: tuple[int, ...] = ()
    cut_off: list[str] = field(default_factory=list)
    """Paths cut off outside the step trees (the image call); the trees' own are the
    recorder's ``in_flight``."""
    cancel_reason: str = "the run was interrupted during the image call"
    """What a cut-off image call records as its error message."""
    unfinished: list[str] = field(default_factory=list)
    """Of the ``image`` and ``title`` phases (run together), those not done yet."""
    phase_times: dict[str, float] = field(default_factory=dict)

    async def run_tree(self, node: Node) -> None:
        await self.runner.run(self.ctx, node)

    def announce(self, line: str) -> None:
        self.say(f"→ {line}")

    def to_record(self, error: RunError | None, wall_s: float) -> RunRecord:
        """The run's record from whatever it got to."""
        steps: list[ChatEvent | ActionEvent | ImageEvent] = list(self.ctx.steps)
        if self.image_event is not None:
            steps.append(self.image_event)
        steps.sort(key=lambda event: event.order)
        chats = [e for e in self.ctx.steps if isinstance(e, ChatEvent)]
        usage = Usage.total(e.usage for e in chats)
        saved = self.saved
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
            ),
            selected_concepts=self.concepts,
            concept_filter=self.concept_filter,
            steps=tuple(steps),
            final_image_prompt=self.final_prompt,
            image_path=str(saved.path) if saved else None,
            image_bytes=saved.bytes if saved else None,
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
            blackbox_scoring=self.scoring.record() if self.scoring else ScoringOff(),
            usage=RunUsage(
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                total_tokens=usage.total_tokens,
                model_calls=len(chats),
                image_calls=(
                    1 if self.image_event and self.image_event.received_bytes is not None else 0
                ),
            ),
            timing=Timing(wall_s=wall_s, phases_s=dict(self.phase_times)),
            error=error,
        )


# --------------------------------------------------------------------------- phases


async def _concept_selection(run: RunState) -> None:
    assert run.inputs is not None
    run.concepts = select_concepts(run.inputs.categories, run.seed)


async def _concept_filter(run: RunState) -> None:
    assert run.inputs is not None
    dislikes = avoid_list(run.inputs.profile)
    concepts = run.concepts
    if dislikes:
        run.announce("concept filter")
        await run.run_tree(dislike_rewrite_step(concepts, dislikes, run_seed=run.seed))
        concepts = tuple(run.ctx.outputs[CONCEPTS_KEY])
    run.concept_filter = ConceptFilter(input=run.concepts, output=concepts, dislikes=dislikes)
    run.concepts = concepts
    run.brief = Brief(concepts, render_guidance(run.inputs.profile), tuple(dislikes))


async def _pipeline(run: RunState) -> None:
    assert run.inputs is not None and run.brief is not None
    cfg, scoring = run.cfg, run.cfg.prompt.scoring
    if not scoring.enabled:
        run.announce(f"prompt pipeline (refinement: {cfg.prompt.refinement})")
        await run.run_tree(
            prompt_pipeline(
                brief=run.brief,
                run_seed=run.seed,
                refinement=cfg.prompt.refinement,
                temperature=cfg.prompt.text_temperature,
            )
        )
    else:
        # Imported here: a run without scoring (the default) never needs it, and its import
        # is about 0.03 s of the command line's start-up (bench/startup.py).
        from image_project.stages.scoring import (
            ScoringRun,
            ScoringSetup,
            describe_ensemble,
            load_novelty,
        )

        text_model = run.backends.text.default_model
        judges = scoring.effective_judges(text_model)
        run.announce(
            f"black-box scoring ({scoring.num_ideas} ideas x {counted(len(judges), 'judge')}), "
            f"then the final prompt (refinement: {cfg.prompt.refinement})"
        )
        novelty = await anyio.to_thread.run_sync(
            load_novelty,
            scoring.novelty.enabled,
            scoring.novelty.window,
            Path(cfg.prompt.generations_path),
        )
        logger.info("%s", describe_ensemble(scoring, judges, novelty))
        run.scoring = ScoringRun(
            ScoringSetup(
                brief=run.brief,
                run_seed=run.seed,
                scoring=scoring,
                judges=judges,
                selector_model=scoring.effective_selector_model(text_model),
                likes=tuple(run.inputs.profile.taste),
                novelty=novelty,
                refinement=cfg.prompt.refinement,
                temperature=cfg.prompt.text_temperature,
            )
        )
        await run.scoring.run(run.runner, run.ctx)
    run.final_prompt = str(run.ctx.outputs[DALLE_PROMPT_KEY])


class _ImageCall:
    """The image call as it goes: what was asked, when, and the reply once there is one.
    :meth:`event` records it however it ended."""

    def __init__(self, request: ImageRequest, order: tuple[int, ...]) -> None:
        self.request = request
        self.order = order
        self.created_at = _utc_iso("milliseconds")
        self.started = time.perf_counter()
        self.reply: ImageReply | None = None

    def event(self, error: StepError | None = None, attempts: int | None = None) -> ImageEvent:
        request, reply = self.request, self.reply
        assert request.model is not None and request.seed is not None
        return ImageEvent(
            order=self.order,
            prompt=request.prompt,
            model=reply.model if reply else request.model,
            size=request.size,
            quality=request.quality,
            seed=request.seed,
            created_at=self.created_at,
            latency_ms=round((time.perf_counter() - self.started) * 1000, 3),
            attempts=reply.attempts if reply else attempts,
            received_bytes=len(reply.data) if reply else None,
            format=reply.format if reply else None,
            revised_prompt=reply.revised_prompt if reply else None,
            metadata=dict(reply.metadata) if reply else {},
            error=error,
            pacing_wait_ms=reply.pacing_wait_ms if reply else 0.0,
        )


def _decode(data: bytes) -> Image:
    """:func:`~image_project.artifacts.image.decode_checked`, in a worker thread. Pillow is
    imported with the image files' module on a run's first image, here, off the event loop: a
    prompt-only run never needs it (tests/test_startup.py)."""
    from image_project.artifacts.image import decode_checked

    return decode_checked(data)


async def _verified(reply: ImageReply) -> Image:
    """Decode the whole image now, before the records phase, so an answer that is not a
    readable image fails here, in phase ``image`` (cancelling the title call if it is still
    going). The decoded pixels are kept for the records phase, which then only captions and
    encodes them."""
    try:
        return await anyio.to_thread.run_sync(_decode, reply.data, abandon_on_cancel=True)
    except ImageProjectError as exc:
        raise ModelOutputError(
            "undecodable_image",
            f"the image backend answered with data that is {exc}",
            output=bytes(reply.data[:32]),
        ) from exc


async def _image(run: RunState) -> None:
    """The image call, and the check that its answer is a whole image. The call is recorded
    however it ends: with its reply, cut off (``error.type == "cancelled"``, and listed as
    cut off), or failed (the error, which names the ``image`` step)."""
    assert run.final_prompt is not None
    cfg, image_backend = run.cfg, run.backends.image
    request = ImageRequest(
        prompt=run.final_prompt,
        model=image_backend.default_model,
        size=cfg.image.size,
        quality=cfg.image.quality,
        seed=derive_seed(run.seed, "image"),
    )
    run.announce(f"image ({request.model}, {request.size})")
    call = _ImageCall(request, run.image_order)
    try:
        call.reply = await image_backend.generate(request)
        run.frame = await _verified(call.reply)
    except Exception as exc:
        locate(exc, path="image", name="image", node_type="image")
        attempts = exc.attempts if isinstance(exc, BackendError) else None
        run.image_event = call.event(StepError.of(exc), attempts)
        raise
    except BaseException:  # cancelled (Ctrl-C, SIGTERM) or KeyboardInterrupt
        run.image_event = call.event(StepError(type="cancelled", message=run.cancel_reason))
        run.cut_off.append("image")
        raise
    run.image = image = call.reply
    run.image_event = call.event()
    _say_done(run, f"image from {image.model} ({image.format}, {request.size})")


async def _title(run: RunState) -> None:
    assert run.final_prompt is not None
    started = time.perf_counter()
    run.announce("title")
    manifest = run.cfg.effective_titles_manifest_path
    known = existing_titles(await anyio.to_thread.run_sync(read_manifest, manifest))
    run.title = await run_title(
        run.runner, run.ctx, run.final_prompt, known, seed=derive_seed(run.seed, "title")
    )
    run.phase_times["title"] = round(time.perf_counter() - started, 3)


class _PhaseFailed(Exception):
    """Carries the failure of one of two phases run together, naming that phase (the driver
    attributes it there); the original exception is ``cause``."""

    def __init__(self, phase: str, cause: Exception) -> None:
        super().__init__(phase)
        self.phase = phase
        self.cause = cause


async def _image_and_title(run: RunState) -> None:
    """The ``image`` and ``title`` phases, concurrently (in order in the sequential mode).

    The image's place in the record is reserved first, so it is recorded between the prompt
    trees and the title whatever finishes first. The first to fail cancels the other; its
    error leaves as :class:`_PhaseFailed` naming its phase, with the other's cut-off steps
    as cancelled paths. ``run.unfinished`` lists the two until each is done, so that an
    interrupt is attributed to the first still going (the title, once the image is done)."""
    run.image_order = (run.ctx.roots_run,)
    run.ctx.roots_run += 1
    run.unfinished = ["image", "title"]
    if run.cfg.run.concurrency == "sequential":
        for phase, step in (("image", _image), ("title", _title)):
            try:
                await step(run)
            except Exception as exc:
                raise _PhaseFailed(phase, exc) from exc
            run.unfinished.remove(phase)
        return
    failed: list[_PhaseFailed] = []
    async with anyio.create_task_group() as tg:

        async def guarded(phase: str, step: _Phase) -> None:
            try:
                await step(run)
            except Exception as exc:  # kept, not raised: no ExceptionGroup to unwrap
                failed.append(_PhaseFailed(phase, exc))
                run.cancel_reason = f"the {phase} call failed, so the run stopped"
                tg.cancel_scope.cancel()
            else:
                run.unfinished.remove(phase)

        tg.start_soon(guarded, "image", _image)
        tg.start_soon(guarded, "title", _title)
    if failed:
        first = failed[0]
        add_cancelled_paths(first.cause, [*run.recorder.in_flight, *run.cut_off])
        raise first from first.cause


async def _records(run: RunState) -> None:
    assert run.image is not None and run.title is not None and run.final_prompt is not None
    assert run.image_event is not None
    run.announce("records")
    image_path = Path(run.cfg.image.generation_path) / f"{run.generation_id}_image.jpg"
    # Shielded: a Ctrl-C that arrives now waits for the local writes (milliseconds) instead
    # of leaving an image without its rows; the run then counts as finished.
    with anyio.CancelScope(shield=True):
        saved = await anyio.to_thread.run_sync(_write_records, run, image_path)
    run.saved = saved
    _say_done(run, f"records: image #{saved.seq:03d}, {saved.bytes:,} bytes")


def _say_done(run: RunState, what: str) -> None:
    run.say(f"[{time.perf_counter() - run.started:6.1f}s] ✓ {what}")


_Phase = Callable[[RunState], Awaitable[None]]


def _phases(prompt_only: bool) -> list[tuple[str, _Phase]]:
    phases: list[tuple[str, _Phase]] = [
        ("concept_selection", _concept_selection),
        ("concept_filter", _concept_filter),
        ("pipeline", _pipeline),
    ]
    if not prompt_only:
        phases += [("image", _image_and_title), ("records", _records)]
    return phases


# --------------------------------------------------------------------------- driver


async def run_generation(
    cfg: AppConfig,
    backends: Backends,
    *,
    inputs: Inputs | None = None,
    seed: int | None = None,
    prompt_only: bool | None = None,
    generation_id: str | None = None,
    emit: Callable[[str], None] | None = None,
    store: StoreWriter | None = None,
    recorder: DefaultStepRecorder | None = None,
) -> RunResult:
    """Run one generation. ``emit`` receives progress lines (None = silent). ``seed`` None
    means the configured seed (``prompt.random_seed``) or, without one, a fresh recorded
    seed. ``store`` is the run store writer to use (the CLI shares one across runs); None
    opens one for this run when ``store.enabled`` (and closes it at the end). ``recorder``
    replaces the step recorder (default: progress lines with ``emit``, else a silent one),
    e.g. to read which parallel groups ran (``recorder.groups``).

    The run is written to the store at its end (success, failure or interrupt), after the
    transcript; a store that cannot be written is reported and changes nothing else.

    Raises :class:`RunFailed` (transcript written, cause chained) when a started run fails;
    an input file that cannot be loaded fails the run in phase ``data_load``.
    """
    started = time.perf_counter()
    generation_id = generation_id or new_generation_id()
    prompt_only = cfg.run.mode == "prompt_only" if prompt_only is None else prompt_only
    log_dir = Path(cfg.image.log_path)
    t_path = transcript_path(log_dir, generation_id)
    run_log = _RunLog(log_dir / f"{generation_id}.log")
    say = emit or (lambda _line: None)
    own_store = store is None and cfg.store.enabled
    if own_store:
        store = StoreWriter(cfg.effective_store_url)
    recorder = recorder or (ProgressRecorder(say) if emit else DefaultStepRecorder())
    run = RunState(
        cfg=cfg,
        backends=backends,
        generation_id=generation_id,
        seed=seed if seed is not None else run_seed(cfg.prompt.random_seed),
        prompt_only=prompt_only,
        created_at=_utc_iso(),
        ctx=Context.with_system(SYSTEM_PROMPT),
        runner=ChatRunner(backends.text, recorder=recorder, mode=cfg.run.concurrency),
        recorder=recorder,
        say=say,
        started=started,
        store=store,
    )
    logger.info(
        "Generation %s started with seed %d (%s)", generation_id, run.seed, backends.description
    )
    phase, phase_start = "data_load", time.perf_counter()

    stored: list[StoreOutcome | None] = []

    def finish(error: RunError | None) -> RunRecord:
        """Write the transcript (success or failure), then the run store; close the run
        log (and a store opened for this run)."""
        run.phase_times.setdefault(phase, round(time.perf_counter() - phase_start, 3))
        record = run.to_record(error, round(time.perf_counter() - started, 3))
        try:
            write_transcript(t_path, record)
            stored.append(_save_to_store(run, record, t_path))
        finally:
            if store is not None:
                store.abandon()
                if own_store:
                    store.close()
            run_log.close()
        return record

    try:
        run.inputs = inputs or load_inputs(cfg)
        for name, step in _phases(prompt_only):
            now = time.perf_counter()
            run.phase_times[phase] = round(now - phase_start, 3)
            phase, phase_start = name, now
            await step(run)
        run.phase_times[phase] = round(time.perf_counter() - phase_start, 3)
        phase, phase_start = "done", time.perf_counter()
    except Exception as caught:
        exc = caught.cause if isinstance(caught, _PhaseFailed) else caught
        if isinstance(caught, _PhaseFailed):
            run.phase_times.setdefault(phase, round(time.perf_counter() - phase_start, 3))
            phase = caught.phase
        error = _run_error(exc, phase)
        logger.error(
            "Generation %s failed in phase %s: %s: %s", generation_id, phase, error.type, exc
        )
        record = finish(error)
        raise RunFailed(
            f"run failed in phase {phase}"
            + (f" at {error.path}" if error.path else "")
            + f": {error.type}: {exc}",
            record=record,
            transcript=t_path,
        ) from exc
    except BaseException as exc:
        # Cancellation (Ctrl-C / SIGTERM through the CLI) or a KeyboardInterrupt: the steps
        # in flight were cut off; nothing was written but this transcript and its store row
        # (records are shielded). Record what we know, then let it propagate.
        if phase == "image" and run.unfinished:  # image and title go together: the first
            phase = run.unfinished[0]  # still going (the title once the image is done)
        cut_off = [*run.recorder.in_flight, *run.cut_off]
        finish(
            RunError(
                type="interrupted",
                message=f"the run was interrupted in phase {phase} ({type(exc).__name__})"
                + (f"; {len(cut_off)} step(s) in flight were cancelled" if cut_off else ""),
                phase=phase,
                cancelled_paths=tuple(cut_off),
            )
        )
        logger.warning(
            "Generation %s interrupted in phase %s; transcript written to %s",
            generation_id,
            phase,
            t_path,
        )
        raise
    record = finish(None)
    return RunResult(record=record, transcript_path=t_path, log_path=run_log.path, store=stored[0])


def _store_seq(run: RunState, store: StoreWriter, local_next: int) -> int:
    """``seq`` from a store that allocates it (PostgreSQL), else ``local_next``; a store that
    cannot is reported and this machine's manifest number is used."""
    seq, problem = store.claim_seq(local_next)
    if problem is not None:
        message = (
            f"store: could not allocate the title number in {store.shown_url} ({problem}); "
            f"using #{seq:03d} from this machine's manifest"
        )
        logger.error("%s", message)
        run.say(f"✗ {message}")
    return seq


def _save_to_store(run: RunState, record: RunRecord, t_path: Path) -> StoreOutcome | None:
    """Write the run to the store, if there is one; a failure is said loudly (progress line
    and log) and does not change how the run ends: the transcript has everything."""
    if run.store is None:
        return None
    outcome = run.store.save(record)
    if outcome.written:
        logger.info("Generation %s written to the run store %s", record.generation_id, outcome.url)
        return outcome
    message = (
        f"store: run {record.generation_id} was NOT written to {outcome.url} "
        f"({outcome.error}); its transcript has everything: "
        f"image-project runs import {t_path}"
    )
    logger.error("%s", message)
    run.say(f"✗ {message}")
    return outcome


def _run_error(exc: Exception, phase: str) -> RunError:
    loc = location_of(exc)
    return RunError(
        type=type(exc).__name__,
        message=str(exc),
        phase=phase,
        step=loc.name if loc else None,
        path=loc.path if loc else None,
        cancelled_paths=loc.cancelled_paths if loc else (),
        status=exc.status if isinstance(exc, BackendError) else None,
        attempts=exc.attempts if isinstance(exc, BackendError) else None,
        reason=exc.reason if isinstance(exc, ModelOutputError) else None,
        output_preview=exc.output_preview if isinstance(exc, ModelOutputError) else None,
    )


def _write_records(run: RunState, image_path: Path) -> _Saved:
    """The records phase in one call (one thread, so a cancellation cannot split it).

    All or nothing, under the manifest lock: allocate seq, settle the title against the
    freshest manifest, write the captioned image, append the manifest row, append the
    generations row. If anything after the image fails, the image is removed and the manifest
    is cut back to its size before this run (safe: the lock is still held), so a failed
    records phase leaves neither an image nor a row behind."""
    assert run.image is not None and run.image_event is not None and run.title is not None
    assert run.final_prompt is not None and run.frame is not None
    from image_project.artifacts.image import caption_text, save_captioned_frame

    cfg, manifest = run.cfg, run.cfg.effective_titles_manifest_path
    with manifest_lock(manifest):
        rows = read_manifest(manifest)
        seq = next_seq(rows)
        if run.store is not None:
            seq = _store_seq(run, run.store, seq)
        title = resolve_collision(run.title, existing_titles(rows))
        manifest_before = file_size(manifest)
        caption = caption_text(seq, title.title)
        save_captioned_frame(run.frame, image_path, caption, font_path=cfg.image.caption_font_path)
        try:
            append_manifest_row(
                manifest,
                {
                    "seq": str(seq),
                    "title": title.title,
                    "generation_id": run.generation_id,
                    "image_prompt": run.final_prompt,
                    "image_path": str(image_path),
                    "created_at": "",
                    "model": run.image_event.model,
                    "size": run.image_event.size,
                    "quality": run.image_event.quality,
                    "seed": str(run.seed),
                    "title_source": title.source,
                    "title_raw": title.raw,
                },
            )
            append_generation_row(
                Path(cfg.prompt.generations_path),
                {
                    "generation_id": run.generation_id,
                    "selected_concepts": list(run.concepts),
                    "final_image_prompt": run.final_prompt,
                    "image_path": str(image_path),
                    "created_at": run.created_at,
                    "seed": str(run.seed),
                },
            )
            saved_bytes = image_path.stat().st_size
        except BaseException:
            try:
                image_path.unlink(missing_ok=True)
                truncate_back(manifest, manifest_before)
            except OSError as undo:
                logger.error(
                    "could not undo this run's records after a failure (%s: %s); check %s "
                    "and %s for a row of generation %s",
                    type(undo).__name__,
                    undo,
                    image_path,
                    manifest,
                    run.generation_id,
                )
            raise
    return _Saved(path=image_path, bytes=saved_bytes, seq=seq, title=title, caption=caption)
