"""One generation, end to end: :func:`run_generation`, the run driver.

The run is a sequence of phases (:func:`~.phases.run_phases`), each one ``async def`` over
the run (:class:`RunState`) and the typed results of the phases before it; a short driver owns the phase names, their timing, error attribution,
interruption and writing the record::

    data_load -> [context] -> concept_selection -> concept_filter -> pipeline -> image | title
    -> records

(``error.phase`` names the one that failed; a prompt-only run stops after ``pipeline``;
``context`` runs only with ``context.enabled``.)
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
* A failed run leaves no image, 4K image, manifest row or generations row: the image (and
  the 4K image, ``upscale.enabled``) is written, the manifest row appended and the
  generations row appended only in the ``records`` phase, under the manifest lock (which
  also makes ``seq`` unique across processes); if any of it fails, the images are removed
  and the manifest put back, so no half is left. The writes are shielded from cancellation,
  so an interrupt never splits them. (The 4K image's resize comes first, before the lock
  and not shielded: an interrupt then stops it and nothing is written.) A process killed
  during them leaves the pending transcript written first
  (:mod:`image_project.artifacts.pending`), from which the run is completed or rolled back
  later.
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
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from image_project.artifacts.pending import at_point
from image_project.artifacts.transcript import transcript_path, write_transcript
from image_project.backends.factory import Backends
from image_project.cli.progress import ProgressRecorder
from image_project.config.capabilities import TEXT_MODELS
from image_project.config.models import AppConfig
from image_project.engine.budget import TokenLimits
from image_project.engine.context import Context
from image_project.engine.recorder import DefaultStepRecorder
from image_project.engine.runner import ChatRunner
from image_project.errors import (
    BackendError,
    ModelOutputError,
    location_of,
    preview,
    rejected_of,
)
from image_project.preflight import check_upscale
from image_project.record.events import Reask
from image_project.record.ids import check_generation_id
from image_project.record.run import RunError, RunRecord
from image_project.run.log import RunLog
from image_project.run.phases import PhaseFailed, run_phases
from image_project.run.records import save_to_store
from image_project.run.state import (
    Inputs,
    Loaded,
    RunFailed,
    RunResult,
    RunState,
    load_inputs,
    new_generation_id,
    utc_iso,
)
from image_project.seeding import run_seed
from image_project.stages.standard import SYSTEM_PROMPT
from image_project.store.writer import RecordsRefused, StoreOutcome, StoreWriter

if TYPE_CHECKING:
    from image_project.artifacts.upscale import UpscaleSettings

logger = logging.getLogger("image_project.run")


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
    upscale: UpscaleSettings | None = None,
) -> RunResult:
    """Run one generation. ``emit`` receives progress lines (None = silent). ``seed`` None
    means the configured seed (``prompt.random_seed``) or, without one, a fresh recorded
    seed. ``store`` is the run store writer to use (the CLI shares one across runs); None
    opens one for this run when ``store.enabled`` (and closes it at the end). ``recorder``
    replaces the step recorder (default: progress lines with ``emit``, else a silent one),
    e.g. to read which parallel groups ran (``recorder.groups``). ``upscale`` is the 4K
    image's checked settings (:func:`image_project.preflight.check_upscale`, which the CLI
    runs once for all runs); None with ``upscale.enabled`` checks them here, at the start of
    the run (phase ``data_load``, before any model call), finding the upscaler binary through
    the process environment.

    The run is written to the store at its end (success, failure or interrupt), after the
    transcript; a store that cannot be written is reported and changes nothing else.

    Raises :class:`RunFailed` (transcript written, cause chained) when a started run fails;
    an input file that cannot be loaded fails the run in phase ``data_load``. A
    ``generation_id`` that is not one (:mod:`image_project.record.ids`) raises ValueError
    naming it and the pattern, before anything is written.
    """
    if generation_id is not None:
        check_generation_id(generation_id)
    run = _Run.start(
        cfg,
        backends,
        seed=seed,
        prompt_only=cfg.run.mode == "prompt_only" if prompt_only is None else prompt_only,
        generation_id=generation_id or new_generation_id(),
        emit=emit,
        store=store,
        recorder=recorder,
    )
    try:
        loaded = Loaded(
            inputs=inputs or load_inputs(cfg),
            upscale=(
                upscale or check_upscale(cfg, os.environ)
                if cfg.upscale.enabled and not run.state.prompt_only
                else None
            ),
        )
        await run_phases(run.state, loaded, run.enter)
        run.enter("done")
    except Exception as caught:
        refused = refusal_in(caught)
        if refused is not None:  # a fenced writer: this attempt writes nothing
            run.refused()
            raise refused from caught
        raise run.failed(caught) from (caught.cause if isinstance(caught, PhaseFailed) else caught)
    except BaseException as exc:  # Ctrl-C / SIGTERM through the CLI, or KeyboardInterrupt
        run.interrupted(exc)
        raise
    return run.finished()


def refusal_in(exc: BaseException) -> RecordsRefused | None:
    """The :class:`RecordsRefused` that ``exc`` is, carries (a phase's failure, an exception
    group of concurrent steps) or was raised from, if any."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, RecordsRefused):
            return current
        if isinstance(current, PhaseFailed):
            todo.append(current.cause)
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


class _Run:
    """One run as the driver sees it: its state, which phase it is in and since when, and
    how it ends (transcript, store row, run log closed; a store opened for it closed)."""

    def __init__(self, state: RunState, transcript: Path, log: RunLog, own_store: bool) -> None:
        self.state = state
        self.transcript = transcript
        self.log = log
        self.own_store = own_store
        self.phase = "data_load"
        self.phase_start = time.perf_counter()

    @classmethod
    def start(
        cls,
        cfg: AppConfig,
        backends: Backends,
        *,
        seed: int | None,
        prompt_only: bool,
        generation_id: str,
        emit: Callable[[str], None] | None,
        store: StoreWriter | None,
        recorder: DefaultStepRecorder | None,
    ) -> _Run:
        """The run's state, its log file, and its store writer (opened here when the caller
        gave none and ``store.enabled``)."""
        started = time.perf_counter()
        log_dir = Path(cfg.image.log_path)
        log = RunLog(log_dir / f"{generation_id}.log", generation_id)
        say = emit or (lambda _line: None)
        own_store = store is None and cfg.store.enabled
        if own_store:
            store = StoreWriter(cfg.effective_store_url)
        recorder = recorder or (ProgressRecorder(say) if emit else DefaultStepRecorder())
        ctx = Context.with_system(SYSTEM_PROMPT)
        runner = ChatRunner(
            backends.text,
            recorder=recorder,
            mode=cfg.run.concurrency,
            image_backend=backends.image,
            token_limits=token_limits(cfg),
            max_prompt_chars=cfg.prompt.max_prompt_chars,
        )
        state = RunState(
            cfg=cfg,
            backends=backends,
            generation_id=generation_id,
            seed=seed if seed is not None else run_seed(cfg.prompt.random_seed),
            prompt_only=prompt_only,
            created_at=utc_iso(),
            ctx=ctx,
            root=runner.root(ctx),
            recorder=recorder,
            say=say,
            started=started,
            store=store,
        )
        logger.info(
            "Generation %s started with seed %d (%s)",
            generation_id,
            state.seed,
            backends.description,
        )
        return cls(state, transcript_path(log_dir, generation_id), log, own_store)

    def enter(self, phase: str) -> None:
        """The current phase has ended (its time is recorded); ``phase`` starts."""
        now = time.perf_counter()
        self.state.ledger.phase_times[self.phase] = round(now - self.phase_start, 3)
        self.phase, self.phase_start = phase, now

    def failed(self, caught: Exception) -> RunFailed:
        """The run failed in its current phase (or in the one a :class:`PhaseFailed`
        names): write what it got to, and the error to raise."""
        exc = caught.cause if isinstance(caught, PhaseFailed) else caught
        if isinstance(caught, PhaseFailed):
            self._time_phase()
            self.phase = caught.phase
        error = run_error(exc, self.phase)
        logger.error(
            "Generation %s failed in phase %s: %s: %s",
            self.state.generation_id,
            self.phase,
            error.type,
            exc,
        )
        record, _, unwritten = self._finish(error)
        return RunFailed(
            f"run failed in phase {self.phase}"
            + (f" at {error.path}" if error.path else "")
            + f": {error.type}: {exc}",
            record=record,
            transcript=self.transcript,
            unwritten=unwritten,
        )

    def interrupted(self, exc: BaseException) -> None:
        """The run was cancelled: the steps in flight were cut off and nothing was written
        but this transcript and its store row (the records phase is shielded). Record what
        is known; the caller lets the cancellation propagate."""
        state = self.state
        unfinished = state.ledger.unfinished
        if self.phase == "image" and unfinished:  # image and title go together: the first
            self.phase = unfinished[0]  # still going (the title once the image is done)
        cut_off = state.cut_off()
        try:
            self._record_interrupt(exc, cut_off)
        except RecordsRefused as refused:
            logger.warning("Generation %s interrupted: %s", state.generation_id, refused)
            return
        logger.warning(
            "Generation %s interrupted in phase %s; transcript written to %s",
            state.generation_id,
            self.phase,
            self.transcript,
        )

    def _record_interrupt(self, exc: BaseException, cut_off: list[str]) -> None:
        self._finish(
            RunError(
                type="interrupted",
                message=f"the run was interrupted in phase {self.phase} ({type(exc).__name__})"
                + (f"; {len(cut_off)} step(s) in flight were cancelled" if cut_off else ""),
                phase=self.phase,
                cancelled_paths=tuple(cut_off),
            )
        )

    def refused(self) -> None:
        """A fenced writer refused this attempt's records: close what the run opened and
        write nothing (the records phase refuses before its first write)."""
        state = self.state
        pending, state.ledger.pending = state.ledger.pending, None
        if pending is not None:
            pending.close()
        if state.store is not None:
            state.store.abandon(state.generation_id)
            if self.own_store:
                state.store.close()
        self.log.close()

    def finished(self) -> RunResult:
        record, stored, unwritten = self._finish(None)
        return RunResult(
            record=record,
            transcript_path=self.transcript,
            log_path=self.log.path,
            store=stored,
            unwritten=unwritten,
        )

    def _time_phase(self) -> None:
        self.state.ledger.phase_times.setdefault(
            self.phase, round(time.perf_counter() - self.phase_start, 3)
        )

    def _finish(self, error: RunError | None) -> tuple[RunRecord, StoreOutcome | None, str | None]:
        """Write the transcript (success or failure), then the run store; close the run
        log (and a store opened for this run). A transcript that cannot be written (a full
        disk) does not stop the store write: the third value is then the line saying so and
        where the run is recorded (:meth:`_unwritten`)."""
        state = self.state
        self._time_phase()
        record = state.to_record(error, round(time.perf_counter() - state.started, 3))
        pending, state.ledger.pending = state.ledger.pending, None
        unwritten: str | None = None
        problem: str | None = None
        try:
            if state.store is not None:
                state.store.may_record(state.generation_id)
            try:
                write_transcript(self.transcript, record)
            except OSError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if pending is not None:  # the records were written: artifacts.pending
                    at_point("transcript")
                    pending.remove()
                    at_point("pending_removed")
            stored = save_to_store(state, record, self.transcript, transcript_problem=problem)
            if problem is not None:
                unwritten = self._unwritten(problem, stored, kept=pending is not None)
                logger.info("%s", unwritten)  # the caller shows it (the CLI: one ✗ line)
            elif pending is not None:
                at_point("stored")
        finally:
            if pending is not None:
                pending.close()  # the file stays if the transcript could not be written
            if state.store is not None:
                state.store.abandon(state.generation_id)
                if self.own_store:
                    state.store.close()
            self.log.close()
        return record, stored, unwritten

    def _unwritten(self, problem: str, stored: StoreOutcome | None, *, kept: bool) -> str:
        """The one line for a run whose transcript could not be written: where it is
        recorded instead (the store; its pending transcript, when its records were written,
        which ``runs import`` completes), or that it is recorded nowhere."""
        gid = self.state.generation_id
        line = f"run {gid}: its transcript could not be written to {self.transcript} ({problem})"
        if kept:
            line += (
                "; its records are complete and its pending transcript stays beside it "
                "(runs import writes the transcript from it)"
            )
        if stored is not None and stored.written:
            return line + f"; the run is recorded in the store {stored.url}"
        if kept:
            return line
        where = f"nor its store row ({stored.error})" if stored is not None else "and no store"
        return f"{line} {where}: run {gid} is recorded nowhere but its log {self.log.path}"


def run_error(exc: Exception, phase: str) -> RunError:
    """The record's error for ``exc`` in ``phase``: where the engine located it, and what a
    transport error (status, attempts) or a bad answer (reason, preview) adds."""
    loc = location_of(exc)
    rejected = rejected_of(exc)
    requests, reasks = rejected if rejected else (None, ())
    message = str(exc)
    if reasks:
        message += (
            f" (request {requests} of the step; {len(reasks)} earlier answer(s) rejected: "
            + "; ".join(preview(getattr(r, "error", r), 80) for r in reasks)
            + ")"
        )
    return RunError(
        type=type(exc).__name__,
        message=message,
        phase=phase,
        step=loc.name if loc else None,
        path=loc.path if loc else None,
        cancelled_paths=loc.cancelled_paths if loc else (),
        status=exc.status if isinstance(exc, BackendError) else None,
        attempts=exc.attempts if isinstance(exc, BackendError) else None,
        reason=exc.reason if isinstance(exc, ModelOutputError) else None,
        output_preview=exc.output_preview if isinstance(exc, ModelOutputError) else None,
        requests=requests,
        reasks=tuple(r for r in reasks if isinstance(r, Reask)),
    )


def token_limits(cfg: AppConfig) -> TokenLimits:
    """The run's output-token limits (``backend.max_output_tokens``). A model of the capability
    table that reasons at its default effort (temperature ``default_only``) counts its hidden
    reasoning in the limit, so it gets ``reasoning_headroom`` on top of every limit."""
    return TokenLimits.of(
        cfg.backend.max_output_tokens.model_dump(),
        reasoning_models=(n for n, m in TEXT_MODELS.items() if m.temperature == "default_only"),
    )
