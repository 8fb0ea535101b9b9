"""The review site: every run's image, selection and score table, and the judge panel's
figures across runs, as static HTML (Jinja2 templates shipped in this package) with PNG
plots (matplotlib).

* :mod:`.site` — :func:`build_site`, :func:`review_command`;
* :mod:`.views` — what each page shows, computed from the records;
* :mod:`.plots` — the panel plots;
* :mod:`.source` — run records from transcript files (when there is no store).

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""

from image_project.review.plots import PLOTS, Plot, write_plots
from image_project.review.site import build_site, review_command
from image_project.review.source import newest_first, records_from_transcripts
from image_project.review.views import (
    HeatCell,
    HeatRow,
    JudgeLine,
    RunView,
    heat_style,
    page_name,
    run_view,
)

__all__ = [
    "PLOTS",
    "HeatCell",
    "HeatRow",
    "JudgeLine",
    "Plot",
    "RunView",
    "build_site",
    "heat_style",
    "newest_first",
    "page_name",
    "records_from_transcripts",
    "review_command",
    "run_view",
    "write_plots",
]
