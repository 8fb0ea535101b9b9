"""Black-box scoring: idea cards, a median judge ensemble, a seeded selector, novelty.

See ``docs/scoring.md`` for the flow and :mod:`.flow` for the step tree.
"""

from image_project.stages.scoring.flow import (
    HINTS_KEY,
    OUTCOME_KEY,
    NoveltyState,
    ScoringOutcome,
    ScoringPlan,
    describe_ensemble,
    load_novelty,
    scoring_pipeline,
)

__all__ = [
    "HINTS_KEY",
    "OUTCOME_KEY",
    "NoveltyState",
    "ScoringOutcome",
    "ScoringPlan",
    "describe_ensemble",
    "load_novelty",
    "scoring_pipeline",
]
