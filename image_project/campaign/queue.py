"""The campaign's queue on procrastinate: submitting runs, reading their state, and the
names both sides agree on.

A campaign is ``runs`` jobs of one task (:data:`TASK`) in the store's PostgreSQL database
(procrastinate's own tables, ``procrastinate_*``, created on first use). Each job's arguments
carry the campaign id, the run's index and seed, the campaign's configuration (validated
once, at submit, without the store URL: each worker uses its own) and its history: the
store's highest image ``seq`` at submit, so that every worker reads the titles to avoid and
the novelty history of the same stored images, whatever its own files hold. A job's procrastinate
status is the run's state: ``todo`` queued, ``doing`` running, ``succeeded`` done, ``failed``
failed (the run's transcript and store row say why).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, LiteralString

from sqlalchemy.engine import make_url

from image_project.campaign.fence import CLAIMS_DDL
from image_project.config.models import AppConfig
from image_project.config.store_url import POSTGRES_PREFIX, redact_url
from image_project.errors import ConfigError
from image_project.seeding import fresh_seed, run_seed

if TYPE_CHECKING:
    import procrastinate

    from image_project.campaign.outage import Outage

TASK: Final = "image_project.campaign.run"
QUEUE: Final = "image_project_runs"
EXTRA: Final = "image_project[campaign]"
_SCHEMA_LOCK: Final = 0x1A6E_0003  # pg_advisory_xact_lock key: procrastinate's schema


def require_campaign(url: str, key: str = "store.url") -> None:
    """Raise :class:`ConfigError` unless the campaign can run: its libraries installed (the
    ``campaign`` extra) and ``url`` a PostgreSQL store (the queue and the shared rate budget
    live there; a SQLite file is one machine's)."""
    missing = []
    for module in ("procrastinate", "pyrate_limiter", "psycopg_pool"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigError(
            "",
            f"a campaign needs {', '.join(missing)}, which the {EXTRA!r} extra installs: "
            f"pip install '{EXTRA}'",
        )
    if not url.startswith(POSTGRES_PREFIX):
        raise ConfigError(
            key,
            f"a campaign needs a PostgreSQL store (its queue and shared rate budget live "
            f"there), got {redact_url(url)}; set --set store.url=postgresql://user@host/db "
            "(one machine needs no campaign: image-project --runs N --parallel K)",
        )


def conninfo(url: str) -> str:
    """The store's SQLAlchemy URL (``postgresql+psycopg://…``) as a libpq URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def generation_id_for(campaign: str, index: int) -> str:
    """Run ``index`` (0-based) of ``campaign``: the same id whichever worker makes it and
    however often it is taken, so the store records it once."""
    return f"{campaign}_r{index + 1:05d}"


def new_campaign_id() -> str:
    """``cYYYYmmdd_HHMMSS_`` (UTC) and 6 random hex digits."""
    return f"c{datetime.now(UTC):%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


def make_app(
    url: str, outage: Outage | None = None, handed_over: set[int] | None = None
) -> procrastinate.App:
    """A procrastinate app on the store's database (not opened); with ``outage`` (a
    worker's), its queries are made again after a lost connection and no write is sent about
    the jobs in ``handed_over`` (:func:`resilient`)."""
    import procrastinate

    if outage is None:
        return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo(url)))
    connector = resilient(outage, handed_over if handed_over is not None else set())(
        conninfo=conninfo(url), timeout=_POOL_WAIT_S, reconnect_timeout=outage.lost_after_s
    )
    return procrastinate.App(connector=connector)


_POOL_WAIT_S: Final = 2.0
"""How long a query waits for a pooled connection before it counts as a lost connection."""


def resilient(outage: Outage, handed_over: set[int]) -> type[procrastinate.PsycopgConnector]:
    """procrastinate's psycopg connector, with every query made again after a lost connection
    (``outage``: backoff, and :class:`~.outage.DatabaseLost` past its bound) and the
    notification listener reconnected. A write about a job in ``handed_over`` (another
    attempt owns its run, so the job is that attempt's to finish) is not sent. A write made
    again after a lost connection that procrastinate refuses because the job has moved on
    (:func:`_moved_on`) is taken as done."""
    import procrastinate

    class ResilientConnector(procrastinate.PsycopgConnector):
        async def execute_query_async(self, query: LiteralString, **arguments: Any) -> None:
            if arguments.get("job_id") in handed_over:
                return
            execute, tries = super().execute_query_async, 0

            async def attempt() -> None:
                nonlocal tries
                tries += 1
                try:
                    await execute(query, **arguments)
                except procrastinate.exceptions.ConnectorException as exc:
                    if tries == 1 or not _moved_on(exc):
                        raise

            await outage.acall(attempt)

        async def execute_query_one_async(
            self, query: LiteralString, **arguments: Any
        ) -> dict[str, Any]:
            return await outage.acall(partial(super().execute_query_one_async, query, **arguments))

        async def execute_query_all_async(
            self, query: LiteralString, **arguments: Any
        ) -> list[dict[str, Any]]:
            return await outage.acall(partial(super().execute_query_all_async, query, **arguments))

        async def listen_notify(self, on_notification: Any, channels: Iterable[str]) -> None:
            listen = partial(super().listen_notify, on_notification, channels)
            while True:
                await outage.acall(listen)

    return ResilientConnector


_MOVED_ON: Final = "Job was not found or "


def _moved_on(exc: BaseException) -> bool:
    """True when ``exc`` is procrastinate refusing a write about a job that is no longer in
    the state the write expects (``finish_job``, ``retry_job``). Met on a try made again
    after a lost connection, it means the lost try reached the server and committed: the
    answer was lost, not the write."""
    import psycopg

    cause = exc.__cause__
    return isinstance(cause, psycopg.errors.RaiseException) and _MOVED_ON in str(cause)


def ensure_schema(url: str) -> None:
    """Create procrastinate's tables in the store's database unless they exist (under an
    advisory lock, so two workers starting together create them once)."""
    import psycopg
    from procrastinate.schema import SchemaManager

    with psycopg.connect(conninfo(url)) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        row = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
        if row is None or row[0] is None:
            schema = SchemaManager(make_app(url).connector).get_schema()
            conn.execute(schema.encode())
        conn.execute(CLAIMS_DDL.encode())


def _job_config(cfg: AppConfig) -> dict[str, Any]:
    """The configuration a job carries: everything but the store URL (each worker's own,
    which may hold a password)."""
    data = cfg.model_dump(mode="json")
    data["store"]["url"] = None
    return data


async def submit_campaign(cfg: AppConfig, url: str) -> tuple[str, int, int]:
    """Queue ``run.runs`` runs of ``cfg``; ``(campaign id, runs, campaign seed)``. Run ``i``
    gets ``run_seed(seed, i)``, as ``--runs N`` gives it; without ``prompt.random_seed``
    the campaign draws one seed now (recorded in every job), so every run's seed is fixed at
    submit whichever worker takes it. The history the runs read (titles to avoid, novelty)
    is the store's as it is now: its images up to the highest ``seq``."""
    seed = cfg.prompt.random_seed if cfg.prompt.random_seed is not None else fresh_seed()
    cfg = cfg.model_copy(update={"prompt": cfg.prompt.model_copy(update={"random_seed": seed})})
    config, campaign, runs = _job_config(cfg), new_campaign_id(), cfg.run.runs
    ensure_schema(url)
    from image_project.store.db import RunStore

    with RunStore.open(url) as store:
        history = store.highest_seq()
    app = make_app(url)
    jobs: list[dict[str, Any]] = [
        {
            "campaign": campaign,
            "index": i,
            "runs": runs,
            "seed": run_seed(seed, i),
            "config": config,
            "history": history,
        }
        for i in range(runs)
    ]
    async with app.open_async():
        deferrer = app.configure_task(TASK, queue=QUEUE)
        await deferrer.batch_defer_async(*jobs)
    return campaign, runs, seed


@dataclass(frozen=True)
class CampaignCounts:
    """One campaign's runs by state; ``again`` runs made again after a stall (a second
    attempt started while no database failure explains it), ``infra`` runs that went back to
    the queue because the database failed; ``records`` (store rows, transcripts, manifest rows
    of this machine's folders) and ``problems`` (one line each) when files were looked at."""

    campaign: str
    done: int = 0
    running: int = 0
    failed: int = 0
    queued: int = 0
    again: int = 0
    infra: int = 0
    records: tuple[int, int, int] | None = None
    problems: tuple[str, ...] = ()

    @property
    def runs(self) -> int:
        return self.done + self.running + self.failed + self.queued

    def line(self) -> str:
        text = (
            f"{self.campaign}: {self.runs} runs: {self.done} done, {self.running} running, "
            f"{self.failed} failed, {self.queued} queued; {self.again} made again after a "
            f"stall, {self.infra} failed by infrastructure (queued again)"
        )
        if self.records is not None:
            stored, transcripts, manifest = self.records
            text += (
                f"\n  records: {stored} in the store, {transcripts} transcripts, "
                f"{manifest} manifest rows here"
            )
        for problem in self.problems:
            text += f"\n  ! {problem}"
        return text


_STATE: Final[Mapping[str, str]] = {
    "todo": "queued",
    "doing": "running",
    "succeeded": "done",
    "failed": "failed",
    "cancelled": "failed",
    "aborted": "failed",
    "aborting": "running",
}


def campaign_status(
    url: str, campaign: str | None = None, files: tuple[Path, Path] | None = None
) -> list[CampaignCounts]:
    """Every campaign's runs by state (or only ``campaign``'s), oldest campaign first, with
    the attempts the claims table counted (:mod:`.fence`) and what the store's rows show
    (a ``seq`` held by two runs). With ``files`` (this machine's log folder and titles
    manifest) also the records found there and what does not agree: a generation listed
    twice in the manifest, a transcript without a store row, a manifest row with neither."""
    import psycopg

    from image_project.campaign.fence import CLAIMS_TABLE

    ensure_schema(url)
    with psycopg.connect(conninfo(url)) as conn:
        rows = conn.execute(
            "SELECT args->>'campaign', status::text, count(*), min(id) FROM procrastinate_jobs "
            "WHERE task_name = %s AND (%s::text IS NULL OR args->>'campaign' = %s) "
            "GROUP BY 1, 2",
            (TASK, campaign, campaign),
        ).fetchall()
        attempts = {
            str(name): (int(again), int(infra))
            for name, again, infra in conn.execute(
                "SELECT campaign, count(*) FILTER (WHERE attempts - 1 - requeued > 0), "
                f"count(*) FILTER (WHERE requeued > 0) FROM {CLAIMS_TABLE} GROUP BY 1"
            ).fetchall()
        }
        stored: dict[str, list[tuple[str, int | None]]] = {}
        has_runs = conn.execute("SELECT to_regclass('runs')").fetchone()
        if has_runs is not None and has_runs[0] is not None:
            for gid, seq in conn.execute(
                "SELECT r.generation_id, i.seq FROM runs r "
                "LEFT JOIN images i ON i.generation_id = r.generation_id "
                "WHERE r.generation_id LIKE 'c%%\\_r%%'"
            ).fetchall():
                stored.setdefault(str(gid).rsplit("_r", 1)[0], []).append((str(gid), seq))
    counts: dict[str, dict[str, int]] = {}
    order: dict[str, int] = {}
    for name, status, count, first in rows:
        state = counts.setdefault(str(name), {})
        key = _STATE.get(str(status), "failed")
        state[key] = state.get(key, 0) + int(count)
        order[str(name)] = min(order.get(str(name), first), first)
    found = []
    for name in sorted(counts, key=order.__getitem__):
        again, infra = attempts.get(name, (0, 0))
        mine = stored.get(name, [])
        problems = _shared_seqs(mine)
        records = None
        if files is not None:
            records, seen = _files(name, {gid for gid, _ in mine}, *files)
            problems += seen
        found.append(
            CampaignCounts(
                name,
                **counts[name],
                again=again,
                infra=infra,
                records=records,
                problems=tuple(problems),
            )
        )
    return found


def _shared_seqs(stored: list[tuple[str, int | None]]) -> list[str]:
    by_seq: dict[int, list[str]] = {}
    for gid, seq in stored:
        if seq is not None:
            by_seq.setdefault(seq, []).append(gid)
    return [
        f"seq #{seq:03d} is held by {len(ids)} stored runs: {', '.join(sorted(ids))}"
        for seq, ids in sorted(by_seq.items())
        if len(ids) > 1
    ]


def _files(
    campaign: str, stored: set[str], logs: Path, manifest: Path
) -> tuple[tuple[int, int, int], list[str]]:
    """The campaign's records in this machine's ``logs`` and ``manifest``, and what does not
    agree with the store's ``stored`` ids."""
    from image_project.artifacts.manifest import read_manifest
    from image_project.store.writer import TRANSCRIPT_SUFFIX

    prefix = f"{campaign}_r"
    try:
        transcripts = {
            p.name[: -len(TRANSCRIPT_SUFFIX)] for p in logs.glob(f"{prefix}*{TRANSCRIPT_SUFFIX}")
        }
    except OSError:
        transcripts = set()
    try:
        listed = [
            row.get("generation_id", "")
            for row in read_manifest(manifest)
            if row.get("generation_id", "").startswith(prefix)
        ]
    except Exception:  # an unreadable manifest: nothing of it is counted
        listed = []
    problems = [
        f"generation {gid} is listed {listed.count(gid)} times in {manifest}"
        for gid in sorted(set(listed))
        if listed.count(gid) > 1
    ]
    problems += [
        f"transcript of {gid} in {logs} has no store row" for gid in sorted(transcripts - stored)
    ]
    problems += [
        f"manifest row of {gid} in {manifest} has neither a store row nor a transcript"
        for gid in sorted(set(listed) - stored - transcripts)
    ]
    return (len(stored), len(transcripts), len(listed)), problems
