"""docs/batches.md's campaign figures are the ones bench/results/campaign.json holds (written
by ``python bench/campaign.py --json bench/results/campaign.json --doc docs/batches.md``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import campaign as bench  # noqa: E402


def test_the_campaign_table_in_the_docs_is_the_json_s() -> None:
    report = json.loads((REPO / "bench" / "results" / "campaign.json").read_text(encoding="utf-8"))
    doc = (REPO / "docs" / "batches.md").read_text(encoding="utf-8")
    block = doc.split(bench.BEGIN, 1)[1].split(bench.END, 1)[0]
    assert block.strip() == bench.table(report).strip()
    assert len(report["commit"]) == 40 and report["machine"]["cores"] >= 1
    assert len(report["repeats"]) == report["setting"]["repeats"] >= 3
