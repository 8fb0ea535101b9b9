"""A store that loses nothing by default, on both engines: ``runs export`` and
``runs stats`` cover every stored run unless ``--limit`` is given; a run whose id is not a
generation id is refused, named, and does not stop an import."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from image_project.record.run import RunRecord
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


BAD_IDS = ("", "..", "z/y", "/etc/passwd", "nul\x00id", "x" * 80, "Upper")
"""Not generation ids (``image_project.record.ids``): empty, a parent folder, a path, an
absolute path, a NUL, longer than the store's column (which SQLite would take), upper case."""


def test_a_record_whose_id_is_not_a_generation_id_is_refused_and_named(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each such run is skipped with a line naming its id and the pattern, on both engines;
    the others are imported."""
    good = [run(1, scoring=False), run(2, scoring=False)]
    bad = [run(3, scoring=False).model_copy(update={"generation_id": i}) for i in BAD_IDS]
    export = tmp_path / "runs.jsonl"
    export.write_text("".join(r.model_dump_json() + "\n" for r in good + bad), encoding="utf-8")
    code, out = runs_cli(capsys, store_url, "import", str(export))
    with open_store(store_url) as store:
        stored = sorted(r.generation_id for r in store.records())
    assert code == 1 and stored == ["run001", "run002"]
    refused = [line for line in out.splitlines() if line.startswith("error: ")]
    assert refused == [
        f"error: {export}: generation id {shown} does not match [a-z0-9][a-z0-9_-]{{0,63}}"
        for shown in ("''", "'..'", "'z/y'", "'/etc/passwd'", "'nul\\x00id'")
    ] + [
        f"error: {export}: generation id '{'x' * 59}… (80 characters) does not match "
        "[a-z0-9][a-z0-9_-]{0,63}",
        f"error: {export}: generation id 'Upper' does not match [a-z0-9][a-z0-9_-]{{0,63}}",
    ]
    assert "imported 2 run(s)" in out and f"{len(BAD_IDS)} file(s), line(s) or run(s)" in out
