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
