"""The phases of a run (:func:`run_phases`): the context injectors (with
``context.enabled``), concept selection, the concept filter, the prompt pipeline (standard
or scoring), the image and title (together), and the records phase. Each is an ``async def``
over the run (:class:`~.state.RunState`) and the typed results of the phases before it
(:class:`~.state.Loaded`, :class:`~.state.Filtered`, :class:`~.state.Prompted`, ...), and
returns its own. The driver (:mod:`.driver`) times them and attributes failures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from image_project.artifacts.manifest import existing_titles, read_manifest
from image_project.backends.base import ImageReply, ImageRequest, Message
from image_project.cli.progress import counted
from image_project.engine.nodes import ImageStep
from image_project.engine.scope import Scope
from image_project.errors import (
    ImageProjectError,
    ModelOutputError,
    StepFailedError,
    add_cancelled_paths,
)
from image_project.record.run import ConceptFilter
from image_project.run.records import write_records
from image_project.run.state import (
    Contexted,
    Filtered,
    Inputs,
    Loaded,
    Pictured,
    Prompted,
    RunState,
    Saved,
    ToRecord,
)
from image_project.seeding import derive_seed
from image_project.stages.concepts import select_concepts
from image_project.stages.profile import avoid_list, render_guidance
from image_project.stages.standard import (
    NO_GUIDANCE,
    SYSTEM_PROMPT,
    Brief,
    Guidance,
    dislike_rewrite_step,
    prompt_pipeline,
)
from image_project.stages.title import TitleResult, run_title

if TYPE_CHECKING:
    from PIL.Image import Image

    from image_project.artifacts.upscale import Upscaled, UpscaleSettings


logger = logging.getLogger("image_project.run")


def _today() -> date:
    """The run's local calendar date (what ``context.date: null`` means)."""
    return date.today()


async def _context(run: RunState, inputs: Inputs) -> Contexted:
    """The context injectors: their record, and where their guidance goes. First
    of the phases, before any model call: a plugin that fails here costs nothing. With
    ``system`` (or ``both``), the run's conversation starts from the system prompt with the
    guidance appended."""
    from image_project.context.inject import run_injectors
    from image_project.context.loading import load_injectors

    cfg = run.cfg.context
    record = run_injectors(
        load_injectors(cfg),
        run_seed=run.seed,
        today=cfg.date or _today(),
        date_source="fixed" if cfg.date else "today",
        location=cfg.injection_location,
        preferences=render_guidance(inputs.profile),
        dislikes=avoid_list(inputs.profile),
    )
    guidance = Guidance.placed(record.guidance, cfg.injection_location)
    if guidance.system:
        system_prompt = guidance.in_system(SYSTEM_PROMPT)
        run.ctx.messages = (Message("system", system_prompt),)
        record = record.model_copy(update={"system_prompt": system_prompt})
    applied = [i.name for i in record.injectors if i.applied]
    say_done(
        run,
        f"context {record.date_used}: "
        + (f"{', '.join(applied)} applied" if applied else "no guidance")
        + f" ({cfg.injection_location})",
    )
    return Contexted(record, guidance)


async def _concept_selection(run: RunState, inputs: Inputs) -> tuple[str, ...]:
    return select_concepts(inputs.categories, run.seed)


async def _concept_filter(run: RunState, inputs: Inputs, selected: tuple[str, ...]) -> Filtered:
    dislikes = avoid_list(inputs.profile)
    concepts = selected
    if dislikes:
        run.announce("concept filter")
        rewrite = dislike_rewrite_step(selected, dislikes, run_seed=run.seed)
        concepts = (await run.root.ask(rewrite)).value
    return Filtered(
        ConceptFilter(input=selected, output=concepts, dislikes=dislikes),
        Brief(concepts, render_guidance(inputs.profile), tuple(dislikes)),
    )


async def _pipeline(run: RunState, inputs: Inputs, brief: Brief, guidance: Guidance) -> Prompted:
    cfg, scoring = run.cfg, run.cfg.prompt.scoring
    if not scoring.enabled:
        run.announce(f"prompt pipeline (refinement: {cfg.prompt.refinement})")
        final_prompt = await prompt_pipeline(
            run.root,
            brief=brief,
            run_seed=run.seed,
            refinement=cfg.prompt.refinement,
            temperature=cfg.prompt.text_temperature,
            guidance=guidance,
        )
        return Prompted(_answered(final_prompt))
    # Imported here: a run without scoring (the default) never needs it, and its import
    # is about 0.03 s of the command line's start-up (bench/startup.py).
    from image_project.stages.scoring.flow import ScoringRun, ScoringSetup, describe_ensemble
    from image_project.stages.scoring.novelty import load_novelty

    text_model = run.backends.text.default_model
    judges = scoring.effective_judges(text_model, run.backends.text_models)
    run.announce(
        f"black-box scoring ({scoring.num_ideas} ideas x {counted(len(judges), 'judge')}), "
        f"then the final prompt (refinement: {cfg.prompt.refinement})"
    )
    novelty = inputs.novelty
    if novelty is None:
        novelty = await anyio.to_thread.run_sync(
            load_novelty,
            scoring.novelty.enabled,
            scoring.novelty.window,
            Path(cfg.prompt.generations_path),
        )
    logger.info("%s", describe_ensemble(scoring, judges, novelty))
    scoring_run = ScoringRun(
        ScoringSetup(
            brief=brief,
            run_seed=run.seed,
            scoring=scoring,
            judges=judges,
            selector_model=scoring.effective_selector_model(text_model, run.backends.text_models),
            selector_backend=scoring.selector_backend,
            likes=tuple(inputs.profile.taste),
            novelty=novelty,
            refinement=cfg.prompt.refinement,
            temperature=cfg.prompt.text_temperature,
            guidance=guidance,
        )
    )
    run.produced.scoring = scoring_run  # recorded also when the scoring run fails
    return Prompted(_answered(await scoring_run.run(run.root)), scoring_run)


def _answered(final_prompt: str) -> str:
    if not final_prompt:
        raise StepFailedError("pipeline: the prompt pipeline produced no final prompt")
    return final_prompt


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


@dataclass(frozen=True)
class _Checked:
    """The image call's answer and its decoded pixels (for the records phase)."""

    reply: ImageReply
    frame: Image


async def _checked(reply: ImageReply) -> _Checked:
    return _Checked(reply, await _verified(reply))


async def _image(run: RunState, scope: Scope, final_prompt: str) -> Pictured:
    """The image call, and the check that its answer is a whole image: an engine
    :class:`~image_project.engine.ImageStep` named ``image`` in ``scope``, recorded however
    it ends (with its reply, failed, or cut off with ``error.type == "cancelled"``)."""
    cfg, image_backend = run.cfg, run.backends.image
    request = ImageRequest(
        prompt=final_prompt,
        model=image_backend.default_model,
        size=cfg.image.size,
        quality=cfg.image.quality,
        seed=derive_seed(run.seed, "image"),
    )
    run.announce(f"image ({request.model}, {request.size})")
    step: ImageStep[_Checked] = ImageStep(
        name="image", request=request, check=_checked, cancelled=lambda: run.ledger.cancel_reason
    )
    drawn = await scope.ask(step)
    checked = drawn.value
    say_done(run, f"image from {checked.reply.model} ({checked.reply.format}, {request.size})")
    return Pictured(checked.reply, checked.frame, drawn.event)


async def _title(run: RunState, scope: Scope, inputs: Inputs, final_prompt: str) -> TitleResult:
    started = time.perf_counter()
    run.announce("title")
    snapshot = inputs.known_titles
    if snapshot is None:
        manifest = run.cfg.effective_titles_manifest_path
        known: Sequence[str] = existing_titles(
            await anyio.to_thread.run_sync(read_manifest, manifest)
        )
    else:
        known = snapshot
    title = await run_title(scope, final_prompt, known, seed=derive_seed(run.seed, "title"))
    run.ledger.phase_times["title"] = round(time.perf_counter() - started, 3)
    return title


class PhaseFailed(Exception):
    """Carries the failure of one of two phases run together, naming that phase (the driver
    attributes it there); the original exception is ``cause``."""

    def __init__(self, phase: str, cause: Exception) -> None:
        super().__init__(phase)
        self.phase = phase
        self.cause = cause


async def _image_and_title(
    run: RunState, inputs: Inputs, final_prompt: str
) -> tuple[Pictured, TitleResult]:
    """The ``image`` and ``title`` phases, concurrently (in order in the sequential mode), as
    the root scope's next two children: the engine places the image between the prompt
    steps and the title whatever finishes first.

    The first to fail cancels the other; its error leaves as :class:`PhaseFailed` naming its
    phase, with the other's cut-off steps as cancelled paths. ``run.ledger.unfinished`` lists
    the two until each is done, so that an interrupt is attributed to the first still going
    (the title, once the image is done)."""
    ledger = run.ledger
    ledger.unfinished = ["image", "title"]
    pictures: list[Pictured] = []
    titles: list[TitleResult] = []

    async def image(scope: Scope) -> None:
        pictures.append(await _image(run, scope, final_prompt))

    async def title(scope: Scope) -> None:
        titles.append(await _title(run, scope, inputs, final_prompt))

    try:
        await run.root.gather(None, [_phase(run, "image", image), _phase(run, "title", title)])
    except PhaseFailed as failed:
        add_cancelled_paths(failed.cause, run.cut_off())
        raise
    return pictures[0], titles[0]


def _phase(
    run: RunState, phase: str, step: Callable[[Scope], Awaitable[None]]
) -> Callable[[Scope], Awaitable[None]]:
    """``step`` as the phase ``phase``: done, it leaves ``run.ledger.unfinished``; failed,
    it says why the other phase is cut off and leaves as :class:`PhaseFailed`."""

    async def guarded(scope: Scope) -> None:
        try:
            await step(scope)
        except Exception as exc:
            run.ledger.cancel_reason = f"the {phase} call failed, so the run stopped"
            raise PhaseFailed(phase, exc) from exc
        run.ledger.unfinished.remove(phase)

    return guarded


def _upscale(frame: Image, settings: UpscaleSettings) -> tuple[Upscaled, float]:
    """The image at its 4K size, in a worker thread, and its seconds. An upscaler binary is
    killed when the run is cancelled meanwhile (nothing is written yet)."""
    from image_project.artifacts.upscale import upscale_frame

    started = time.perf_counter()
    upscaled = upscale_frame(frame, settings, anyio.from_thread.check_cancelled)
    return upscaled, time.perf_counter() - started


async def _records(run: RunState, made: ToRecord) -> Saved:
    """The records: first the 4K image's resize (``upscale.enabled``; before the manifest
    lock, so a slow upscaler holds up no other run, and cancellable: nothing is written yet),
    then every write, all or nothing (:func:`~.records.write_records`). ``phases_s.upscale``
    is the 4K image's own time within ``records``: its resize, caption and encoding."""
    run.announce("records")
    image_path = Path(run.cfg.image.generation_path) / f"{run.generation_id}_image.jpg"
    resize_s = 0.0
    if made.upscale is not None:
        upscaled, resize_s = await anyio.to_thread.run_sync(
            _upscale, made.picture.frame, made.upscale
        )
        made = replace(made, upscaled=upscaled)
        (w, h), (sw, sh) = upscaled.size, upscaled.source_size
        say_done(run, f"upscale: {sw}x{sh} -> {w}x{h} by {upscaled.method} ({resize_s:.1f} s)")
    # Shielded: a Ctrl-C that arrives now waits for the local writes (milliseconds; a second
    # or so with a 4K image) instead of leaving an image without its rows; the run then
    # counts as finished.
    with anyio.CancelScope(shield=True):
        saved = await anyio.to_thread.run_sync(write_records, run, made, image_path)
    line = f"records: image #{saved.seq:03d}, {saved.bytes:,} bytes"
    if saved.upscale is not None:
        upscale_s = round(resize_s + saved.upscale_s, 3)
        run.ledger.phase_times["upscale"] = upscale_s
        line += f"; 4K image {saved.upscale.bytes:,} bytes (upscale {upscale_s:.1f} s)"
    say_done(run, line)
    return saved


def say_done(run: RunState, what: str) -> None:
    run.say(f"[{time.perf_counter() - run.started:6.1f}s] ✓ {what}")


async def run_phases(run: RunState, loaded: Loaded, enter: Callable[[str], None]) -> None:
    """The phases after ``data_load``, in order, each handed what the ones before it
    produced; ``enter`` is told each phase's name as it starts (the driver times them and
    attributes failures). ``context`` runs first with ``context.enabled``; a prompt-only run
    stops after ``pipeline``. What the record holds is kept in ``run.produced`` as each
    phase ends."""
    produced, inputs = run.produced, loaded.inputs
    produced.upscale = loaded.upscale
    guidance = NO_GUIDANCE
    if run.cfg.context.enabled:
        enter("context")
        contexted = await _context(run, inputs)
        produced.context, guidance = contexted.record, contexted.guidance
    enter("concept_selection")
    produced.concepts = await _concept_selection(run, inputs)
    enter("concept_filter")
    filtered = await _concept_filter(run, inputs, produced.concepts)
    produced.concept_filter = filtered.concept_filter
    produced.concepts = filtered.concept_filter.output
    enter("pipeline")
    prompted = await _pipeline(run, inputs, filtered.brief, guidance)
    produced.final_prompt = prompted.final_prompt
    if run.prompt_only:
        return
    enter("image")
    picture, title = await _image_and_title(run, inputs, prompted.final_prompt)
    enter("records")
    produced.saved = await _records(
        run,
        ToRecord(
            final_prompt=prompted.final_prompt,
            concepts=produced.concepts,
            picture=picture,
            title=title,
            upscale=loaded.upscale,
        ),
    )
