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

from image_project.record.context import (
    ContextOff,
    ContextRecord,
    ContextSection,
    InjectorRecord,
)
from image_project.record.events import (
    TIMING_FIELDS,
    ActionEvent,
    ChatEvent,
    ChatParams,
    ImageEvent,
    Reask,
    StepError,
    StepEvent,
)
from image_project.record.gates import GATES, GateCount, gate_counts, gate_error
from image_project.record.run import (
    SCHEMA_VERSION,
    BackendInfo,
    ConceptFilter,
    PreflightRecord,
    RunError,
    RunRecord,
    RunUsage,
    Timing,
    TitleRecord,
    TitleSource,
    run_status,
    scoring_absent,
    stopped_reason,
)
from image_project.record.schema import transcript_json_schema
from image_project.record.scoring import (
    JUDGE_STATUSES,
    CandidateRecord,
    CardOptions,
    EvolutionRecord,
    IdeaCard,
    JudgeResult,
    JudgeStatus,
    Motif,
    NearDuplicate,
    NoveltyRecord,
    RoundCandidate,
    RoundRecord,
    ScoreRow,
    ScoringOff,
    ScoringRecord,
    ScoringSection,
    SelectionDetail,
    SelectionMode,
    SelectorRecord,
    Survivor,
    SurvivorCategory,
    pick_rule,
)
from image_project.record.upscale import UpscaleMethodName, UpscaleRecord

__all__ = [
    "GATES",
    "JUDGE_STATUSES",
    "SCHEMA_VERSION",
    "TIMING_FIELDS",
    "ActionEvent",
    "BackendInfo",
    "CandidateRecord",
    "CardOptions",
    "ChatEvent",
    "ChatParams",
    "ConceptFilter",
    "ContextOff",
    "ContextRecord",
    "ContextSection",
    "EvolutionRecord",
    "GateCount",
    "IdeaCard",
    "ImageEvent",
    "InjectorRecord",
    "JudgeResult",
    "JudgeStatus",
    "Motif",
    "NearDuplicate",
    "NoveltyRecord",
    "PreflightRecord",
    "Reask",
    "RoundCandidate",
    "RoundRecord",
    "RunError",
    "RunRecord",
    "RunUsage",
    "ScoreRow",
    "ScoringOff",
    "ScoringRecord",
    "ScoringSection",
    "SelectionDetail",
    "SelectionMode",
    "SelectorRecord",
    "StepError",
    "StepEvent",
    "Survivor",
    "SurvivorCategory",
    "Timing",
    "TitleRecord",
    "TitleSource",
    "UpscaleMethodName",
    "UpscaleRecord",
    "gate_counts",
    "gate_error",
    "pick_rule",
    "run_status",
    "scoring_absent",
    "stopped_reason",
    "transcript_json_schema",
]
