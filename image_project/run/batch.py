"""A batch: ``run.runs`` generations, up to ``run.parallel`` of them in flight in one process.
:func:`run_batch` is what ``image-project generate`` runs.

What the runs share, built once: the backends (one transport, one retry policy, one
rate-limit pacer fed by the provider's headers), the inputs, one store writer. What each run
keeps: its seed (``run_seed(prompt.random_seed, i)``, the same as one after another), its
transcript, its log file (:mod:`.log` gives each run only its own records) and its progress
prefix (``[run 3/24]``). Summaries and errors print in run order, whatever order the runs
finish in; the manifest and CSV rows are written under the manifest lock as each run reaches
its records, so ``seq`` follows completion order and is recorded per run.

``run.parallel: auto`` keeps adding runs while the pacer has budget: no call is being held
for the rate window or a 429 pause, no call is waiting for a ``backend.max_concurrency``
slot, and the window's remaining requests (when the headers said) exceed the runs in
flight; never more than ``run.parallel_cap``. Before the first answer it does not know the
budget and runs one run. The offline backend has no pacer: ``auto`` is then the cap.

Stopping:

* Ctrl-C (SIGINT) or SIGTERM: no run starts after the first; the runs in flight are
  cancelled and recorded as interrupted (a run already writing its records finishes them);
  the closing line says how many completed, were interrupted and never started; exit 128 +
  the signal number. A second signal quits at once, whatever is in flight: one line, exit
  128 + its number (:mod:`.interrupts`). A signal that interrupted nothing (the last run
  was writing its records) says it came too late and the batch ends as if it had not come.
* The reader of standard output (or error) goes away (``image-project | head -1``): no run
  starts after that; the runs in flight finish and write their records, with nothing more
  printed where the pipe was; exit 141 (128 + SIGPIPE), as the ``runs`` commands do.
* A failed run does not stop the batch. A run that fails for a reason every run would hit
  (:func:`fatal_cause`: the API key refused, the quota used up, a model the server does not
  have) stops new runs from starting, said once; the runs in flight finish.

Exit codes: 0 every run succeeded; 1 a run failed or was never started after such a stop;
141 the output's reader went away.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import anyio

from image_project.artifacts.manifest import existing_titles, read_manifest
from image_project.backends.factory import Backends
from image_project.cli.summary import record_lines, terminal_safe
from image_project.config.models import AppConfig
from image_project.engine.recorder import DefaultStepRecorder
from image_project.errors import AuthenticationError, QuotaExceededError, RequestRejectedError
from image_project.run.batch_progress import BatchProgress
from image_project.run.driver import run_generation
from image_project.run.interrupts import Interrupts
from image_project.run.state import Inputs, RunFailed, RunResult, load_inputs
from image_project.seeding import run_seed
from image_project.store.writer import StoreWriter

if TYPE_CHECKING:
    from image_project.artifacts.upscale import UpscaleSettings

EXIT_OK, EXIT_RUN_FAILED = 0, 1
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a command killed by it

State = Literal["waiting", "running", "ok", "failed", "interrupted"]


def fatal_cause(exc: BaseException) -> BaseException | None:
    """The error in ``exc``'s causes that every run of the batch would hit, or None: the
    API key refused (401 / 403), the account's quota used up, a model (or endpoint) the
    server does not have (404)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        err = todo.pop()
        if id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, AuthenticationError | QuotaExceededError):
            return err
        if isinstance(err, RequestRejectedError) and err.status == 404:
            return err
        if isinstance(err, BaseExceptionGroup):
            todo.extend(err.exceptions)
        if err.__cause__ is not None:
            todo.append(err.__cause__)
    return None


def summary_text(result: RunResult) -> str:
    """The run's summary, read from its record (the transcript's content)."""
    record = result.record
    lines = record_lines(
        record,
        whole_prompt=record.run_mode == "prompt_only",
        files=(
            f"  Transcript  {result.transcript_path}"
            + (" NOT WRITTEN (see below)" if result.unwritten else ""),
            f"  Log         {result.log_path}",
        ),
    )
    if result.store is not None:
        stored = result.store
        lines.append(
            f"  Store       {stored.url}"
            if stored.written
            else f"  Store       NOT WRITTEN ({stored.error}): runs import the transcript"
        )
    return terminal_safe("\n".join(lines))


def runs_line(runs: int, failed: Sequence[int], not_started: int = 0) -> str:
    """The closing line of several runs: ``5 of 5 succeeded``, or ``3 of 5 succeeded (runs 2,
    4 failed; their errors are above)``, with ``; 4 not started`` after a stop."""
    line = f"{runs - len(failed) - not_started} of {runs} succeeded"
    if failed:
        which = "runs " + ", ".join(map(str, failed)) if len(failed) > 1 else f"run {failed[0]}"
        line += (
            f" ({which} failed; {'their errors are' if len(failed) > 1 else 'its error is'} above)"
        )
    if not_started:
        line += f"; {not_started} not started"
    return line


@dataclass
class _Slot:
    """One run of the batch: its number (from 1), seed, state and outcome."""

    number: int
    seed: int
    state: State = "waiting"
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    result: RunResult | None = None
    failure: RunFailed | None = None


class Batch:
    """The runs of one batch and what decides when the next one starts; see the module
    docstring. :meth:`run` runs them; :meth:`stop` is what a signal does (a test may call it
    too); :meth:`close` prints the closing lines and gives the exit code."""

    def __init__(
        self,
        cfg: AppConfig,
        backends: Backends,
        *,
        inputs: Inputs,
        store: StoreWriter | None,
        progress: BatchProgress,
        upscale: UpscaleSettings | None = None,
        verbose: int = 0,
    ) -> None:
        self.cfg, self.backends, self.inputs, self.store = cfg, backends, inputs, store
        self.upscale, self.verbose, self.progress = upscale, verbose, progress
        self.parallel = cfg.run.parallel
        self.slots = [
            _Slot(i + 1, run_seed(cfg.prompt.random_seed, i)) for i in range(cfg.run.runs)
        ]
        self.signal: int | None = None
        self.fatal: tuple[int, BaseException] | None = None
        self._printed = 0
        self._changed = anyio.Event()
        progress.on_closed = self._poke  # a closed pipe: no run starts (see _may_start)
        if self.parallel == "auto" and backends.pacer is not None:
            backends.pacer.watch(self._poke)

    # -- what the batch counts ------------------------------------------------------------

    def in_state(self, *states: State) -> list[_Slot]:
        return [s for s in self.slots if s.state in states]

    def stop(self, signum: int) -> None:
        """Start no more runs and cancel the runs in flight (their records, once begun, are
        shielded and finish)."""
        if self.signal is None:
            self.signal = signum
        for slot in self.in_state("running"):
            slot.scope.cancel()
        self._poke()

    # -- running --------------------------------------------------------------------------

    async def run(self) -> None:
        """Every run, at most ``run.parallel`` (or what ``auto`` allows) at a time."""
        async with anyio.create_task_group() as tg:
            for slot in self.slots:
                if not await self._may_start():
                    break
                slot.state = "running"
                tg.start_soon(self._one, slot)
        self._print_in_order(final=True)

    async def _may_start(self) -> bool:
        """Wait until one more run fits; False once the batch is stopping."""
        while True:
            if self.signal is not None or self.fatal is not None:
                return False
            if self.progress.output_closed:
                return False
            if self._room():
                return True
            self._changed = event = anyio.Event()
            await event.wait()

    def _poke(self) -> None:
        self._changed.set()

    def _room(self) -> bool:
        running = len(self.in_state("running"))
        if self.parallel != "auto":
            return running < self.parallel
        if running == 0:
            return True
        if running >= self.cfg.run.parallel_cap:
            return False
        pacer = self.backends.pacer
        if pacer is None:
            return True
        if pacer.answers == 0 or pacer.held or pacer.paused_until is not None:
            return False
        if pacer.limit.limiter.statistics().tasks_waiting:
            return False
        return pacer.budget is None or pacer.budget > running

    async def _one(self, slot: _Slot) -> None:
        if self.signal is not None:  # stopped between being scheduled and starting
            slot.state = "waiting"
            return
        prefix = self.progress.prefix(slot.number)
        if not self.progress.together and len(self.slots) > 1:
            self.progress.line(f"== run {slot.number} of {len(self.slots)}")
        elif self.progress.together:
            self.progress.line(f"{prefix}started (seed {slot.seed})")
        emit = None if self.progress.quiet else self._emitter(prefix)
        recorder = None if not self.progress.together or self.verbose else DefaultStepRecorder()
        try:
            with slot.scope:
                try:
                    slot.result = await run_generation(
                        self.cfg,
                        self.backends,
                        inputs=self.inputs,
                        seed=slot.seed,
                        emit=emit,
                        store=self.store,
                        upscale=self.upscale,
                        recorder=recorder,
                    )
                    slot.state = "ok"
                except RunFailed as exc:
                    slot.failure, slot.state = exc, "failed"
                    self._check_fatal(slot, exc)
        finally:
            if slot.state == "running":  # cancelled: the transcript says interrupted
                slot.state = "interrupted"
            self.progress.run_ended(slot.number, self._ended(slot), slot.state)
            self._print_in_order()
            self._poke()

    def _emitter(self, prefix: str) -> Callable[[str], None]:
        line = self.progress.line
        return (lambda text: line(prefix + text)) if prefix else line

    def _ended(self, slot: _Slot) -> str:
        if slot.result is not None:
            saved = slot.result.record.title_generation
            title = f"#{saved.seq:03d} {saved.title}" if saved is not None else "prompt only"
            return f"done: {title} ({slot.result.record.timing.wall_s:.1f} s)"
        if slot.failure is not None:
            cause = slot.failure.__cause__
            return f"FAILED: {type(cause).__name__ if cause else 'error'} (error below)"
        return "interrupted"

    def _check_fatal(self, slot: _Slot, exc: RunFailed) -> None:
        cause = fatal_cause(exc)
        if cause is None or self.fatal is not None:
            return
        self.fatal = (slot.number, cause)
        waiting = len(self.in_state("waiting"))
        if waiting:
            self.progress.error(
                f"stopping the batch: run {slot.number} failed with {type(cause).__name__}, "
                f"which every run would hit; {waiting} run(s) will not start (the runs in "
                "flight finish)"
            )

    def _print_in_order(self, *, final: bool = False) -> None:
        """The summaries and errors of the runs that ended, in run order: each as soon as
        every run before it has ended (``final``: the runs never started are skipped)."""
        while self._printed < len(self.slots):
            slot = self.slots[self._printed]
            if slot.state == "running" or (slot.state == "waiting" and not final):
                return
            if slot.result is not None:
                self.progress.summary(summary_text(slot.result))
                if slot.result.unwritten is not None:
                    self.progress.error(f"✗ {slot.result.unwritten}")
            elif slot.failure is not None:
                self.progress.error(f"error: {slot.failure}")
                if slot.failure.unwritten is not None:
                    self.progress.error(f"✗ {slot.failure.unwritten}")
                else:
                    self.progress.error(f"transcript: {slot.failure.transcript_path}")
            self._printed += 1

    # -- the end --------------------------------------------------------------------------

    def close(self) -> int:
        """The closing lines; the exit code."""
        self.progress.close()
        runs = len(self.slots)
        failed = [s.number for s in self.in_state("failed")]
        done = len(self.in_state("ok")) + len(failed)
        interrupted = len(self.in_state("interrupted"))
        never = len(self.in_state("waiting"))
        if self.signal is not None and (interrupted or never):
            name = signal.Signals(self.signal).name
            line = f"interrupted ({name})"
            if runs > 1:
                line += (
                    f": {done} completed"
                    + (f" ({len(failed)} failed)" if failed else "")
                    + f", {interrupted} interrupted, {never} never started"
                )
            self.progress.error(line)
            return 128 + self.signal
        if self.progress.output_closed:
            return EXIT_BROKEN_PIPE
        if self.signal is not None:
            self.progress.error(_too_late(self.signal, runs))
        if runs > 1:
            self.progress.summary(runs_line(runs, failed, never))
        return EXIT_RUN_FAILED if failed or never else EXIT_OK


def with_history(cfg: AppConfig, inputs: Inputs) -> Inputs:
    """``inputs`` with the titles to avoid and the novelty history read now, once for the
    batch: every run asks the same whether the runs go one after another or together (a
    title two runs of the batch both choose is told apart when the second writes its
    records, with a numeral, like ``seq`` in completion order)."""
    known = tuple(existing_titles(read_manifest(cfg.effective_titles_manifest_path)))
    novelty = None
    scoring = cfg.prompt.scoring
    if scoring.enabled:
        from image_project.stages.scoring.novelty import load_novelty

        novelty = load_novelty(
            scoring.novelty.enabled,
            scoring.novelty.window,
            Path(cfg.prompt.generations_path),
            scoring.novelty.min_share,
        )
    return replace(inputs, known_titles=known, novelty=novelty)


def _say_left_by_killed_runs(cfg: AppConfig, progress: BatchProgress) -> None:
    """Before the first run: what runs killed in their records phase left in the log folder
    (:mod:`image_project.artifacts.pending`), naming the files, with the command that repairs
    them; and the runs that ended without a transcript (a full disk), by id."""
    from image_project.artifacts.pending import (
        describe_all,
        describe_without_transcript,
        runs_without_transcript,
    )
    from image_project.run.records import repair_command, repair_scope

    folder = Path(cfg.image.log_path)
    for line in describe_all(folder, repair_command(cfg), repair_scope(cfg)):
        progress.error(f"! {line}")
    without = runs_without_transcript(folder)
    if without:
        progress.error(f"! {describe_without_transcript(folder, without)}")


def _too_late(signum: int, runs: int) -> str:
    """What a signal that stopped nothing means: every run had ended (the last one was
    writing its records, which are never split)."""
    what = "the run was" if runs == 1 else f"all {runs} runs were"
    return f"{signal.Signals(signum).name} came too late to stop anything: {what} already complete"


def _stop_on_signal(batch: Batch) -> Callable[[int], None]:
    """What the first SIGINT / SIGTERM does, in the event loop: say so and stop ``batch``
    (:class:`~.interrupts.Interrupts` quits at once on a second one)."""

    def stop(signum: int) -> None:
        batch_note = "; no new run starts" if len(batch.slots) > 1 else ""
        batch.progress.error(
            f"\n{signal.Signals(signum).name}: cancelling the calls in flight{batch_note} "
            "(press Ctrl-C again to quit at once)"
        )
        batch.stop(signum)

    return stop


async def run_batch(
    cfg: AppConfig,
    backends: Backends,
    *,
    quiet: bool = False,
    verbose: int = 0,
    upscale: UpscaleSettings | None = None,
    progress: BatchProgress | None = None,
    started: Callable[[Batch], None] | None = None,
) -> int:
    """Every run of ``cfg`` (see the module docstring); the exit code. The backends are
    closed at the end. ``started`` is called with the batch before its first run (a test's
    hook). An input file that cannot be used raises InputFileError (the CLI's exit 2)."""
    try:
        # Input files, output directories and record CSVs, once for all runs and before any
        # model call; one store writer for all runs (the store is opened on the first write).
        inputs = load_inputs(cfg)
        if cfg.run.runs > 1:
            inputs = await anyio.to_thread.run_sync(with_history, cfg, inputs)
        store = StoreWriter(cfg.effective_store_url) if cfg.store.enabled else None
        together = cfg.run.runs > 1 and cfg.run.parallel != 1
        progress = progress or BatchProgress(cfg.run.runs, quiet=quiet, together=together)
        batch = Batch(
            cfg,
            backends,
            inputs=inputs,
            store=store,
            progress=progress,
            upscale=upscale,
            verbose=verbose,
        )
        _say_left_by_killed_runs(cfg, progress)
        if started is not None:
            started(batch)
        interrupts = Interrupts(_stop_on_signal(batch))
        interrupts.install()  # handlers in place before the first run
        try:
            await batch.run()
        except BaseExceptionGroup as group:  # a KeyboardInterrupt raised inside a run's task
            if group.subgroup(KeyboardInterrupt) is not None:
                raise KeyboardInterrupt from None
            raise
        finally:
            interrupts.restore()
            progress.close()
            if store is not None:
                store.close()
    finally:
        with anyio.CancelScope(shield=True):
            await backends.aclose()
    return batch.close()
