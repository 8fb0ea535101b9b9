"""The phases of a run, each ``async def`` over the run's :class:`~.state.RunState`:
the context injectors (with ``context.enabled``), concept selection, the concept filter, the prompt pipeline (standard or scoring), the image
and title (together), and the records phase. The driver (:mod:`.driver`) times them and
attributes failures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from image_project.artifacts import (
    existing_titles,
    read_manifest,
)
from image_project.backends.base import ImageReply, ImageRequest, Message
from image_project.engine import ImageStep
from image_project.errors import (
    ImageProjectError,
    ModelOutputError,
    add_cancelled_paths,
)
from image_project.progress import counted
from image_project.record import (
    ConceptFilter,
    ImageEvent,
)
from image_project.run.records import write_records
from image_project.run.state import RunState
from image_project.seeding import derive_seed
from image_project.stages.concepts import select_concepts
from image_project.stages.profile import avoid_list, render_guidance
from image_project.stages.standard import (
    CONCEPTS_KEY,
    DALLE_PROMPT_KEY,
    SYSTEM_PROMPT,
    Brief,
    Guidance,
    dislike_rewrite_step,
    prompt_pipeline,
)
from image_project.stages.title import run_title

if TYPE_CHECKING:
    from PIL.Image import Image


__all__ = ["PhaseFailed", "phases_for", "say_done"]

logger = logging.getLogger("image_project.run")


def _today() -> date:
    """The run's local calendar date (what ``context.date: null`` means)."""
    return date.today()


async def _context(run: RunState) -> None:
    """The context injectors: their record, and where their guidance goes. First
    of the phases, before any model call: a plugin that fails here costs nothing. With
    ``system`` (or ``both``), the run's conversation starts from the system prompt with the
    guidance appended."""
    from image_project.context import load_injectors, run_injectors

    assert run.inputs is not None
    cfg = run.cfg.context
    run.context = run_injectors(
        load_injectors(cfg),
        run_seed=run.seed,
        today=cfg.date or _today(),
        date_source="fixed" if cfg.date else "today",
        location=cfg.injection_location,
        preferences=render_guidance(run.inputs.profile),
        dislikes=avoid_list(run.inputs.profile),
    )
    run.guidance = Guidance.placed(run.context.guidance, cfg.injection_location)
    if run.guidance.system:
        system_prompt = run.guidance.in_system(SYSTEM_PROMPT)
        run.ctx.messages = (Message("system", system_prompt),)
        run.context = run.context.model_copy(update={"system_prompt": system_prompt})
    applied = [i.name for i in run.context.injectors if i.applied]
    say_done(
        run,
        f"context {run.context.date_used}: "
        + (f"{', '.join(applied)} applied" if applied else "no guidance")
        + f" ({cfg.injection_location})",
    )


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
                guidance=run.guidance,
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
        judges = scoring.effective_judges(text_model, run.backends.text_models)
        run.announce(
            f"black-box scoring ({scoring.num_ideas} ideas x {counted(len(judges), 'judge')}), "
            f"then the final prompt (refinement: {cfg.prompt.refinement})"
        )
        novelty = run.inputs.novelty
        if novelty is None:
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
                selector_model=scoring.effective_selector_model(
                    text_model, run.backends.text_models
                ),
                selector_backend=scoring.selector_backend,
                likes=tuple(run.inputs.profile.taste),
                novelty=novelty,
                refinement=cfg.prompt.refinement,
                temperature=cfg.prompt.text_temperature,
                guidance=run.guidance,
            )
        )
        await run.scoring.run(run.runner, run.ctx)
    run.final_prompt = str(run.ctx.outputs[DALLE_PROMPT_KEY])


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


async def _image(run: RunState) -> None:
    """The image call, and the check that its answer is a whole image: an engine
    :class:`~image_project.engine.ImageStep` at path ``image``, recorded however it ends
    (with its reply, failed, or cut off with ``error.type == "cancelled"``)."""
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
    step: ImageStep[_Checked] = ImageStep(
        name="image", request=request, check=_checked, cancelled=lambda: run.cancel_reason
    )
    outcome = await run.runner.run_node(
        step, run.ctx, (), path="image", name="image", order=run.image_order
    )
    checked = outcome.value
    assert isinstance(checked, _Checked) and isinstance(outcome.event, ImageEvent)
    run.image, run.frame, run.image_event = checked.reply, checked.frame, outcome.event
    say_done(run, f"image from {checked.reply.model} ({checked.reply.format}, {request.size})")


async def _title(run: RunState) -> None:
    assert run.final_prompt is not None
    started = time.perf_counter()
    run.announce("title")
    snapshot = run.inputs.known_titles if run.inputs is not None else None
    if snapshot is None:
        manifest = run.cfg.effective_titles_manifest_path
        known: Sequence[str] = existing_titles(
            await anyio.to_thread.run_sync(read_manifest, manifest)
        )
    else:
        known = snapshot
    run.title = await run_title(
        run.runner, run.ctx, run.final_prompt, known, seed=derive_seed(run.seed, "title")
    )
    run.phase_times["title"] = round(time.perf_counter() - started, 3)


class PhaseFailed(Exception):
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
    error leaves as :class:`PhaseFailed` naming its phase, with the other's cut-off steps
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
                raise PhaseFailed(phase, exc) from exc
            run.unfinished.remove(phase)
        return
    failed: list[PhaseFailed] = []
    async with anyio.create_task_group() as tg:

        async def guarded(phase: str, step: _Phase) -> None:
            try:
                await step(run)
            except Exception as exc:  # kept, not raised: no ExceptionGroup to unwrap
                failed.append(PhaseFailed(phase, exc))
                run.cancel_reason = f"the {phase} call failed, so the run stopped"
                tg.cancel_scope.cancel()
            else:
                run.unfinished.remove(phase)

        tg.start_soon(guarded, "image", _image)
        tg.start_soon(guarded, "title", _title)
    if failed:
        first = failed[0]
        add_cancelled_paths(first.cause, run.cut_off())
        raise first from first.cause


def _upscale(run: RunState) -> float:
    """The image at its 4K size (``run.upscaled``), in a worker thread; its seconds. An
    upscaler binary is killed when the run is cancelled meanwhile (nothing is written yet)."""
    from image_project.artifacts.upscale import upscale_frame

    assert run.frame is not None and run.upscale is not None
    started = time.perf_counter()
    run.upscaled = upscale_frame(run.frame, run.upscale, anyio.from_thread.check_cancelled)
    return time.perf_counter() - started


async def _records(run: RunState) -> None:
    """The records: first the 4K image's resize (``upscale.enabled``; before the manifest
    lock, so a slow upscaler holds up no other run, and cancellable: nothing is written yet),
    then every write, all or nothing (:func:`~.records.write_records`). ``phases_s.upscale``
    is the 4K image's own time within ``records``: its resize, caption and encoding."""
    assert run.image is not None and run.title is not None and run.final_prompt is not None
    assert run.image_event is not None
    run.announce("records")
    image_path = Path(run.cfg.image.generation_path) / f"{run.generation_id}_image.jpg"
    resize_s = 0.0
    if run.upscale is not None:
        resize_s = await anyio.to_thread.run_sync(_upscale, run)
        assert run.upscaled is not None
        (w, h), (sw, sh) = run.upscaled.size, run.upscaled.source_size
        say_done(run, f"upscale: {sw}x{sh} -> {w}x{h} by {run.upscaled.method} ({resize_s:.1f} s)")
    # Shielded: a Ctrl-C that arrives now waits for the local writes (milliseconds; a second
    # or so with a 4K image) instead of leaving an image without its rows; the run then
    # counts as finished.
    with anyio.CancelScope(shield=True):
        saved = await anyio.to_thread.run_sync(write_records, run, image_path)
    run.saved, run.upscaled = saved, None  # the 4K pixels are on disk now
    line = f"records: image #{saved.seq:03d}, {saved.bytes:,} bytes"
    if saved.upscale is not None:
        upscale_s = round(resize_s + saved.upscale_s, 3)
        run.phase_times["upscale"] = upscale_s
        line += f"; 4K image {saved.upscale.bytes:,} bytes (upscale {upscale_s:.1f} s)"
    say_done(run, line)


def say_done(run: RunState, what: str) -> None:
    run.say(f"[{time.perf_counter() - run.started:6.1f}s] ✓ {what}")


_Phase = Callable[[RunState], Awaitable[None]]


def phases_for(prompt_only: bool, context: bool = False) -> list[tuple[str, _Phase]]:
    """The phases after ``data_load``: ``context`` first when ``context`` (enabled)."""
    phases: list[tuple[str, _Phase]] = [("context", _context)] if context else []
    phases += [
        ("concept_selection", _concept_selection),
        ("concept_filter", _concept_filter),
        ("pipeline", _pipeline),
    ]
    if not prompt_only:
        phases += [("image", _image_and_title), ("records", _records)]
    return phases
