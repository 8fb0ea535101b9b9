"""One generation, end to end: :func:`run_generation`.

Phases, in order (the transcript's ``error.phase`` names the one that failed)::

    data_load -> concept_selection -> concept_filter -> pipeline -> image -> title -> records

Guarantees:

* Every random choice derives from the run seed (:mod:`image_project.seeding`), recorded.
* The transcript is written on success **and** on failure, with ``error{type, message,
  phase, step, path, cancelled_paths}`` when the run failed (plus ``status, attempts`` for a
  transport error, ``reason, output_preview`` for a bad model answer). A cancelled run
  (Ctrl-C) has ``error.type == "interrupted"`` and the steps that were in flight as
  ``cancelled_paths``.
* A failed run leaves no image, manifest row or generations row: the image is written, the
  manifest row appended and the generations row appended only in the ``records`` phase, the
  whole phase under the manifest lock (which also makes ``seq`` unique across processes); if
  any of it fails, the image is removed and the manifest cut back, so no half is left. The
  records phase is shielded from cancellation, so an interrupt never splits it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from image_project.artifacts import (
    append_generation_row,
    append_manifest_row,
    caption_text,
    existing_titles,
    file_size,
    load_caption_font,
    manifest_lock,
    next_seq,
    read_manifest,
    save_captioned_jpeg,
    transcript_path,
    truncate_back,
    write_transcript,
)
from image_project.backends.base import ImageRequest, Usage
from image_project.backends.factory import Backends
from image_project.config import AppConfig
from image_project.engine import ChatRunner, Context, DefaultStepRecorder, Node
from image_project.errors import (
    BackendError,
    ImageProjectError,
    InputFileError,
    ModelOutputError,
    RefusalError,
    location_of,
)
from image_project.preflight import check_outputs
from image_project.progress import ProgressRecorder, counted
from image_project.seeding import derive_seed, fresh_seed
from image_project.stages.concepts import Categories, load_categories, select_concepts
from image_project.stages.profile import Profile, avoid_list, load_profile, render_guidance
from image_project.stages.scoring import load_novelty, scoring_pipeline
from image_project.stages.standard import (
    DALLE_PROMPT_KEY,
    SYSTEM_PROMPT,
    dislike_rewrite_step,
    prompt_pipeline,
)
from image_project.stages.title import TitleResult, disambiguate, resolve_collision, title_step

__all__ = ["Inputs", "RunFailed", "RunResult", "load_inputs", "new_generation_id", "run_generation"]

logger = logging.getLogger("image_project.run")


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
        try:
            load_caption_font(14, Path(font))
        except ImageProjectError as exc:
            raise InputFileError(font, f"image.caption_font_path cannot be loaded: {exc}") from exc
    inputs = Inputs(
        categories=load_categories(cfg.prompt.categories_path),
        profile=load_profile(cfg.prompt.profile_path),
    )
    check_outputs(cfg)
    return inputs


@dataclass(frozen=True)
class RunResult:
    generation_id: str
    seed: int
    concepts: tuple[str, ...]
    final_prompt: str
    transcript_path: Path
    log_path: Path
    image_path: Path | None = None
    title: str | None = None
    seq: int | None = None
    model_calls: int = 0
    image_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    wall_s: float = 0.0
    scoring: dict[str, Any] | None = None
    """The transcript's ``blackbox_scoring`` plus ``selected_card`` (None when disabled)."""


class RunFailed(ImageProjectError):
    """A run failed after it started; its transcript was written. The cause is chained."""

    def __init__(
        self, message: str, *, phase: str, transcript: Path, error: dict[str, Any]
    ) -> None:
        self.phase = phase
        self.transcript_path = transcript
        self.error = error
        super().__init__(message)


def new_generation_id() -> str:
    return f"{datetime.now(UTC):%Y%m%d_%H%M%S}_{uuid.uuid4().hex[:8]}"


def _utc_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class _RunLog:
    """A per-run log file next to the transcript, attached to the package logger."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.handler = logging.FileHandler(path, encoding="utf-8")
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


async def run_generation(
    cfg: AppConfig,
    backends: Backends,
    *,
    inputs: Inputs | None = None,
    seed: int | None = None,
    prompt_only: bool | None = None,
    generation_id: str | None = None,
    emit: Callable[[str], None] | None = None,
) -> RunResult:
    """Run one generation. ``emit`` receives progress lines (None = silent).

    Raises :class:`RunFailed` (transcript written, cause chained) when a started run fails,
    and lets an ``InputFileError`` from loading ``inputs`` through unchanged when it was not
    given (nothing has been called yet).
    """
    started = time.perf_counter()
    generation_id = generation_id or new_generation_id()
    run_seed = seed if seed is not None else cfg.prompt.random_seed
    run_seed = run_seed if run_seed is not None else fresh_seed()
    prompt_only = cfg.run.mode == "prompt_only" if prompt_only is None else prompt_only
    say = emit or (lambda _line: None)
    log_dir = Path(cfg.image.log_path)
    t_path = transcript_path(log_dir, generation_id)
    run_log = _RunLog(log_dir / f"{generation_id}.log")
    logger.info(
        "Generation %s started with seed %d (%s)", generation_id, run_seed, backends.description
    )

    ctx = Context.with_system(SYSTEM_PROMPT)
    recorder: DefaultStepRecorder = ProgressRecorder(say) if emit else DefaultStepRecorder()
    runner = ChatRunner(backends.text, recorder=recorder, mode=cfg.run.concurrency)
    transcript: dict[str, Any] = {
        "generation_id": generation_id,
        "seed": run_seed,
        "created_at": _utc_iso(),
        "backend": {
            "provider": backends.provider,
            "description": backends.description,
            "text_model": backends.text.default_model,
            "image_model": cfg.image.model,
            "execution_mode": cfg.run.concurrency,
        },
        "run_mode": "prompt_only" if prompt_only else "full",
        "selected_concepts": [],
        "steps": [],
        "final_image_prompt": None,
        "image_path": None,
        "title_generation": None,
        "blackbox_scoring": {"enabled": False},
        "usage": {},
        "timing": {},
    }
    phase = "data_load"
    phase_times: dict[str, float] = {}
    phase_start = time.perf_counter()

    def enter(name: str, line: str | None = None) -> None:
        nonlocal phase, phase_start
        now = time.perf_counter()
        phase_times[phase] = round(now - phase_start, 3)
        phase, phase_start = name, now
        if line:
            say(f"→ {line}")

    async def run_tree(node: Node) -> None:
        if isinstance(recorder, ProgressRecorder):
            recorder.watch(node)
        await runner.run(ctx, node)

    image_calls = 0
    scoring_summary: dict[str, Any] | None = None

    def finish() -> tuple[int, Usage, float]:
        """Write the transcript (success or failure) and close the run log."""
        usage = Usage.total(record.usage for record in ctx.steps)
        chat_calls = sum(1 for r in ctx.steps if r.type == "chat")
        wall = round(time.perf_counter() - started, 3)
        phase_times.setdefault(phase, round(time.perf_counter() - phase_start, 3))
        transcript["steps"] = [r.to_dict() for r in ctx.steps]
        transcript["usage"] = {
            **usage.to_dict(),
            "model_calls": chat_calls,
            "image_calls": image_calls,
        }
        transcript["timing"] = {"wall_s": wall, "phases_s": phase_times}
        try:
            write_transcript(t_path, transcript)
        finally:
            run_log.close()
        return chat_calls, usage, wall

    try:
        data = inputs or load_inputs(cfg)
        enter("concept_selection")
        concepts = select_concepts(data.categories, run_seed)
        transcript["selected_concepts"] = list(concepts)
        dislikes = avoid_list(data.profile)
        ctx.outputs.update(
            concepts=concepts, preferences=render_guidance(data.profile), dislikes=dislikes
        )

        enter("concept_filter", "concept filter" if dislikes else None)
        if dislikes:
            await run_tree(dislike_rewrite_step(concepts, dislikes, run_seed=run_seed))
        filtered = tuple(ctx.outputs["concepts"])
        transcript["concept_filter"] = {
            "input": list(concepts),
            "output": list(filtered),
            "dislikes": list(dislikes),
        }
        transcript["selected_concepts"] = list(filtered)

        scoring = cfg.prompt.scoring
        if scoring.enabled:
            enter(
                "pipeline",
                f"black-box scoring ({scoring.num_ideas} ideas x {counted(scoring.judge_count, 'judge')}), "
                f"then the final prompt (refinement: {cfg.prompt.refinement})",
            )
            novelty = await anyio.to_thread.run_sync(
                load_novelty,
                scoring.novelty.enabled,
                scoring.novelty.window,
                Path(cfg.prompt.generations_path),
            )
            plan = scoring_pipeline(
                run_seed=run_seed,
                scoring=scoring,
                judges=scoring.effective_judges(backends.text.default_model),
                likes=data.profile.taste,
                novelty=novelty,
                refinement=cfg.prompt.refinement,
                temperature=cfg.prompt.text_temperature,
            )
            try:
                await run_tree(plan.tree)
            finally:
                transcript["blackbox_scoring"] = plan.record(ctx.outputs)
            scoring_summary = {
                **transcript["blackbox_scoring"],
                "selected_card": plan.selected_card(ctx.outputs),
            }
        else:
            enter("pipeline", f"prompt pipeline (refinement: {cfg.prompt.refinement})")
            await run_tree(
                prompt_pipeline(
                    run_seed=run_seed,
                    refinement=cfg.prompt.refinement,
                    temperature=cfg.prompt.text_temperature,
                )
            )
        final_prompt = str(ctx.outputs[DALLE_PROMPT_KEY])
        transcript["final_image_prompt"] = final_prompt

        image_path: Path | None = None
        title: TitleResult | None = None
        seq: int | None = None
        if not prompt_only:
            enter("image", f"image ({cfg.image.model}, {cfg.image.size})")
            image_started = time.perf_counter()
            image = await backends.image.generate(
                ImageRequest(
                    prompt=final_prompt,
                    model=cfg.image.model,
                    size=cfg.image.size,
                    quality=cfg.image.quality,
                    seed=derive_seed(run_seed, "image"),
                )
            )
            image_calls = 1
            transcript["image_generation"] = {
                "model": image.model,
                "size": cfg.image.size,
                "quality": cfg.image.quality,
                "seed": derive_seed(run_seed, "image"),
                "attempts": image.attempts,
                "latency_ms": round((time.perf_counter() - image_started) * 1000, 3),
                "bytes": len(image.data),
                "revised_prompt": image.revised_prompt,
            }
            say(f"[{time.perf_counter() - started:6.1f}s] ✓ image ({len(image.data):,} bytes)")

            enter("title", "title")
            manifest = cfg.effective_titles_manifest_path
            known = existing_titles(await anyio.to_thread.run_sync(read_manifest, manifest))
            try:
                await run_tree(title_step(final_prompt, known, seed=derive_seed(run_seed, "title")))
                title = ctx.outputs["title"]
            except RefusalError as refusal:
                # A title is never worth failing a finished image for; transport errors are.
                logger.warning(
                    "Title step refused (%s); using a deterministic fallback title", refusal
                )
                title = TitleResult(
                    disambiguate("Untitled Work", known), "fallback", refusal.output_preview, 1
                )
            assert isinstance(title, TitleResult)

            enter("records", "records")
            image_path = Path(cfg.image.generation_path) / f"{generation_id}_image.jpg"
            generations_row = {
                "generation_id": generation_id,
                "selected_concepts": list(filtered),
                "final_image_prompt": final_prompt,
                "image_path": str(image_path),
                "created_at": transcript["created_at"],
                "seed": str(run_seed),
            }
            # Shielded: a Ctrl-C that arrives now waits for the local writes (milliseconds)
            # instead of leaving an image without its rows; the run then counts as finished.
            with anyio.CancelScope(shield=True):
                settled, allocated = await anyio.to_thread.run_sync(
                    _write_records,
                    cfg,
                    manifest,
                    image.data,
                    image_path,
                    title,
                    generation_id,
                    final_prompt,
                    run_seed,
                    generations_row,
                )
            title, seq = settled, allocated
            transcript["image_path"] = str(image_path)
            transcript["title_generation"] = {
                **settled.to_dict(),
                "seq": allocated,
                "caption": caption_text(allocated, settled.title),
            }
        enter("done")
    except Exception as exc:
        loc = location_of(exc)
        error: dict[str, Any] = {
            "type": type(exc).__name__,
            "message": str(exc),
            "phase": phase,
            "step": loc.name if loc else None,
            "path": loc.path if loc else None,
            "cancelled_paths": list(loc.cancelled_paths) if loc else [],
        }
        if isinstance(exc, BackendError):
            error.update(status=exc.status, attempts=exc.attempts)
        if isinstance(exc, ModelOutputError):
            error.update(reason=exc.reason, output_preview=exc.output_preview)
        transcript["error"] = error
        logger.error(
            "Generation %s failed in phase %s: %s: %s", generation_id, phase, error["type"], exc
        )
        finish()
        raise RunFailed(
            f"run failed in phase {phase}"
            + (f" at {error['path']}" if error["path"] else "")
            + f": {error['type']}: {exc}",
            phase=phase,
            transcript=t_path,
            error=error,
        ) from exc
    except BaseException as exc:
        # Cancellation (Ctrl-C / SIGTERM through the CLI) or a KeyboardInterrupt: the steps
        # in flight were cut off; nothing was written but this transcript (records are
        # shielded). Record what we know, then let it propagate.
        cut_off = recorder.in_flight
        transcript["error"] = {
            "type": "interrupted",
            "message": f"the run was interrupted in phase {phase} ({type(exc).__name__})"
            + (f"; {len(cut_off)} step(s) in flight were cancelled" if cut_off else ""),
            "phase": phase,
            "step": None,
            "path": None,
            "cancelled_paths": cut_off,
        }
        finish()
        logger.warning(
            "Generation %s interrupted in phase %s; transcript written to %s",
            generation_id,
            phase,
            t_path,
        )
        raise
    model_calls, usage, wall = finish()
    return RunResult(
        generation_id=generation_id,
        seed=run_seed,
        concepts=filtered,
        final_prompt=final_prompt,
        transcript_path=t_path,
        log_path=run_log.path,
        image_path=image_path,
        title=title.title if title else None,
        seq=seq,
        model_calls=model_calls,
        image_calls=image_calls,
        usage=usage,
        wall_s=wall,
        scoring=scoring_summary,
    )


def _write_records(
    cfg: AppConfig,
    manifest: Path,
    image_bytes: bytes,
    image_path: Path,
    title: TitleResult,
    generation_id: str,
    final_prompt: str,
    run_seed: int,
    generations_row: dict[str, object],
) -> tuple[TitleResult, int]:
    """The records phase in one call (one thread, so a cancellation cannot split it).

    All or nothing, under the manifest lock: allocate seq, settle the title against the
    freshest manifest, write the captioned image, append the manifest row, append the
    generations row. If anything after the image fails, the image is removed and the manifest
    is cut back to its size before this run (safe: the lock is still held), so a failed
    records phase leaves neither an image nor a row behind."""
    with manifest_lock(manifest):
        rows = read_manifest(manifest)
        seq = next_seq(rows)
        title = resolve_collision(title, existing_titles(rows))
        manifest_before = file_size(manifest)
        save_captioned_jpeg(
            image_bytes,
            image_path,
            caption_text(seq, title.title),
            font_path=cfg.image.caption_font_path,
        )
        try:
            append_manifest_row(
                manifest,
                {
                    "seq": str(seq),
                    "title": title.title,
                    "generation_id": generation_id,
                    "image_prompt": final_prompt,
                    "image_path": str(image_path),
                    "created_at": "",
                    "model": cfg.image.model,
                    "size": cfg.image.size,
                    "quality": cfg.image.quality,
                    "seed": str(run_seed),
                    "title_source": title.source,
                    "title_raw": title.raw,
                },
            )
            append_generation_row(Path(cfg.prompt.generations_path), generations_row)
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
                    generation_id,
                )
            raise
    return title, seq
