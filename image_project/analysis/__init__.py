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
