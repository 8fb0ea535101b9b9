"""The typed record of a run: one pydantic model for everything a run produces.

* :mod:`.events` — every step as a typed event (``chat``, ``action``, ``image``);
* :mod:`.scoring` — the black-box scoring record (cards, judges, score table, selection,
  novelty);
* :mod:`.context` — the context injectors' record (the date, the guidance, each injector's
  decision);
* :mod:`.gates` — the quality gates' rejection reasons and their counts (:func:`gate_counts`);
* :mod:`.upscale` — the 4K image (:class:`UpscaleRecord`);
* :mod:`.run` — :class:`RunRecord`, the whole run.

The transcript file is ``RunRecord``'s JSON (``RunRecord.model_validate_json`` reads any
transcript this version writes back); the CLI summary reads it; the run store writes it.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""
