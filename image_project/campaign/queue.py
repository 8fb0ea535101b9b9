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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy.engine import make_url

from image_project.config import AppConfig
from image_project.config.store_url import POSTGRES_PREFIX, redact_url
from image_project.errors import ConfigError
from image_project.seeding import fresh_seed, run_seed

if TYPE_CHECKING:
    import procrastinate

__all__ = [
    "EXTRA",
    "QUEUE",
    "TASK",
    "CampaignCounts",
    "campaign_status",
    "conninfo",
    "ensure_schema",
    "generation_id_for",
    "make_app",
    "new_campaign_id",
    "require_campaign",
    "submit_campaign",
]

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
            f"there), got {redact_url(url)}; set --set store.url={POSTGRES_PREFIX}//user@host/db "
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


def make_app(url: str) -> procrastinate.App:
    """A procrastinate app on the store's database (not opened)."""
    import procrastinate

    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo(url)))


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
    """One campaign's runs by state."""

    campaign: str
    done: int = 0
    running: int = 0
    failed: int = 0
    queued: int = 0

    @property
    def runs(self) -> int:
        return self.done + self.running + self.failed + self.queued

    def line(self) -> str:
        return (
            f"{self.campaign}: {self.runs} runs: {self.done} done, {self.running} running, "
            f"{self.failed} failed, {self.queued} queued"
        )


_STATE: Final[Mapping[str, str]] = {
    "todo": "queued",
    "doing": "running",
    "succeeded": "done",
    "failed": "failed",
    "cancelled": "failed",
    "aborted": "failed",
    "aborting": "running",
}


def campaign_status(url: str, campaign: str | None = None) -> list[CampaignCounts]:
    """Every campaign's runs by state (or only ``campaign``'s), oldest campaign first."""
    import psycopg

    ensure_schema(url)
    with psycopg.connect(conninfo(url)) as conn:
        rows = conn.execute(
            "SELECT args->>'campaign', status::text, count(*), min(id) FROM procrastinate_jobs "
            "WHERE task_name = %s AND (%s::text IS NULL OR args->>'campaign' = %s) "
            "GROUP BY 1, 2",
            (TASK, campaign, campaign),
        ).fetchall()
    counts: dict[str, dict[str, int]] = {}
    order: dict[str, int] = {}
    for name, status, count, first in rows:
        state = counts.setdefault(str(name), {})
        key = _STATE.get(str(status), "failed")
        state[key] = state.get(key, 0) + int(count)
        order[str(name)] = min(order.get(str(name), first), first)
    return [CampaignCounts(name, **counts[name]) for name in sorted(counts, key=order.__getitem__)]
