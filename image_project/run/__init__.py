"""The run driver: one generation, end to end (:func:`run_generation`; the contract is in
:mod:`.driver`'s docstring).

* :mod:`.state`: the run's typed state, its inputs, result and failure, and its record;
* :mod:`.phases`: the phases, each ``async def`` over the state;
* :mod:`.records`: the records phase's all-or-nothing writes and the run store write;
* :mod:`.log`: the per-run log file;
* :mod:`.driver`: :func:`run_generation`, which times the phases, attributes a failure or an
  interrupt and writes the transcript and the store row however the run ends.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice.
"""
