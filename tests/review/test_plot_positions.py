"""The position-bias plot marks a position mean over fewer than FEW_SCORES scores with a
hollow marker (and says so above the plots); a mean over enough scores is filled, in its
judge's colour."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from image_project.analysis.panel import panel_stats
from image_project.record.run import RunRecord
from image_project.review.plots import FEW_SCORES, PLOTS
from tests.support.records import judge, run


def drawn(records: list[RunRecord]) -> Figure:
    fig = Figure()
    plot = next(p for p in PLOTS if p.filename == "position_bias.png")
    plot.draw(fig, panel_stats(records))
    return fig


def markers(fig: Figure, gid: str) -> list[Line2D]:
    return [line for line in fig.axes[0].get_lines() if line.get_gid() == gid]


def xs(line: Line2D) -> list[float]:
    return [float(x) for x in np.asarray(line.get_xdata())]


def runs(n: int, cards: str, first: int = 1) -> list[RunRecord]:
    scores = {c: 50 + 10 * i for i, c in enumerate(cards)}
    return [
        run(k, [judge("strict", scores), judge("warm", scores)], cards=list(cards))
        for k in range(first, first + n)
    ]


def test_positions_with_few_scores_are_hollow() -> None:
    # Positions 1-3 are seen in every run, position 4 in two runs only.
    fig = drawn(runs(FEW_SCORES, "ABC") + runs(2, "ABCD", first=100))
    enough, few = markers(fig, "enough"), markers(fig, "few")
    assert len(enough) == len(few) == 2  # one of each per judge
    for line in enough:
        assert xs(line) == [1, 2, 3]
        assert to_rgba(line.get_markerfacecolor()) == to_rgba(line.get_color())
    for line in few:
        assert xs(line) == [4]
        assert to_rgba(line.get_markerfacecolor()) == to_rgba("white")
    assert fig.get_suptitle() == (
        f"hollow: a mean over fewer than {FEW_SCORES} scores (read it as noise)"
    )


def test_positions_with_enough_scores_are_filled_and_the_note_left_out() -> None:
    fig = drawn(runs(FEW_SCORES, "ABC"))
    assert markers(fig, "few") == [] and len(markers(fig, "enough")) == 2
    assert fig.get_suptitle() == ""
