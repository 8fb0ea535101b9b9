"""The decision bench (bench/decision.py) and the novelty sweep (bench/novelty.py): the
decision bench's fast path chooses the card the product's own aggregate() and select() choose
in every world and card count, its rule picks as docs/evidence.md states, its simulated bad
judges behave as named, and docs/evidence.md carries the tables generated from the benches'
JSON (bench/results/decision.json, bench/results/novelty.json), not typed by hand."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import pytest

from image_project.config.models import ScoringConfig
from tests.support.quality_bench import REPO

sys.path.insert(0, str(REPO / "bench"))
if True:  # bench/ is on sys.path now
    import decision
    import novelty

EVIDENCE = (REPO / "docs" / "evidence.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("world", decision.WORLDS, ids=lambda w: w.name)
def test_the_fast_path_chooses_what_the_product_chooses(world: decision.World) -> None:
    for n in decision.SIZES:
        rng = np.random.default_rng([7, n])
        for i in range(8):
            decision.round_regrets(world, n, rng, seed=i, verify=True)  # raises on a mismatch


def test_the_simulated_bad_judges_are_what_they_say() -> None:
    rng = np.random.default_rng(1)
    _, panel, shown = decision.judge_scores(decision.World("c", bad="constant"), 6, rng)
    assert set(panel[2].values()) <= {79, 80, 81}
    _, panel, shown = decision.judge_scores(decision.World("p", bad="position"), 6, rng)
    assert [round(s / 8) for s in shown[2]] == [11, 10, 9, 8, 7, 6]  # 90 down to 50, +-1


def _cell(world: str, regrets: dict[str, float], worse: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "world": world,
        "n": 6,
        "regret": regrets,
        "vs_one_judge": {
            name: (1.0, 0.5, 1.5) if name in worse else (-1.0, -1.5, -0.5) for name in regrets
        },
    }


def test_the_rule_excludes_a_candidate_worse_than_one_judge_then_minimises_the_worst_excess() -> (
    None
):
    names = [c.name for c in decision.CANDIDATES]
    good = {name: 2.0 for name in names}
    cells = [
        _cell("a", {**good, "mean": 1.0}, worse=("mean",)),  # best here, but worse than one
        _cell("b", {**good, "median": 2.5, "median, robust": 2.2}),
    ]
    found = decision.decide(cells)
    assert "mean" not in found["admissible"]
    assert found["worse_than_one_judge_in"]["mean"] == ["a, N 6"]
    # Every admissible candidate but the two medians is 1.0 worse than 'mean' in cell a;
    # worst excesses: median 1.0, median robust 1.0, the rest 1.0: tied, then mean regret.
    assert found["choice"] in found["admissible"]
    assert found["choice"] not in ("median", "median, robust")


def test_the_default_is_what_the_decision_bench_chose() -> None:
    report = json.loads((REPO / "bench" / "results" / "decision.json").read_text(encoding="utf-8"))
    d = ScoringConfig()
    chosen = next(c for c in decision.CANDIDATES if c.name == report["decision"]["choice"])
    assert (d.aggregation, d.normalise) == (chosen.method, chosen.normalise)


def test_docs_evidence_carries_the_generated_tables() -> None:
    report = json.loads((REPO / "bench" / "results" / "decision.json").read_text(encoding="utf-8"))
    assert decision.markdown(report) in EVIDENCE
    sweep = json.loads((REPO / "bench" / "results" / "novelty.json").read_text(encoding="utf-8"))
    assert novelty.markdown(sweep) in EVIDENCE
    d = ScoringConfig().novelty
    choice = sweep["decision"]
    assert (d.penalty_per_share, d.max_penalty, d.min_share) == (
        choice["scale"],
        choice["cap"],
        choice["min_share"],
    )
