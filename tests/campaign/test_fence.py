"""The fence on a real PostgreSQL store: two attempts at one campaign run (a worker taken for
stalled that is still alive, and its successor) and only one of them records it.

Each attempt is its own :class:`~image_project.campaign.fence.FencedWriter`, as in two worker
processes. The latest claim owns the run: the earlier attempt is refused at every records step
(the ``seq``, the transcript check, the store row) and a later attempt finds the run recorded.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from image_project.campaign.fence import CLAIMS_TABLE, FencedWriter
from image_project.campaign.outage import Outage
from image_project.campaign.queue import ensure_schema, generation_id_for
from image_project.store.writer import RunAlreadyRecorded, RunTakenOver
from tests.campaign.test_campaign import store
from tests.support.records import run

__all__ = ["store"]

pytestmark = pytest.mark.postgres

CAMPAIGN = "c20261202"
GID = generation_id_for(CAMPAIGN, 0)


@pytest.fixture
def writers(store: str) -> Iterator[tuple[FencedWriter, FencedWriter, FencedWriter]]:
    ensure_schema(store)
    made = tuple(FencedWriter(store, Outage(30.0)) for _ in range(3))
    try:
        yield made  # type: ignore[misc]
    finally:
        for writer in made:
            writer.close()


def stored(writer: FencedWriter) -> list[str]:
    """The generation ids of the store's run rows."""
    with writer.store().transaction() as conn:
        return [str(g) for g in conn.execute(text("SELECT generation_id FROM runs")).scalars()]


def test_an_attempt_taken_over_writes_nothing_and_its_successor_records_once(
    writers: tuple[FencedWriter, FencedWriter, FencedWriter],
) -> None:
    first, second, third = writers
    record = run(1, image_path="/x/image.jpg").model_copy(update={"generation_id": GID})

    _, started, status = first.claim(GID, CAMPAIGN)
    assert (started, status) == (1, None)
    seq, _ = first.claim_seq(1, GID)  # the first attempt reached its records phase
    _, started, status = second.claim(GID, CAMPAIGN)  # it was taken for stalled
    assert (started, status) == (2, None)

    with pytest.raises(RunTakenOver):
        first.claim_seq(1, GID)
    with pytest.raises(RunTakenOver):
        first.save(record)
    assert stored(first) == []

    assert second.claim_seq(1, GID) == (seq, None)  # the successor keeps the reserved number
    assert second.save(record).written
    assert stored(second) == [GID]

    with pytest.raises(RunAlreadyRecorded):  # its retry after a lost connection
        first.save_again(record)
    _, started, status = third.claim(GID, CAMPAIGN)
    assert started == 3 and status is not None
    with pytest.raises(RunAlreadyRecorded):
        third.claim_seq(1, GID)
    with pytest.raises(RunAlreadyRecorded):
        third.may_record(GID)
    third.save(record)  # the store keeps its first row: a recorded run is not written again
    assert stored(third) == [GID]
    with third.store().transaction() as conn:
        attempts = conn.execute(
            text(f"SELECT attempts FROM {CLAIMS_TABLE} WHERE generation_id = :g"), {"g": GID}
        ).scalar_one()
    assert attempts == 3


def test_a_failed_attempt_taken_over_may_not_write_its_transcript(
    writers: tuple[FencedWriter, FencedWriter, FencedWriter],
) -> None:
    first, second, _ = writers
    first.claim(GID, CAMPAIGN)
    first.may_record(GID)  # the owner may
    second.claim(GID, CAMPAIGN)
    with pytest.raises(RunTakenOver):
        first.may_record(GID)
    second.may_record(GID)
