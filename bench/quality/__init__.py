"""The selection-quality bench: does black-box scoring choose well, and does it keep
variety? Measured in a simulated world where the truth is known (``python bench/quality.py``;
docs/evidence.md).

* :mod:`.world`: the simulated world, what a generator and a judge call get;
* :mod:`.runs`: real runs in it, and the parts (choosing well, the judge-correlation sweep,
  variety, rounds);
* :mod:`.report`: the parts run and joined, the table and the figure;
* :mod:`.cli`: the command line (``bench/quality.py`` runs :func:`main`).

The bench's modules import one another as top-level modules (bench/ on ``sys.path``), so the
tests, ``bench/novelty.py`` and ``scripts/render_figures.py`` import this package as
``quality`` and use the names below.

The bench reports what happens; the product is never tuned to the simulation.
"""

from __future__ import annotations

# world first: it puts the checkout on sys.path for the image_project imports of the others.
from .world import (
    _GARBAGE,
    MOTIF_PADDING,
    NEUTRAL_MOTIFS,
    REPO,
    JudgeRole,
    TrueCard,
    World,
    WorldParams,
    judge_model,
    motif_words,
    neutral_motifs,
    world_params,
)

# isort: split
from .cli import main, parse_args
from .report import PARTS, build_report, format_table, merge_reports, merge_sweep, plot
from .runs import (
    CHECK_STRATEGIES,
    NORMALISED_AGGREGATIONS,
    PANELS,
    REFERENCE_PANEL,
    STRATEGIES,
    Chosen,
    HistoryStats,
    Panel,
    PanelResult,
    RoundsResult,
    RoundsRun,
    Strategy,
    _backends,
    _history,
    _mean,
    _strategy_row,
    aggregation_names,
    calls_of,
    choosing_well,
    chosen_of,
    control_ideas,
    headline,
    judge_corr_sweep,
    make_config,
    normalise_names,
    paired,
    panel_override,
    panel_runs,
    ratio_interval,
    rounds_config,
    rounds_of,
    rounds_part,
    run_once,
    sweep_panel,
    sweep_panels,
    variety,
)

__all__ = [
    "CHECK_STRATEGIES",
    "MOTIF_PADDING",
    "NEUTRAL_MOTIFS",
    "NORMALISED_AGGREGATIONS",
    "PANELS",
    "PARTS",
    "REFERENCE_PANEL",
    "REPO",
    "STRATEGIES",
    "_GARBAGE",
    "Chosen",
    "HistoryStats",
    "JudgeRole",
    "Panel",
    "PanelResult",
    "RoundsResult",
    "RoundsRun",
    "Strategy",
    "TrueCard",
    "World",
    "WorldParams",
    "_backends",
    "_history",
    "_mean",
    "_strategy_row",
    "aggregation_names",
    "build_report",
    "calls_of",
    "choosing_well",
    "chosen_of",
    "control_ideas",
    "format_table",
    "headline",
    "judge_corr_sweep",
    "judge_model",
    "main",
    "make_config",
    "merge_reports",
    "merge_sweep",
    "motif_words",
    "neutral_motifs",
    "normalise_names",
    "paired",
    "panel_override",
    "panel_runs",
    "parse_args",
    "plot",
    "ratio_interval",
    "rounds_config",
    "rounds_of",
    "rounds_part",
    "run_once",
    "sweep_panel",
    "sweep_panels",
    "variety",
    "world_params",
]
