"""The worker's queue connector on a real PostgreSQL store, when a write reaches the server
and its answer is lost: procrastinate's ``finish_job`` committed, the connection dropped
before the worker heard so, and the connector made the write again on a fresh connection.
That second try finds the job finished already; the connector takes it as done (the worker
printed a ``Task exception was never retrieved`` traceback before), and still raises when
the job had moved on before any connection was lost."""

from __future__ import annotations

from typing import Any, LiteralString

import anyio
import procrastinate
import psycopg
import pytest
from procrastinate.exceptions import ConnectorException
from procrastinate.jobs import Status

from image_project.campaign.outage import Outage
from image_project.campaign.queue import QUEUE, TASK, conninfo, ensure_schema, resilient
from tests.campaign.test_campaign import store

__all__ = ["store"]

pytestmark = pytest.mark.postgres


class LosesTheFirstAnswer(procrastinate.PsycopgConnector):
    """procrastinate's connector whose first write is carried out and then reported as a
    lost connection, as when the server commits and the connection drops before it answers."""

    lost = 0

    async def execute_query_async(self, query: LiteralString, **arguments: Any) -> None:
        await super().execute_query_async(query, **arguments)
        if self.lost == 0:
            self.lost += 1
            lost = psycopg.OperationalError("server closed the connection unexpectedly")
            raise ConnectorException() from lost


def _connector(url: str, *, losing: bool) -> procrastinate.PsycopgConnector:
    under = (LosesTheFirstAnswer,) if losing else ()
    cls = type("Connector", (resilient(Outage(30.0), set()), *under), {})
    connector: procrastinate.PsycopgConnector = cls(conninfo=conninfo(url))
    return connector


async def _doing_job(app: procrastinate.App) -> int:
    """A job of the campaign's task, taken by a worker (status ``doing``)."""
    await app.configure_task(TASK, queue=QUEUE).defer_async(index=0)
    worker_id = await app.job_manager.register_worker()
    job = await app.job_manager.fetch_job(queues=[QUEUE], worker_id=worker_id)
    assert job is not None and job.id is not None
    return job.id


async def _status(app: procrastinate.App, job_id: int) -> tuple[str, int]:
    [job] = await app.job_manager.list_jobs_async(id=job_id)
    return Status(job.status).value, job.attempts


def test_a_finish_whose_answer_was_lost_is_taken_as_done(store: str) -> None:
    ensure_schema(store)

    async def main() -> tuple[str, int]:
        app = procrastinate.App(connector=_connector(store, losing=True))
        async with app.open_async():
            job_id = await _doing_job(app)
            await app.job_manager.finish_job_by_id_async(job_id, Status.SUCCEEDED, False)
            assert app.connector.lost == 1  # type: ignore[attr-defined]
            return await _status(app, job_id)

    assert anyio.run(main) == ("succeeded", 1)


def test_a_finish_refused_without_a_lost_connection_still_raises(store: str) -> None:
    ensure_schema(store)

    async def main() -> None:
        app = procrastinate.App(connector=_connector(store, losing=False))
        async with app.open_async():
            job_id = await _doing_job(app)
            await app.job_manager.finish_job_by_id_async(job_id, Status.SUCCEEDED, False)
            with pytest.raises(ConnectorException) as raised:
                await app.job_manager.finish_job_by_id_async(job_id, Status.FAILED, False)
            assert "Job was not found" in str(raised.value.__cause__)
            assert await _status(app, job_id) == ("succeeded", 1)

    anyio.run(main)
