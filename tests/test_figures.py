"""The figures in README.md and docs/ are the ones the benches' JSON files in bench/results/ hold.

Every performance and quality table of the README and the docs stands between
``<!-- figures:NAME -->`` markers and is written by ``scripts/render_figures.py`` from a
bench's JSON; these tests fail when a block differs from what the script renders (a figure
typed by hand, or a JSON regenerated without rendering), and check that every block names
the commit its figures were measured on.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import render_figures  # noqa: E402


def test_readme_and_docs_figures_match_their_json() -> None:
    stale = render_figures.stale_blocks(render_figures.documents())
    assert stale == [], f"run python scripts/render_figures.py: {stale}"


def test_every_figure_block_stands_in_the_readme_or_the_docs() -> None:
    """Each rendered table is in a document (the README or a page of docs/), so moving a
    table between them keeps it generated."""
    names: set[str] = set()
    for path in render_figures.documents():
        text = path.read_text(encoding="utf-8")
        names |= {m.group("name") for m in render_figures.MARKER.finditer(text)}
    assert set(render_figures.BLOCKS) <= names, set(render_figures.BLOCKS) - names


SIMULATIONS = {
    "quality",
    "quality-findings",
    "quality-sweep",
    "evidence-decision",
    "evidence-quality",
    "evidence-novelty",
}
"""Blocks of the simulation benches (bench/quality.py, decision.py, novelty.py): no timing,
and a provenance of their own (``commit`` and ``machine``) or none, which the block says."""


@pytest.mark.parametrize("name", sorted(set(render_figures.BLOCKS) - SIMULATIONS))
def test_every_performance_block_names_its_commit_date_and_load(name: str) -> None:
    body = render_figures.render(name)
    assert "Measured on commit `" in body, body[-300:]
    assert "UTC" in body and "load average" in body


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_every_simulation_block_names_its_commit_or_says_its_json_has_none(name: str) -> None:
    last = render_figures.render(name).strip().splitlines()[-1]
    assert re.search(r"commit `?[0-9a-f]{7,}", last) or "does not record the commit" in last, last


def _copy_pages_and_results(root: Path) -> None:
    """README.md, docs/ and bench/results/ of the checkout, copied under ``root``."""
    shutil.copy(REPO / "README.md", root / "README.md")
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copytree(REPO / "bench" / "results", root / "bench" / "results")


def test_a_figure_changed_in_the_json_makes_its_block_stale(tmp_path: Path) -> None:
    """Control: the check sees a JSON that no longer matches the page showing it."""
    _copy_pages_and_results(tmp_path)
    latency = tmp_path / "bench" / "results" / "latency.json"
    data = json.loads(latency.read_text(encoding="utf-8"))
    data["scenarios"][0]["cpu_ratio"] += 0.5
    latency.write_text(json.dumps(data), encoding="utf-8")
    stale = render_figures.stale_blocks(render_figures.documents(tmp_path), tmp_path)
    assert "docs/performance.md: latency" in stale
    assert "docs/performance.md: latency-summary" in stale
    performance = tmp_path / "docs" / "performance.md"
    text = performance.read_text(encoding="utf-8")
    performance.write_text(render_figures.render_text(text, tmp_path))
    assert render_figures.stale_blocks(render_figures.documents(tmp_path), tmp_path) == []


def test_the_two_processes_429s_in_the_batches_page_come_from_batch_json(tmp_path: Path) -> None:
    """The late 429s of two processes pacing alone on one key are rendered from
    bench/results/batch.json (``two_machines``), not typed: changing them there makes the block
    stale."""
    _copy_pages_and_results(tmp_path)
    batch = tmp_path / "bench" / "results" / "batch.json"
    data = json.loads(batch.read_text(encoding="utf-8"))
    data["simulator"]["batch"]["two_machines"]["429s_after_first_window"] += 7
    batch.write_text(json.dumps(data), encoding="utf-8")
    stale = render_figures.stale_blocks(render_figures.documents(tmp_path), tmp_path)
    assert "docs/batches.md: batch-two-machines" in stale
    late = data["simulator"]["batch"]["two_machines"]["429s_after_first_window"]
    assert f"{late} of them after the first window" in render_figures.render(
        "batch-two-machines", tmp_path
    )


def test_the_evidence_summary_comes_from_the_benches_json(tmp_path: Path) -> None:
    """docs/evidence.md's figures are rendered from decision.json, quality.json and
    novelty.json (the summary, the pipeline bench's findings and its sweep): a figure
    changed in each makes its blocks stale."""
    _copy_pages_and_results(tmp_path)

    def change(name: str, edit: Callable[[dict[str, Any]], object]) -> None:
        path = tmp_path / "bench" / "results" / f"{name}.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        edit(data)
        path.write_text(json.dumps(data), encoding="utf-8")

    change("decision", lambda d: d.update(max_rounds=7))
    change("quality", lambda d: d["headline"]["median3_minus_one_judge_regret"].update(runs=1))
    change("quality", lambda d: d["judge_corr_sweep"][0].update(one_judge_regret=9.87))
    change("novelty", lambda d: d["decision"].update(target_met=False))
    stale = render_figures.stale_blocks(render_figures.documents(tmp_path), tmp_path)
    assert {
        "docs/evidence.md: evidence-decision",
        "docs/evidence.md: evidence-quality",
        "docs/evidence.md: evidence-novelty",
        "docs/evidence.md: quality-findings",
        "docs/evidence.md: quality-sweep",
    } <= set(stale)
    assert "| one scale | 0 | 9.87 |" in render_figures.render("quality-sweep", tmp_path)
    assert "up to 7 paired rounds each" in render_figures.render("evidence-decision", tmp_path)
    assert "over 1 paired runs" in render_figures.render("evidence-quality", tmp_path)
    assert "**not met**" in render_figures.render("evidence-novelty", tmp_path)
