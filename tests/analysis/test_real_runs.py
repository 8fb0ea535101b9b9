"""The panel table of real offline runs (two scoring runs and a failed one with a 3-judge
ensemble, one run without scoring): every judge's counts, the three pairs and alpha."""

from __future__ import annotations

import io
from pathlib import Path

from image_project.analysis.panel import panel_stats
from image_project.analysis.table import stats_command
from tests.review.offline_runs import make_offline_runs


def test_stats_of_real_offline_runs(tmp_path: Path) -> None:
    records = make_offline_runs(tmp_path)
    stats = panel_stats(records)
    assert (stats.runs, stats.scoring_runs, stats.failed_runs) == (4, 3, 1)
    assert [j.judge for j in stats.judges] == ["novel", "strict", "warm"]
    for judge in stats.judges:
        # The failed run failed at the image call, after its judges answered.
        assert (judge.counts.ok, judge.counts.total) == (3, 3)
        assert judge.scores is not None and judge.scores.n == 3 * 6
        assert [p.position for p in judge.positions] == [1, 2, 3, 4, 5, 6]
        assert all(p.n == 3 and p.n_offset == 3 for p in judge.positions)
    assert [(p.judge_a, p.judge_b, p.runs) for p in stats.pairs] == [
        ("novel", "strict", 3),
        ("novel", "warm", 3),
        ("strict", "warm", 3),
    ]
    assert stats.agreement.units == 18 and stats.agreement.values == 54
    assert stats.agreement.alpha is not None
    out = io.StringIO()
    assert stats_command(records, out) == 0
    text = out.getvalue()
    assert text.startswith("Judge panel over 4 runs (3 with scoring, 1 failed)")
    assert "over 18 cards scored by 2+ judges (54 scores)" in text
