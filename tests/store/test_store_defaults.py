"""A store that loses nothing by default, on both engines: ``runs export`` and
``runs stats`` cover every stored run unless ``--limit`` is given; one run PostgreSQL
refuses does not stop an import."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from image_project.record import RunRecord
from image_project.store import open_store
from tests.store.conftest import PostgresServer
from tests.store.test_store import as_json, delete_store, five_runs, pg, runs_cli, snapshot
from tests.support.records import run

pytestmark = pytest.mark.anyio

MANY = 30
"""More stored runs than any default limit (``runs list`` shows 20, ``review`` 20)."""


def clones(records: list[RunRecord], total: int) -> list[RunRecord]:
    """``total`` distinct records made from ``records`` (real runs: plain, scoring, failed),
    each with its own generation id and a creation time a minute apart."""
    start = datetime(2026, 11, 1, tzinfo=UTC)
    made = []
    for n in range(total):
        base = records[n % len(records)]
        created = (start + timedelta(minutes=n)).isoformat(timespec="seconds")
        made.append(
            base.model_copy(
                update={
                    "generation_id": f"20261101_{n:06d}_clone{n:03d}",
                    "created_at": created.replace("+00:00", "Z"),
                }
            )
        )
    return made


async def test_export_and_stats_cover_every_run_unless_limited(
    tmp_path: Path,
    store_url: str,
    engine: str,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    many = clones(await five_runs(tmp_path, store_url), MANY)
    postgres: PostgresServer | None = pg(request, engine)
    delete_store(store_url, postgres)
    with open_store(store_url) as store:
        for record in many:
            assert store.import_record(record)
    before = snapshot(store_url)
    assert len(before["runs"]) == MANY

    code, out = runs_cli(capsys, store_url, "list")
    assert code == 0 and len(out.strip().splitlines()) == 1 + 20  # list keeps its 20
    code, out = runs_cli(capsys, store_url, "export", "--limit", "3")
    assert code == 0 and len(out.strip().splitlines()) == 3  # an explicit limit still limits

    export = tmp_path / "all.jsonl"
    code, out = runs_cli(capsys, store_url, "export", "--out", str(export))
    assert code == 0 and f"exported {MANY} run(s)" in out
    lines = export.read_text(encoding="utf-8").splitlines()
    assert as_json([RunRecord.model_validate_json(line) for line in lines]) == as_json(many)
    code, out = runs_cli(capsys, store_url, "export", "--format", "csv")
    assert len(out.strip().splitlines()) == 1 + MANY

    code, out = runs_cli(capsys, store_url, "stats")
    assert code == 0, out
    failed = sum(1 for r in many if r.error is not None)
    assert f"Judge panel over {MANY} runs" in out and f"{failed} failed)" in out

    delete_store(store_url, postgres)  # a fresh store, rebuilt from the export alone
    code, out = runs_cli(capsys, store_url, "import", str(export))
    assert code == 0 and f"imported {MANY} run(s)" in out
    assert snapshot(store_url) == before


def test_an_over_long_id_is_skipped_and_named_and_the_rest_imported(
    tmp_path: Path, store_url: str, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite takes a generation id longer than its column (64); PostgreSQL refuses it. That
    one run is skipped and named; it does not stop the import of the others."""
    long_id = "x" * 80
    records = [run(1, scoring=False), run(2, scoring=False), run(3, scoring=False)]
    records[1] = records[1].model_copy(update={"generation_id": long_id})
    export = tmp_path / "runs.jsonl"
    export.write_text("".join(r.model_dump_json() + "\n" for r in records), encoding="utf-8")
    code, out = runs_cli(capsys, store_url, "import", str(export))
    with open_store(store_url) as store:
        stored = sorted(r.generation_id for r in store.records())
    if engine == "sqlite":
        assert code == 0 and stored == sorted(r.generation_id for r in records)
        return
    assert code == 1 and stored == ["run001", "run003"]
    assert "imported 2 run(s)" in out and "1 file(s), line(s) or run(s) could not be" in out
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and long_id in errors[0] and str(export) in errors[0]
