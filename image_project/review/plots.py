"""The judge-panel plots as PNG files (matplotlib's object API on the Agg canvas: no
display, no pyplot global state, no network, the bundled DejaVu font). matplotlib is imported
when plots are drawn, not when the CLI starts. Text on a plot is data (a judge id from an
imported record): it is drawn as given, never read as mathtext or TeX (``text.parse_math``
and ``text.usetex`` off while drawing). Each file replaces its target atomically."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from image_project.analysis.panel import PanelStats
from image_project.artifacts.atomic import atomic_write_bytes
from image_project.record.scoring import JUDGE_STATUSES

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Plot:
    """One plot of the panel page: its file name, caption and drawing function."""

    filename: str
    caption: str
    draw: Callable[[Figure, PanelStats], None]


_STATUS_COLOURS = {
    "ok": "#2a9d4b",
    "parse_error": "#e9a13b",
    "degenerate": "#8e6bbf",
    "refused": "#c0392b",
    "error": "#555",
}


def _integer_ticks(axis: Axis) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _status_counts(fig: Figure, stats: PanelStats) -> None:
    ax = fig.subplots()
    names = [j.judge for j in stats.judges]
    left = [0] * len(names)
    for status in JUDGE_STATUSES:
        counts = [j.counts.get(status) for j in stats.judges]
        ax.barh(names, counts, left=left, label=status, color=_STATUS_COLOURS[status])
        left = [a + b for a, b in zip(left, counts, strict=True)]
    ax.invert_yaxis()
    _integer_ticks(ax.xaxis)
    ax.set_xlabel("judge results (one per run)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=4, fontsize="small")


def _distributions(fig: Figure, stats: PanelStats) -> None:
    ax = fig.subplots()
    judged = [j for j in stats.judges if j.scores is not None]
    data = [list(j.scores.scores) for j in judged if j.scores is not None]
    if data:
        ax.boxplot(data, orientation="horizontal", tick_labels=[j.judge for j in judged])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("score (ok results only)")


FEW_SCORES = 10
"""A position mean over fewer scores than this is drawn hollow on the position-bias plot:
with a handful of scores a gap of several points is what chance alone gives."""


def _marked(ax: Axes, xs: list[int], ys: list[float], counts: list[int], label: str) -> None:
    """One judge's line, a filled marker where its mean is over :data:`FEW_SCORES` scores
    or more, a hollow one (white inside, the line's colour around) where it is over fewer."""
    (line,) = ax.plot(xs, ys, "-", label=label)
    colour = line.get_color()
    for few in (False, True):
        at = [i for i, n in enumerate(counts) if (n < FEW_SCORES) == few]
        if at:
            ax.plot(
                [xs[i] for i in at],
                [ys[i] for i in at],
                "o",
                color=colour,
                markerfacecolor="white" if few else colour,
                markeredgewidth=1.5,
                gid="few" if few else "enough",
            )


def _positions(fig: Figure, stats: PanelStats) -> None:
    means, offsets = fig.subplots(1, 2)
    few = False
    for j in stats.judges:
        if j.positions:
            _marked(
                means,
                [p.position for p in j.positions],
                [p.mean for p in j.positions],
                [p.n for p in j.positions],
                j.judge,
            )
            known = [p for p in j.positions if p.offset is not None]
            _marked(
                offsets,
                [p.position for p in known],
                [p.offset for p in known if p.offset is not None],
                [p.n_offset for p in known],
                j.judge,
            )
            few = few or any(p.n < FEW_SCORES for p in j.positions)
            few = few or any(p.n_offset < FEW_SCORES for p in known)
    offsets.axhline(0, color="#888", linewidth=0.8)
    for ax in (means, offsets):
        _integer_ticks(ax.xaxis)
        ax.set_xlabel("presented position (1 = first)")
    means.set_ylabel("mean score")
    offsets.set_ylabel("score - other judges' mean")
    offsets.legend(fontsize="small")
    if few:
        fig.suptitle(
            f"hollow: a mean over fewer than {FEW_SCORES} scores (read it as noise)",
            fontsize="small",
        )


def _agreement(fig: Figure, stats: PanelStats) -> None:
    ax = fig.subplots()
    names = [j.judge for j in stats.judges]
    index = {name: i for i, name in enumerate(names)}
    grid = [[float("nan")] * len(names) for _ in names]
    for i in range(len(names)):
        grid[i][i] = 1.0
    for pair in stats.pairs:
        if pair.tau is not None:
            a, b = index[pair.judge_a], index[pair.judge_b]
            grid[a][b] = grid[b][a] = pair.tau
    image = ax.imshow(grid, vmin=-1, vmax=1, cmap="RdBu")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    for i, row in enumerate(grid):
        for k, value in enumerate(row):
            if value == value:  # not NaN
                # RdBu is dark at both ends: white text there, dark text in the pale middle.
                colour = "white" if abs(value) > 0.5 else "#111111"
                ax.text(
                    k, i, f"{value:.2f}", ha="center", va="center", fontsize="small", color=colour
                )
    fig.colorbar(image, ax=ax, label="Kendall's tau-b (mean over runs)")


PLOTS: tuple[Plot, ...] = (
    Plot("status_counts.png", "Judge outcomes per judge", _status_counts),
    Plot("score_distributions.png", "Score distribution per judge (ok results)", _distributions),
    Plot(
        "position_bias.png",
        "Mean score by presented position, and its difference from the other judges",
        _positions,
    ),
    Plot("rank_agreement.png", "Pairwise rank agreement (Kendall's tau-b)", _agreement),
)


def write_plots(
    stats: PanelStats, directory: Path, progress: Callable[[str], None] | None = None
) -> list[tuple[Plot, Path]]:
    """Draw every plot of :data:`PLOTS` into ``directory`` (created); nothing when no judge
    answered. Returns each plot with the file written."""
    if not stats.judges:
        return []
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for n, plot in enumerate(PLOTS, start=1):
        with rc_context({"text.parse_math": False, "text.usetex": False}):
            fig = Figure(
                figsize=(6.4, max(3.0, 1.6 + 0.45 * len(stats.judges))), layout="constrained"
            )
            FigureCanvasAgg(fig)
            plot.draw(fig, stats)
            png = io.BytesIO()
            fig.savefig(png, format="png", dpi=100, metadata={"Software": None})
        path = atomic_write_bytes(directory / plot.filename, png.getvalue())
        written.append((plot, path))
        if progress is not None:
            progress(f"plot {n}/{len(PLOTS)}: {plot.filename}")
    return written
