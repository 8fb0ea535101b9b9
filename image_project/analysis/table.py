"""The judge-panel figures as plain-text tables for the terminal (``image-project runs
stats``)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import IO

from image_project.analysis.panel import JudgeStats, PanelStats, PositionMean, panel_stats
from image_project.record.run import RunRecord
from image_project.record.scoring import JUDGE_STATUSES


def render_columns(
    header: Sequence[str], rows: Iterable[Sequence[str]], *, left: int = 1
) -> list[str]:
    """Columns padded to their widest cell; the first ``left`` columns (names) left-aligned,
    the rest right-aligned (they hold numbers)."""
    table = [list(header), *(list(r) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = []
    for row in table:
        cells = [
            cell.ljust(widths[i]) if i < left else cell.rjust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _fmt(value: float | None, digits: int = 1) -> str:
    """A number for a table cell; ``-`` when it is undefined."""
    return "-" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}"


def _judge_row(j: JudgeStats) -> list[str]:
    s = j.scores
    return [
        j.judge,
        ",".join(j.models),
        *(str(j.counts.get(status)) for status in JUDGE_STATUSES),
        str(s.n if s else 0),
        _fmt(s.mean if s else None),
        _fmt(s.median if s else None),
        _fmt(s.stdev if s else None),
        str(s.minimum) if s else "-",
        str(s.maximum) if s else "-",
        _signed(j.position_bias),
        j.monotone.cell(),
    ]


def _position_cell(p: PositionMean) -> str:
    offset = "" if p.offset is None else f" ({p.offset:+.1f})"
    return f"{p.mean:.1f}{offset}"


def _position_lines(stats: PanelStats) -> list[str]:
    depth = max((len(j.positions) for j in stats.judges), default=0)
    if depth == 0:
        return []
    rows = []
    for j in stats.judges:
        cells = {p.position: _position_cell(p) for p in j.positions}
        rows.append([j.judge, *(cells.get(p, "-") for p in range(1, depth + 1))])
    header = ["judge", *(f"#{p}" for p in range(1, depth + 1))]
    return [
        "",
        "Mean ok score by presented position (#1 = shown first); in brackets, the mean",
        "difference from the other judges' scores for the same cards",
        *render_columns(header, rows),
    ]


def _pair_lines(stats: PanelStats) -> list[str]:
    if not stats.pairs:
        return []
    rows = [
        [f"{p.judge_a} ~ {p.judge_b}", _fmt(p.tau, 3), str(p.runs), str(p.undefined)]
        for p in stats.pairs
    ]
    return [
        "",
        "Rank agreement: Kendall's tau-b per run on the cards both scored, mean over runs",
        *render_columns(["pair", "tau", "runs", "undefined"], rows),
    ]


def _independence_lines(stats: PanelStats) -> list[str]:
    """The effective number of judges of every same-model group (docs/panel.md, "Know
    your panel"), or why it cannot be measured."""
    sentences = stats.independence.sentences()
    if not sentences:
        return []
    return ["", "Independence: effective number of judges of each same-model group", *sentences]


def format_panel_table(stats: PanelStats) -> str:
    """The panel figures as aligned text: run counts, one row per judge (status counts, ok
    score distribution, first-position bias), mean score by position, pairwise tau and the
    panel's alpha."""
    lines = [
        f"Judge panel over {stats.runs} runs "
        f"({stats.scoring_runs} with scoring, {stats.failed_runs} failed"
        + (f", {stats.interrupted_runs} interrupted)" if stats.interrupted_runs else ")")
    ]
    if not stats.judges:
        lines.append("No judge results: no run in this set had scoring on.")
        return "\n".join(lines) + "\n"
    header = [
        "judge",
        "model",
        *JUDGE_STATUSES,
        "scores",
        "mean",
        "median",
        "sd",
        "min",
        "max",
        "bias#1",
        "monotone",
    ]
    lines += ["", *render_columns(header, [_judge_row(j) for j in stats.judges], left=2)]
    if any(j.monotone.answers for j in stats.judges):
        lines += [
            "",
            "monotone: ok answers (3+ cards) whose scores rise or fall strictly with the order",
            "shown, of such answers (by chance about 1 in 3 with 3 cards, fewer with more)",
        ]
    lines += _position_lines(stats)
    lines += _pair_lines(stats)
    a = stats.agreement
    lines += [
        "",
        f"Panel agreement: Krippendorff's alpha (interval) = {_fmt(a.alpha, 3)} "
        f"over {a.units} cards scored by 2+ judges ({a.values} scores)",
    ]
    lines += _independence_lines(stats)
    return "\n".join(lines) + "\n"


def stats_command(records: Sequence[RunRecord], out: IO[str] | None = None) -> int:
    """``image-project runs stats``: print the panel table of ``records`` on ``out`` (standard
    output as it is at the call by default); exit code 0 (1 when there is no run at all, so a
    script notices an empty store)."""
    out = sys.stdout if out is None else out
    if not records:
        out.write("No runs to summarise.\n")
        return 1
    out.write(format_panel_table(panel_stats(records)))
    return 0
