"""Statistics over run records: how the judge panel behaves across runs.

* :mod:`.panel` — :func:`panel_stats`: per judge the status counts, the ok score
  distribution and the mean score by presented position; per pair of judges Kendall's tau;
  the panel's Krippendorff alpha;
* :mod:`.alpha` — Krippendorff's alpha from its definition (interval and nominal);
* :mod:`.tau` — Kendall's tau-b from its definition (:func:`kendall_tau_b`);
* :mod:`.independence` — the effective number of independent judges of a same-model group,
  measured against the judges on other models (:func:`panel_independence`);
* :mod:`.table` — the figures as a terminal table and the ``runs stats`` command.

Pure functions of :class:`~image_project.record.RunRecord` sequences: no files, no store.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""

from image_project.analysis.alpha import AlphaMetric, krippendorff_alpha
from image_project.analysis.independence import (
    GroupIndependence,
    PanelIndependence,
    effective_judges,
    estimate_independence,
    panel_independence,
)
from image_project.analysis.panel import (
    JudgeStats,
    PairAgreement,
    PanelAgreement,
    PanelStats,
    PositionMean,
    ScoreSummary,
    StatusCounts,
    panel_stats,
    scoring_records,
)
from image_project.analysis.table import format_panel_table, stats_command
from image_project.analysis.tau import kendall_tau_b

__all__ = [
    "AlphaMetric",
    "GroupIndependence",
    "JudgeStats",
    "PairAgreement",
    "PanelAgreement",
    "PanelIndependence",
    "PanelStats",
    "PositionMean",
    "ScoreSummary",
    "StatusCounts",
    "effective_judges",
    "estimate_independence",
    "format_panel_table",
    "kendall_tau_b",
    "krippendorff_alpha",
    "panel_independence",
    "panel_stats",
    "scoring_records",
    "stats_command",
]
