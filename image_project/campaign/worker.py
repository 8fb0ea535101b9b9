"""``image-project worker``: take a campaign's runs from the queue and make them.

A worker is a procrastinate worker running up to ``--parallel`` jobs at once in one event
loop. Each job is one run, made by the same :func:`~image_project.run.run_generation` a
batch uses, with the job's seed and a generation id fixed by the campaign and the run's
index (:func:`~image_project.campaign.queue.generation_id_for`). What the runs of one
campaign share in this worker is what a batch's runs share: the backends (one transport, one
pacer), the inputs and the history read once, one store writer. The history (titles to
avoid, novelty) is the shared store's as it was at submit (the job's ``history``: the
highest image ``seq`` then), not this machine's files, so every worker asks the same. The
pacer also spends the key's shared budget (:mod:`.limiter`), so every worker of a key paces
against one limit.

A worker that dies (kill -9, a machine gone) stops sending procrastinate's heartbeat; after
``--stalled-after`` seconds any other worker puts its runs back in the queue (procrastinate's
stalled-job retry), and the next worker makes them again from the start. A live worker
keeps its heartbeat until its last run has ended (also while it stops), and never takes its
own runs for stalled. A run is recorded once (:mod:`.fence`): each attempt claims the run in
the store when it starts; an attempt that finds its run recorded, or that another attempt has
claimed since, writes nothing (no image, row, transcript or store row), says so in one line
and leaves the job to the attempt that owns it.

The database (:mod:`.outage`): every connection the worker holds (the queue's, the store's,
the shared budget's) is made again with backoff after it is lost. A run whose attempt met a
database failure it could not wait out writes nothing and goes back to the queue
(:class:`InfrastructureFailed`, counted in ``campaign status``), not to ``failed``. A worker
that cannot reach the database for longer than ``--database-lost-after`` seconds stops with
one line and exits :data:`~.outage.EXIT_DATABASE_LOST` (3); its runs in flight go back to
the queue once the database answers again, as a dead worker's do.

A worker that cannot set up a campaign's runs (this machine's configuration, a backend whose
pre-flight fails, a history it cannot read) does not fail them: it stops taking runs, puts
the run back in the queue (procrastinate's retry, :class:`WorkerSetupFailed`) for another
worker, says why and exits 1. A store it cannot reach at start ends it before it takes any
run (exit 1).

Stopping: the first SIGINT / SIGTERM is procrastinate's graceful stop (one line says so; no
new run; the runs in flight finish; exit 0). A second one quits at once
(:class:`~image_project.run.interrupts.Interrupts`), and a worker killed leaves its runs to
the others, as a dead one does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from image_project.backends.factory import Backends, make_backends
from image_project.campaign.fence import FencedWriter
from image_project.campaign.limiter import PostgresBudget, budget_name
from image_project.campaign.outage import (
    EXIT_DATABASE_LOST,
    DatabaseLost,
    Outage,
    is_connection_loss,
)
from image_project.campaign.queue import (
    QUEUE,
    TASK,
    conninfo,
    ensure_schema,
    generation_id_for,
    make_app,
)
from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from image_project.config.store_url import redact_url
from image_project.errors import ImageProjectError
from image_project.preflight import check_upscale
from image_project.run.batch import with_history
from image_project.run.driver import run_generation
from image_project.run.state import Inputs, RunFailed, load_inputs
from image_project.store.writer import (
    RecordsRefused,
    RunAlreadyRecorded,
    RunTakenOver,
    StoreUnreachable,
)

if TYPE_CHECKING:
    import procrastinate
    from procrastinate.job_context import JobContext
    from procrastinate.worker import Worker as ProcrastinateWorker

    from image_project.artifacts.upscale import UpscaleSettings
    from image_project.record.run import RunRecord

EXIT_SETUP_FAILED = 1


class CampaignRunFailed(ImageProjectError):
    """A campaign run failed (its transcript and store row say why): the job fails."""


class WorkerSetupFailed(ImageProjectError):
    """This worker could not set up a campaign's runs: the job goes back to the queue (the
    task's retry strategy retries this and :class:`InfrastructureFailed` only) and the
    worker stops."""


class InfrastructureFailed(ImageProjectError):
    """The run's attempt met a database failure (not a model's): it wrote nothing, and the
    job goes back to the queue."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _preload() -> None:
    """Import what a run uses before the worker registers (and starts its heartbeat): a
    first run importing the OpenAI SDK on a busy machine can hold the event loop for
    seconds."""
    import image_project.backends.openai_backend
    import image_project.stages.standard  # noqa: F401


@dataclass
class _Campaign:
    """What the runs of one campaign share in this worker."""

    cfg: AppConfig
    backends: Backends
    inputs: Inputs
    upscale: UpscaleSettings | None
    budget: PostgresBudget | None


@dataclass
class Worker:
    """One worker process; :meth:`run` until stopped (SIGINT / SIGTERM: the runs in flight
    finish first) or, with ``until_done``, until no run of any campaign is queued or running."""

    url: str
    root: Path
    overrides: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    parallel: int = 1
    stalled_after_s: float = 30.0
    database_lost_after_s: float = 60.0
    until_done: bool = False
    quiet: bool = False
    out: TextIO = field(default_factory=lambda: sys.stderr)
    campaigns: dict[str, _Campaign] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # campaign -> why its set-up failed
    made: int = 0

    def __post_init__(self) -> None:
        self.outage = Outage(self.database_lost_after_s)
        self.outage.on_lost = self._on_database_lost
        self.store = FencedWriter(self.url, self.outage)
        self._handed_over: set[int] = set()  # jobs whose runs another attempt owns now
        self._in_flight = 0
        self._setup = anyio.Lock()
        self._procrastinate: ProcrastinateWorker | None = None

    # -- running --------------------------------------------------------------------------

    async def run(self) -> int:
        """Take runs until stopped; the exit code (0, :data:`EXIT_SETUP_FAILED` when this
        machine could not set up a campaign or reach the store at start, or
        :data:`EXIT_DATABASE_LOST`)."""
        import psycopg
        from procrastinate import RetryStrategy
        from procrastinate.worker import Worker as ProcrastinateWorker

        from image_project.run.interrupts import Interrupts

        try:
            await anyio.to_thread.run_sync(ensure_schema, self.url)
        except psycopg.Error as exc:  # the store is unreachable or refuses us
            self._say(
                f"worker: cannot reach the store {redact_url(self.url)}: {_first_line(exc)}",
                error=True,
            )
            return EXIT_SETUP_FAILED
        await anyio.to_thread.run_sync(_preload)
        _one_line_logs(self.out)
        app = make_app(self.url, self.outage, self._handed_over)
        retry = RetryStrategy(retry_exceptions=[WorkerSetupFailed, InfrastructureFailed])
        app.task(name=TASK, queue=QUEUE, retry=retry, pass_context=True)(self._job)
        heartbeat = max(0.2, self.stalled_after_s / 3)
        interrupts = Interrupts(
            self._on_signal,
            left=f"the runs in flight go back to the queue after --stalled-after "
            f"({self.stalled_after_s:g} s)",
        )
        _quiet_lost_tasks(self.out)
        try:
            async with app.open_async(), anyio.create_task_group() as tg:
                self._procrastinate = ProcrastinateWorker(
                    app,
                    queues=[QUEUE],
                    concurrency=self.parallel,
                    wait=True,
                    install_signal_handlers=False,
                    update_heartbeat_interval=heartbeat,
                    stalled_worker_timeout=self.stalled_after_s,
                    fetch_job_polling_interval=min(5.0, heartbeat),
                )
                tg.start_soon(self._sweep, app)
                tg.start_soon(self._keep_alive, app, heartbeat)
                interrupts.install()
                try:
                    await self._procrastinate.run()  # type: ignore[no-untyped-call]
                except DatabaseLost:
                    pass  # said by _on_database_lost; the exit code says it too
                finally:
                    interrupts.restore()
                tg.cancel_scope.cancel()
        except DatabaseLost:
            pass
        finally:
            await self._close()
        self._say(f"worker: {self.made} run(s) made")
        if self.outage.lost:
            return EXIT_DATABASE_LOST
        return EXIT_SETUP_FAILED if self.refused else 0

    def _on_database_lost(self) -> None:
        """The database has been unreachable past the bound (from any thread): stop."""
        self._say(
            f"worker: the database at {redact_url(self.url)} has not answered for "
            f"{self.database_lost_after_s:g} s (--database-lost-after): stopping (exit "
            f"{EXIT_DATABASE_LOST}); its runs in flight go back to the queue once it answers",
            error=True,
        )
        self._stop()

    async def _keep_alive(self, app: procrastinate.App, every_s: float) -> None:
        """procrastinate's heartbeat, kept while any run of this worker is in flight: its own
        stops when the worker starts to stop, before the runs in flight end, and another
        worker would then take them for stalled and make them again."""
        while True:
            await anyio.sleep(every_s)
            worker = self._procrastinate
            if worker is None or worker.worker_id is None or not self._in_flight:
                continue
            try:
                await app.job_manager.update_heartbeat(worker.worker_id)
            except DatabaseLost:
                return

    def _stop(self) -> None:
        """No new run; the runs in flight finish (procrastinate's graceful stop)."""
        if self._procrastinate is not None:
            self._procrastinate.stop()  # type: ignore[no-untyped-call]

    def _on_signal(self, signum: int) -> None:
        import signal

        name = signal.Signals(signum).name
        self._say(
            f"worker: {name}: taking no new run; the runs in flight finish "
            f"({name} again quits at once)"
        )
        self._stop()

    async def _sweep(self, app: procrastinate.App) -> None:
        """Put the runs of workers that stopped sending heartbeats back in the queue; with
        ``until_done``, stop the worker once nothing is queued or running. Checks every
        third of ``stalled_after_s``, at most a second apart."""
        check = min(1.0, max(0.2, self.stalled_after_s / 3))
        while True:
            try:
                await self._sweep_once(app)
                if self.until_done and not await self._active(app):
                    self._stop()
                    return
            except DatabaseLost:
                return
            await anyio.sleep(check)

    async def _sweep_once(self, app: procrastinate.App) -> None:
        """Queue again the runs of workers silent for ``stalled_after_s``. Not this worker's
        own (its heartbeat may only be late), and not until ``stalled_after_s`` after an
        outage has ended: no worker could send a heartbeat during it."""
        since = self.outage.since_recovered()
        if self.outage.began is not None or (since is not None and since < self.stalled_after_s):
            return
        own = self._procrastinate.worker_id if self._procrastinate is not None else None
        stalled = await app.job_manager.get_stalled_jobs(
            task_name=TASK, seconds_since_heartbeat=self.stalled_after_s
        )
        for job in stalled:
            if own is not None and job.worker_id == own:
                continue
            try:
                await app.job_manager.retry_job(job)
            except DatabaseLost:
                raise
            except Exception:  # another worker put it back first
                continue
            args = job.task_kwargs
            self._say(
                f"worker: run {int(str(args['index'])) + 1} of {args['campaign']} was "
                "left by a worker that stopped answering; queued again"
            )

    async def _active(self, app: procrastinate.App) -> bool:
        row = await app.connector.execute_query_one_async(
            "SELECT count(*) AS n FROM procrastinate_jobs "
            "WHERE task_name = %(task)s AND status IN ('todo', 'doing')",
            task=TASK,
        )
        return int(row["n"]) > 0

    async def _job(
        self,
        context: JobContext,
        campaign: str,
        index: int,
        runs: int,
        seed: int,
        config: dict[str, Any],
        history: int | None = None,
    ) -> None:
        """One run of ``campaign`` (see the module docstring)."""
        gid = generation_id_for(campaign, index)
        prefix = f"[{campaign} run {index + 1}/{runs}] "
        self._in_flight += 1
        try:
            await self._attempt(context, campaign, gid, prefix, seed, config, history)
        except DatabaseLost as exc:
            self._say(prefix + f"the database failed ({exc}): this attempt wrote nothing")
            raise InfrastructureFailed(str(exc)) from exc
        finally:
            self._in_flight -= 1
            self.store.release(gid)

    async def _attempt(
        self,
        context: JobContext,
        campaign: str,
        gid: str,
        prefix: str,
        seed: int,
        config: dict[str, Any],
        history: int | None,
    ) -> None:
        try:
            state = await self._campaign(campaign, config, history)
        except WorkerSetupFailed:
            self._say(prefix + "put back in the queue for another worker")
            raise
        _attempt, started, stored = await anyio.to_thread.run_sync(self.store.claim, gid, campaign)
        if stored == "ok":
            self._say(prefix + f"already recorded as {gid}")
            return
        if stored is not None:
            raise CampaignRunFailed(f"run {gid} is recorded as {stored}; its transcript says why")
        again = f", attempt {started}" if started > 1 else ""
        self._say(prefix + f"started (seed {seed}{again})")
        begun = time.perf_counter()
        try:
            result = await run_generation(
                state.cfg,
                state.backends,
                inputs=state.inputs,
                seed=seed,
                generation_id=gid,
                store=self.store,
                upscale=state.upscale,
            )
        except (RunAlreadyRecorded, RunTakenOver) as exc:
            # The job is the owning attempt's to finish: this worker sends nothing about it.
            if context.job.id is not None:
                self._handed_over.add(context.job.id)
            self._say(prefix + f"{exc}: this attempt wrote nothing")
            return
        except StoreUnreachable as exc:
            await self._requeue(gid, prefix, exc)
        except RunFailed as exc:
            await self._save_again(exc.record, gid, prefix)
            self._say(prefix + f"FAILED: {exc}")
            raise CampaignRunFailed(str(exc)) from exc
        if result.store is not None and not result.store.written:
            await self._save_again(result.record, gid, prefix)
        self.made += 1
        saved = result.record.title_generation
        title = f"#{saved.seq:03d} {saved.title}" if saved is not None else "prompt only"
        self._say(prefix + f"done: {title} ({time.perf_counter() - begun:.1f} s)")

    async def _save_again(self, record: RunRecord, gid: str, prefix: str) -> None:
        """Write the run's store row unless it is written (a lost connection at its first
        write), waiting for the database as long as the outage bound allows."""
        try:
            await anyio.to_thread.run_sync(self.store.save_again, record)
        except (RunAlreadyRecorded, RunTakenOver) as exc:
            self._say(prefix + f"{exc}: its store row was not written by this attempt")
            raise CampaignRunFailed(str(exc)) from exc

    async def _requeue(self, gid: str, prefix: str, exc: StoreUnreachable) -> None:
        """The attempt wrote nothing because the database failed: count it, back to the
        queue."""
        self._say(prefix + f"the database failed ({exc}): this attempt wrote nothing; queued again")
        if not isinstance(exc, DatabaseLost):
            with contextlib.suppress(DatabaseLost):
                await anyio.to_thread.run_sync(self.store.requeued, gid)
        raise InfrastructureFailed(str(exc)) from exc

    async def _campaign(
        self, campaign: str, config: dict[str, Any], history: int | None
    ) -> _Campaign:
        """The shared state of ``campaign``'s runs in this worker, built at its first run.
        When that fails, this worker takes no new run and raises :class:`WorkerSetupFailed`
        (for this run and every other of its runs in flight)."""
        async with self._setup:
            if campaign in self.refused:
                raise WorkerSetupFailed(self.refused[campaign])
            if campaign not in self.campaigns:
                try:
                    self.campaigns[campaign] = await self._build(config, history)
                except DatabaseLost:
                    raise  # not this machine's fault: the job goes back to the queue
                except Exception as exc:
                    why = f"{type(exc).__name__}: {_first_line(exc)}"
                    self.refused[campaign] = why
                    self._stop()
                    self._say(
                        f"worker: cannot make the runs of {campaign} on this machine ({why}); "
                        "taking no new run: fix this machine and start the worker again",
                        error=True,
                    )
                    raise WorkerSetupFailed(why) from exc
            return self.campaigns[campaign]

    async def _build(self, config: dict[str, Any], history: int | None) -> _Campaign:
        """Configuration, backends, the key's shared budget, inputs and history, in a thread
        (imports, file reads and the database would otherwise hold the event loop, and with
        it the worker's heartbeat); then the backends' probe."""
        state = await anyio.to_thread.run_sync(self._prepare, config, history)
        try:
            await state.backends.probe()  # closes the backends when it fails
        except BaseException:
            if state.budget is not None:
                state.budget.close()
            raise
        return state

    def _prepare(self, config: dict[str, Any], history: int | None) -> _Campaign:
        overrides = [*self.overrides, "store.enabled=true", f"store.url={self.url}"]
        cfg = load_config(root=self.root, base=config, overrides=overrides, env=self.env)
        upscale = check_upscale(cfg, self.env) if cfg.run.mode != "prompt_only" else None
        inputs = load_inputs(cfg)
        if history is None:  # a job queued without the store's history: this machine's files
            inputs = with_history(cfg, inputs)
        else:
            inputs = self._store_history(cfg, inputs, history)
        backends = make_backends(cfg, self.env)
        budget = None
        if backends.pacer is not None:
            name = budget_name(cfg.backend.base_url, self.env.get(cfg.backend.api_key_env))
            budget = PostgresBudget(conninfo(self.url), name, self.outage)
            backends.pacer.share(budget)
        return _Campaign(cfg, backends, inputs, upscale, budget)

    def _store_history(self, cfg: AppConfig, inputs: Inputs, up_to_seq: int) -> Inputs:
        """``inputs`` with the titles to avoid and the novelty history of the shared store as
        it was when the campaign was submitted (its images up to ``seq`` ``up_to_seq``), the
        same on every machine whatever its own files hold: the titles most recent first,
        as the titles manifest gives them; the final prompts of those runs, oldest first,
        as the generations CSV gives them (both are written for a run with an image)."""
        rows = self.outage.call(lambda: self.store.store().image_history(up_to_seq))
        titles = tuple(title.strip() for title, _ in reversed(rows) if title.strip())
        novelty = None
        scoring = cfg.prompt.scoring
        if scoring.enabled:
            from image_project.stages.scoring.novelty import novelty_from

            novelty = novelty_from(
                scoring.novelty.enabled,
                scoring.novelty.window,
                [prompt for _, prompt in rows if prompt and prompt.strip()],
                f"the store's images up to seq {up_to_seq}",
                scoring.novelty.min_share,
            )
        return replace(inputs, known_titles=titles, novelty=novelty)

    async def _close(self) -> None:
        with anyio.CancelScope(shield=True):
            for state in self.campaigns.values():
                await state.backends.aclose()
                if state.budget is not None:
                    state.budget.close()
            self.store.close()

    def _say(self, line: str, *, error: bool = False) -> None:
        if error or not self.quiet:
            print(line, file=self.out, flush=True)


class _OneLine(logging.Formatter):
    """A library's log record as one line, never with its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        return f"worker: {record.name}: {record.getMessage().splitlines()[0]}"


def _one_line_logs(out: TextIO) -> None:
    """procrastinate, psycopg's pool and pyrate-limiter log what they recover from (a lost
    connection, a job whose run failed) with tracebacks: keep their errors only, one line
    each (the worker says what happened to each run itself)."""

    class Relevant(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            action = getattr(record, "action", None)
            lost = "DatabaseLost" in record.getMessage() or (
                record.exc_info is not None and isinstance(record.exc_info[1], DatabaseLost)
            )
            return not lost and action not in ("job_error", "job_error_retry")

    handler = logging.StreamHandler(out)
    handler.setLevel(logging.ERROR)
    handler.setFormatter(_OneLine())
    handler.addFilter(Relevant())
    for name in ("procrastinate", "psycopg", "pyrate_limiter"):
        log = logging.getLogger(name)
        log.handlers = [handler]
        log.propagate = False


def _quiet_lost_tasks(out: TextIO) -> None:
    """A job whose status could not be written because the database is gone
    (:class:`DatabaseLost`) ends a task of procrastinate's with that exception, which asyncio
    would report with a traceback: say it in one line (the job stays taken, and goes back to
    the queue once the database answers, as a dead worker's does)."""
    import asyncio

    loop = asyncio.get_running_loop()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, DatabaseLost):
            return  # said once, by the worker
        if isinstance(exc, RecordsRefused) or (exc is not None and is_connection_loss(exc)):
            print(f"worker: {_first_line(exc)}", file=out, flush=True)
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
