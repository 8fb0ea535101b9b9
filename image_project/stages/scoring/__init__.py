"""Black-box scoring: idea cards, a median judge ensemble, a seeded selector, novelty.

See ``docs/scoring.md`` for the flow. The wing, by what changes together:

* :mod:`.flow`: one run's scoring flow on the engine's typed steps (:class:`ScoringRun`);
* :mod:`.prompts`: every prompt text (markers from :mod:`image_project.markers`);
* :mod:`.panel`: the judges of a round, their orders, verdicts and the score table;
* :mod:`.protocols`: each judging protocol as one value (how a judge is asked and read),
  found by name in its registry;
* :mod:`.rounds`: survivors, variants and near-duplicates of multi-round selection;
* :mod:`.results`: the typed round results and the record built from them as the run goes;
* the pure parts: :mod:`.cards`, :mod:`.hints`, :mod:`.judges`, :mod:`.rubrics`,
  :mod:`.aggregation`, :mod:`.selection`, :mod:`.novelty`, :mod:`.evolution`.
"""
