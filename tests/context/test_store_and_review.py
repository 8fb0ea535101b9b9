"""The context record in the run store (a ``contexts`` row and one ``context_injectors`` row
per injector; migration 0002 upgrades a 0001 store and keeps its runs), in ``runs show``, and
on the review site's run page."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from image_project.cli import command as cli
from image_project.record.context import ContextRecord
from image_project.record.run import RunRecord
from image_project.review.site import build_site
from image_project.review.views import page_name
from image_project.run.driver import run_generation
from image_project.store import open_store
from image_project.store.db import MIGRATIONS_DIR
from image_project.testing import FunctionTextBackend
from tests.test_app import answer, backends, make_cfg
from tests.test_context_run import HALLOWEEN

pytestmark = pytest.mark.anyio


async def context_run(tmp: Path, *extra: str) -> RunRecord:
    result = await run_generation(make_cfg(tmp, *extra), backends(FunctionTextBackend(answer)))
    return result.record


async def test_the_store_holds_the_context_and_every_injector(tmp_path: Path) -> None:
    record = await context_run(tmp_path, *HALLOWEEN)
    context = record.context
    assert isinstance(context, ContextRecord)
    url = f"sqlite:///{tmp_path / 'logs' / 'runs.sqlite'}"
    with open_store(url) as store:
        (row,) = store.table_rows("contexts")
        injectors = sorted(store.table_rows("context_injectors"), key=lambda r: r["position"])
        (stored,) = store.records()
    assert row["generation_id"] == record.generation_id
    assert (row["date_used"], row["date_source"], row["injection_location"]) == (
        "2026-10-25",
        "fixed",
        "prompt",
    )
    assert row["guidance"] == context.guidance
    assert [(r["position"], r["name"], r["source"], r["applied"]) for r in injectors] == [
        (0, "season", "builtin", True),
        (1, "holiday", "builtin", True),
    ]
    holiday = injectors[1]
    assert (holiday["probability"], holiday["roll"]) == (
        context.injectors[1].probability,
        context.injectors[1].roll,
    )
    assert holiday["reason"] == "roll_below_probability"
    assert holiday["metadata"]["holiday_date"] == "2026-10-31"
    assert holiday["guidance"] == list(context.injectors[1].guidance)
    assert stored.model_dump_json() == record.model_dump_json()


async def test_a_0001_store_is_upgraded_and_keeps_its_runs(tmp_path: Path) -> None:
    from alembic import command
    from alembic.config import Config

    url = f"sqlite:///{tmp_path / 'logs' / 'runs.sqlite'}"
    old = await context_run(tmp_path / "old", f"store.url={url}")
    with open_store(url) as store, store.engine.begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.attributes["connection"] = conn
        command.downgrade(config, "0001")
    with sqlite3.connect(tmp_path / "logs" / "runs.sqlite") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("0001",)]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "contexts" not in tables and "runs" in tables
    new = await context_run(tmp_path / "new", f"store.url={url}", *HALLOWEEN)
    with open_store(url) as store:
        assert store.revision() == "0002"
        ids = {r.generation_id for r in store.records()}
        assert len(store.table_rows("context_injectors")) == 2
    assert ids == {old.generation_id, new.generation_id}


async def test_runs_show_and_the_review_page_show_the_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = await context_run(tmp_path, *HALLOWEEN)
    url = f"sqlite:///{tmp_path / 'logs' / 'runs.sqlite'}"
    capsys.readouterr()
    assert cli.main(["runs", "show", record.generation_id, "--store", url], env={}) == 0
    out = capsys.readouterr().out
    assert "Context     2026-10-25 (fixed); guidance in the first stage prompt" in out
    assert "holiday: applied (roll_below_probability; roll 0.216 vs p 0.379)" in out

    site = tmp_path / "site"
    build_site([record], site)
    page = (site / "runs" / f"{page_name(record.generation_id)}.html").read_text("utf-8")
    assert "<h2>Context</h2>" in page and "Date 2026-10-25" in page
    assert "Halloween is in 6 days" in page
    assert "roll_below_probability" in page and "0.216" in page and "0.379" in page
    assert "season_of_the_date" in page


async def test_a_run_without_context_has_no_context_rows_or_section(tmp_path: Path) -> None:
    record = await context_run(tmp_path)
    with open_store(f"sqlite:///{tmp_path / 'logs' / 'runs.sqlite'}") as store:
        assert store.table_rows("contexts") == store.table_rows("context_injectors") == []
    build_site([record], tmp_path / "site")
    page = (tmp_path / "site" / "runs" / f"{page_name(record.generation_id)}.html").read_text()
    assert "<h2>Context</h2>" not in page
