"""The black-box scoring record: the idea cards, each judge's outcome, the score table, the
selection and the novelty statistics of one run (the transcript's ``blackbox_scoring``).

:class:`IdeaCard` is also the answer model of an idea-card generator (its JSON schema is what
the server is asked for), so the card a run recorded and the card a model must write have
one definition. Pure data: everything here is built by ``image_project.stages.scoring``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self, TypeAlias

from pydantic import ConfigDict, Field, JsonValue, StringConstraints, model_validator

from image_project.record.base import RecordModel

__all__ = [
    "JUDGE_STATUSES",
    "CandidateRecord",
    "CardOptions",
    "IdeaCard",
    "JudgeResult",
    "JudgeStatus",
    "Motif",
    "NoveltyRecord",
    "ScoreRow",
    "ScoringOff",
    "ScoringRecord",
    "ScoringSection",
    "SelectionDetail",
    "SelectionMode",
]

JudgeStatus = Literal["ok", "parse_error", "refused", "error"]
JUDGE_STATUSES: tuple[JudgeStatus, ...] = ("ok", "parse_error", "refused", "error")
SelectionMode = Literal["exploit", "explore"]

_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=600)]
_Item = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class _Answer(RecordModel):
    """A model answer: strict types (``"3"`` is not an int), no unknown keys."""

    model_config = ConfigDict(strict=True)


class CardOptions(_Answer):
    composition: list[_Item] = Field(min_length=2, max_length=4)
    palette: list[_Item] = Field(min_length=2, max_length=4)
    medium: list[_Item] = Field(min_length=1, max_length=3)
    mood: list[_Item] = Field(min_length=1, max_length=3)


class IdeaCard(_Answer):
    """One idea card as a generator must write it. Lengths of strings are checked in code
    (strict structured outputs cannot express them); list sizes are in the schema too."""

    model_config = ConfigDict(title="idea_card")

    hook: _Text
    narrative: _Text
    options: CardOptions
    avoid: list[_Item] = Field(default_factory=list, min_length=0, max_length=4)


class CandidateRecord(RecordModel):
    """A card to generate (id, API seed, diversity direction) and, once generated, the card."""

    id: str
    seed: int
    direction: str
    card: IdeaCard | None = None


class JudgeResult(RecordModel):
    """One judge's outcome and what it saw. ``rubric`` names the rubric it scored by,
    ``profile`` the view of the profile it was shown (``raw``, ``dislikes_only``, ``hints``),
    ``weight`` its weight in a weighted aggregation. ``attempts`` = the judge's answers that
    were checked (at least 1, also for a refusal or a transport error); ``order`` = the card
    ids in the order this judge was shown them; ``scores`` only when ``status`` is ``ok``."""

    id: str
    model: str
    temperature: float
    rubric: str = "default"
    profile: str = "raw"
    weight: float = 1.0
    status: JudgeStatus
    attempts: int
    order: tuple[str, ...]
    path: str
    scores: dict[str, int] | None = None
    error: str | None = None
    output_preview: str | None = None


class ScoreRow(RecordModel):
    """One card's row of the score table: each ok judge's score, their median, the
    ``aggregate`` by the configured aggregation (the median itself by default; numbers are
    ints when whole), the spread (max - min), how many judges scored it, the novelty penalty
    and ``effective_score = max(0, aggregate - penalty)``."""

    id: str
    judge_scores: dict[str, int]
    median: int | float
    aggregate: int | float
    spread: int
    n_ok: int
    novelty_penalty: float = 0.0
    effective_score: float

    @model_validator(mode="before")
    @classmethod
    def _aggregate_was_the_median(cls, data: Any) -> Any:
        """A row written before aggregations existed has no ``aggregate``: it was the median."""
        if isinstance(data, dict) and "aggregate" not in data and "median" in data:
            return {**data, "aggregate": data["median"]}
        return data

    @model_validator(mode="after")
    def _effective(self) -> Self:
        expected = max(0.0, round(self.aggregate - self.novelty_penalty, 3))
        if self.effective_score != expected:
            raise ValueError(
                f"effective_score {self.effective_score} of card {self.id!r} must be "
                f"max(0, aggregate - novelty_penalty) = {expected}"
            )
        return self


class SelectionDetail(RecordModel):
    """The derived values behind the choice: the ranking, the exploration pool and, when
    exploring, the roll that picked from it."""

    ranking: tuple[str, ...]
    explore_pool: tuple[str, ...]
    explore_roll: float | None


class Motif(RecordModel):
    """A word repeated across recent final prompts: in how many, and what share of them."""

    word: str
    prompts: int
    share: float


class NoveltyRecord(RecordModel):
    """What novelty this run used: ``used`` only when history was read; ``warning`` says why
    it was not when it should have been."""

    enabled: bool
    used: bool
    window: int
    rows: int = 0
    motifs: tuple[Motif, ...] = ()
    warning: str | None = None


class ScoringRecord(RecordModel):
    """Black-box scoring of one run, as far as the run got (a run that failed in the judges
    has candidates but no score table)."""

    enabled: Literal[True] = True
    config_snapshot: dict[str, JsonValue]
    aggregation: str = "median"
    candidates: tuple[CandidateRecord, ...]
    judges: tuple[JudgeResult, ...] = ()
    score_table: tuple[ScoreRow, ...] = ()
    selected_id: str | None = None
    selected_score: int | float | None = None
    exploration_rate: float
    exploration_roll: float | None = None
    selection_mode: SelectionMode | None = None
    selection: SelectionDetail | None = None
    novelty: NoveltyRecord

    @property
    def selected_card(self) -> IdeaCard | None:
        """The card that was selected, if the selection was made."""
        return next((c.card for c in self.candidates if c.id == self.selected_id and c.card), None)


class ScoringOff(RecordModel):
    """The scoring record of a run with scoring disabled."""

    enabled: Literal[False] = False


ScoringSection: TypeAlias = Annotated[ScoringRecord | ScoringOff, Field(discriminator="enabled")]
"""The transcript's ``blackbox_scoring``: the record, or ``{"enabled": false}``."""
