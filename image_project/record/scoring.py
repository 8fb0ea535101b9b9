"""The black-box scoring record: the idea cards, each judge's outcome, the score table, the
selection and the novelty statistics of one run (the transcript's ``blackbox_scoring``), and,
with multi-round selection, every round (``evolution``).

:class:`IdeaCard` is also the answer model of an idea-card generator (its JSON schema is what
the server is asked for), so the card a run recorded and the card a model must write have
one definition. Pure data: everything here is built by ``image_project.stages.scoring``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self, TypeAlias

from pydantic import ConfigDict, Field, JsonValue, StringConstraints, model_validator

from image_project.record.base import RecordModel

JudgeStatus = Literal["ok", "parse_error", "degenerate", "refused", "error"]
JUDGE_STATUSES: tuple[JudgeStatus, ...] = ("ok", "parse_error", "degenerate", "refused", "error")
SelectionMode = Literal["exploit", "explore"]
DEFAULT_PROTOCOL = "list"
"""The judging protocol a record leaves unnamed (a judge's ``protocol``, the config snapshot's
``judge_protocol``): the configuration's default, so a run whose judges all use it records
no protocol."""
SurvivorCategory = Literal["performance", "diversity", "potential"]

TEXT_MAX_CHARS = 600
"""The longest hook or narrative of a card."""
ITEM_MAX_CHARS = 200
"""The longest option or ``avoid`` item of a card."""
_Text = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=TEXT_MAX_CHARS)
]
_Item = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=ITEM_MAX_CHARS)
]


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
    """A card to generate (id, API seed, diversity direction) and, once generated, the card.
    ``invalid``: the card's answer was still invalid after its re-asks, so it was dropped
    (never judged) while enough cards remained (``prompt.scoring.min_ok_cards``); the error.
    Written only when set."""

    id: str
    seed: int
    direction: str
    card: IdeaCard | None = None
    invalid: str | None = Field(default=None, exclude_if=lambda v: v is None)


def named_protocol(protocol: str) -> str | None:
    """``protocol`` as a record and the run's lines name it: None for
    :data:`DEFAULT_PROTOCOL`."""
    return None if protocol == DEFAULT_PROTOCOL else protocol


class JudgeResult(RecordModel):
    """One judge's outcome and what it saw. ``rubric`` names the rubric it scored by,
    ``profile`` the view of the profile it was shown (``raw``, ``dislikes_only``, ``hints``),
    ``weight`` its weight in a weighted aggregation. ``attempts`` = the judge's answers that
    were checked (at least 1, also for a refusal or a transport error); ``order`` = the card
    ids in the order this judge was shown them; ``scores`` only when ``status`` is ``ok``.
    ``protocol`` says how it was asked (absent for ``list``); ``rationales`` holds a
    ``reasoned`` judge's rationale per card, ``comparisons`` a ``pairwise`` judge's
    outcomes as ``(shown first, shown second, winner)``, ``warning`` a ``logprobs`` judge's
    fallback to its sampled scores (each absent otherwise). Like every judge text, a
    rationale is recorded here and sent to no later request."""

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
    protocol: str = Field(default=DEFAULT_PROTOCOL, exclude_if=lambda v: named_protocol(v) is None)
    rationales: dict[str, str] | None = Field(default=None, exclude_if=lambda v: v is None)
    comparisons: tuple[tuple[str, str, str], ...] | None = Field(
        default=None, exclude_if=lambda v: v is None
    )
    warning: str | None = Field(default=None, exclude_if=lambda v: v is None)


class ScoreRow(RecordModel):
    """One card's row of the score table: each ok judge's score, their median, the
    ``aggregate`` by the configured aggregation (the median itself by default; numbers are
    ints when whole), the spread (max - min), how many judges scored it, the novelty penalty
    and ``effective_score = max(0, aggregate - penalty)``. With a normalisation
    (``prompt.scoring.normalise``), ``normalised`` holds each judge's score on the panel's
    common scale, which the aggregate is taken of (absent without one)."""

    id: str
    judge_scores: dict[str, int]
    median: int | float
    aggregate: int | float
    spread: int
    n_ok: int
    normalised: dict[str, int | float] | None = Field(default=None, exclude_if=lambda v: v is None)
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
    """A motif repeated across recent final prompts: in how many, and what share of them.
    ``word`` is one word, or a phrase (words that always come together, space-separated)."""

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


class NearDuplicate(RecordModel):
    """Why a variant was dropped before judging: its token-set Jaccard distance to candidate
    ``of`` (already in the round) was below ``threshold``."""

    of: str
    distance: float
    threshold: float


class RoundCandidate(RecordModel):
    """One candidate of a round. ``kind``: ``card`` (round 0, written from a diversity
    ``directive``), ``variant`` (bred from survivor ``parent`` by a mutation ``directive``) or
    ``parent`` (a survivor of the previous round judged again, ``keep_parents``; its card,
    seed and directive are those it was written with). ``seed`` is the API seed of the call
    that wrote the card; ``dropped`` is set for a variant dropped as a near-duplicate (never
    judged); ``invalid`` for a variant whose answer was still invalid after its re-asks (no
    card, never judged): the error, whose reason is the step's ``error.reason``. Written only
    when set."""

    id: str
    kind: Literal["card", "variant", "parent"]
    parent: str | None
    directive: str
    seed: int
    card: IdeaCard | None = None
    dropped: NearDuplicate | None = None
    invalid: str | None = Field(default=None, exclude_if=lambda v: v is None)


class Survivor(RecordModel):
    """A candidate carried into the next round, the category it fills and why (a sentence
    built from the numbers by code, or the selector model's own words), and who proposed it."""

    id: str
    category: SurvivorCategory
    reason: str
    proposed_by: Literal["code", "llm"]


class SelectorRecord(RecordModel):
    """Who chose a round's survivors. ``kind: code``: the seeded code choice (``attempts``
    0). ``kind: llm``: ``status: ok`` when the model's proposal was valid (``summary`` its
    summary); ``status: fallback`` when it was still invalid after the re-asks (or the call
    failed) and the code choice was used instead, ``warning`` saying why. ``attempts`` = the
    answers the selector step received; ``path`` its step."""

    kind: Literal["code", "llm"]
    status: Literal["ok", "fallback"]
    attempts: int = 0
    model: str | None = None
    path: str | None = None
    summary: str | None = None
    warning: str | None = None


class RoundRecord(RecordModel):
    """One round: its candidates (dropped ones included), the panel's results, the score
    table of the judged candidates, and the survivors chosen from it with the selector that
    chose them (the last round has none: the final pick is made from it)."""

    index: int
    candidates: tuple[RoundCandidate, ...]
    judges: tuple[JudgeResult, ...] = ()
    score_table: tuple[ScoreRow, ...] = ()
    survivors: tuple[Survivor, ...] = ()
    selector: SelectorRecord | None = None


class EvolutionRecord(RecordModel):
    """Multi-round selection: round 0 is the first card set, then ``generations`` rounds of
    variants; ``rounds`` holds the rounds the run got to."""

    generations: int
    survivors: int
    variants_per_survivor: int
    keep_parents: bool
    selector: Literal["code", "llm"]
    rounds: tuple[RoundRecord, ...]

    def history(self, card_id: str) -> tuple[tuple[RoundRecord, RoundCandidate], ...]:
        """The rounds that led to card ``card_id``, oldest first: from the last round it is
        in, back through its parent chain (a kept ``parent`` is the same card one round
        earlier, a ``variant`` comes from its ``parent``, a ``card`` starts the chain). Empty
        when no round has that card. Read from the record; nothing is recomputed."""
        found: list[tuple[RoundRecord, RoundCandidate]] = []
        wanted: str | None = card_id
        for r in reversed(self.rounds):
            candidate = next((c for c in r.candidates if c.id == wanted), None)
            if candidate is None:
                if found:
                    break
                continue
            found.append((r, candidate))
            if candidate.kind == "card":
                break
            wanted = candidate.id if candidate.kind == "parent" else candidate.parent
        return tuple(reversed(found))


class ScoringRecord(RecordModel):
    """Black-box scoring of one run, as far as the run got (a run that failed in the judges
    has candidates but no score table)."""

    enabled: Literal[True] = True
    config_snapshot: dict[str, JsonValue]
    aggregation: str = "median"
    normalise: str = Field(default="none", exclude_if=lambda v: v == "none")
    """``prompt.scoring.normalise`` (absent when ``none``, so such a record is unchanged)."""
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
    evolution: EvolutionRecord | None = Field(default=None, exclude_if=lambda v: v is None)
    """Only with ``prompt.scoring.evolution.enabled`` (absent otherwise, so a one-round run's
    record is unchanged). With it, ``candidates``, ``judges`` and ``score_table`` above are
    the last round's, from which the final card was picked."""

    @property
    def selected_card(self) -> IdeaCard | None:
        """The card that was selected, if the selection was made."""
        return next((c.card for c in self.candidates if c.id == self.selected_id and c.card), None)


class ScoringOff(RecordModel):
    """The scoring record of a run with scoring disabled."""

    enabled: Literal[False] = False


ScoringSection: TypeAlias = Annotated[ScoringRecord | ScoringOff, Field(discriminator="enabled")]
"""The transcript's ``blackbox_scoring``: the record, or ``{"enabled": false}``."""


def pick_rule(scoring: ScoringRecord) -> str:
    """The rule that made the final pick, from the recorded roll, rate, ranking and pool."""
    roll, rate, detail = scoring.exploration_roll, scoring.exploration_rate, scoring.selection
    if scoring.selection_mode == "explore":
        rule = "explore"
        if roll is not None:
            rule += f": roll {roll:.3f} < exploration rate {rate:g}"
        if detail is not None:
            rule += f"; drawn from the pool {', '.join(detail.explore_pool)}"
            rule += " weighted by effective score"
            if detail.explore_roll is not None:
                rule += f" (draw {detail.explore_roll:.3f})"
        return rule
    rule = "exploit"
    if roll is not None:
        rule += f": roll {roll:.3f} >= exploration rate {rate:g}"
    return rule + "; the top card by effective score (then aggregate, then id)"
