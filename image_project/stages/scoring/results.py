"""The scoring record, built as the run goes: :class:`ScoringLog` and its :class:`RoundResult`
per round.

The flow hands every typed value to the log the moment it has it (a card as its generator
answers, a judge's result as the judge answers, a round's table, its survivors, the final
selection), so the :class:`~image_project.record.scoring.ScoringRecord` that
:meth:`ScoringLog.record` builds shows a run that failed or was interrupted exactly as far as
it got. Nothing here calls a model or reads the run's context.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import JsonValue

from image_project.config.models import EffectiveJudge, ScoringConfig
from image_project.record.scoring import (
    CandidateRecord,
    EvolutionRecord,
    IdeaCard,
    JudgeResult,
    NearDuplicate,
    RoundCandidate,
    RoundRecord,
    ScoreRow,
    ScoringRecord,
    SelectorRecord,
    Survivor,
    named_protocol,
)
from image_project.stages.scoring.novelty import NoveltyState
from image_project.stages.scoring.selection import Selection


@dataclass(frozen=True)
class ScoringOutcome:
    """What the select step decided: the score table, the selection and the selected card
    (the only part of scoring that later steps read)."""

    table: tuple[ScoreRow, ...]
    selection: Selection
    card: IdeaCard


@dataclass(frozen=True)
class Judged:
    """What a round sends to the judges (kept parents, then kept variants) and the variants
    dropped as near-duplicates before judging."""

    ids: tuple[str, ...]
    dropped: Mapping[str, NearDuplicate]


@dataclass(frozen=True)
class Choice:
    """A round's survivors and who chose them."""

    survivors: tuple[Survivor, ...]
    selector: SelectorRecord


@dataclass
class RoundResult:
    """One round as far as it got: its planned candidates, what was judged, each judge's
    result (in ensemble order, whatever order they answered in), the table and the
    survivors. ``cards`` is the run's card of every id (shared by all rounds)."""

    index: int
    planned: tuple[RoundCandidate, ...]
    cards: Mapping[str, IdeaCard]
    judge_ids: tuple[str, ...]
    judged: Judged | None = None
    results: dict[str, JudgeResult] = field(default_factory=dict)
    table: tuple[ScoreRow, ...] = ()
    choice: Choice | None = None
    invalid: dict[str, str] = field(default_factory=dict)
    """The cards or variants whose answers stayed invalid, by id: the error (no card, never
    judged)."""

    def add_result(self, result: JudgeResult) -> None:
        self.results[result.id] = result

    @property
    def judges(self) -> tuple[JudgeResult, ...]:
        """The results of the judges that answered so far, in ensemble order (none before
        the round's cards were sent to judging)."""
        if self.judged is None or not self.judged.ids:
            return ()
        return tuple(self.results[j] for j in self.judge_ids if j in self.results)

    def record(self) -> RoundRecord:
        dropped = self.judged.dropped if self.judged else {}
        return RoundRecord(
            index=self.index,
            candidates=tuple(
                c.model_copy(
                    update={
                        "card": self.cards.get(c.id),
                        "dropped": dropped.get(c.id),
                        "invalid": self.invalid.get(c.id),
                    }
                )
                for c in self.planned
            ),
            judges=self.judges,
            score_table=self.table,
            survivors=self.choice.survivors if self.choice else (),
            selector=self.choice.selector if self.choice else None,
        )

    def final_candidates(self) -> tuple[CandidateRecord, ...]:
        """This round's judged candidates (all planned ones before judging), as the
        top-level record lists a later round's."""
        ids = set(self.judged.ids) if self.judged else set()
        return tuple(
            CandidateRecord(id=c.id, seed=c.seed, direction=c.directive, card=self.cards.get(c.id))
            for c in self.planned
            if c.id in ids or not ids
        )


def _judge_snapshot(judge: EffectiveJudge) -> dict[str, JsonValue]:
    """A judge as configured, every fallback applied (a custom rubric's text included)."""
    rubric: dict[str, JsonValue] = {"name": judge.rubric.name, "source": judge.rubric.source}
    if judge.rubric.source != "builtin":
        rubric.update(text=judge.rubric.text, path=judge.rubric.path)
    return {
        "id": judge.id,
        "model": judge.model,
        "temperature": judge.temperature,
        "rubric": rubric,
        "weight": judge.weight,
        "profile": judge.profile,
        **({"backend": judge.backend} if judge.backend is not None else {}),
        **({"protocol": p} if (p := named_protocol(judge.protocol)) else {}),
    }


class ScoringLog:
    """The scoring part of a run as it goes; :meth:`record` at any moment."""

    def __init__(
        self,
        scoring: ScoringConfig,
        judges: Sequence[EffectiveJudge],
        novelty: NoveltyState,
        first: Sequence[CandidateRecord],
    ) -> None:
        self.scoring = scoring
        self.judges = tuple(judges)
        self.novelty = novelty
        self.first = tuple(first)
        self.cards: dict[str, IdeaCard] = {}
        self.outcome: ScoringOutcome | None = None
        self.rounds: list[RoundResult] = []
        self.start_round(
            tuple(
                RoundCandidate(
                    id=c.id, kind="card", parent=None, directive=c.direction, seed=c.seed
                )
                for c in self.first
            ),
            judged=Judged(tuple(c.id for c in self.first), {}),
        )

    def start_round(
        self, planned: tuple[RoundCandidate, ...], judged: Judged | None = None
    ) -> RoundResult:
        """Open the next round with its planned candidates."""
        result = RoundResult(
            index=len(self.rounds),
            planned=planned,
            cards=self.cards,
            judge_ids=tuple(j.id for j in self.judges),
            judged=judged,
        )
        self.rounds.append(result)
        return result

    def known_candidates(self) -> dict[str, RoundCandidate]:
        """Every candidate written so far, by id (its first appearance, any round)."""
        seen: dict[str, RoundCandidate] = {}
        for r in self.rounds:
            for c in r.planned:
                if c.kind != "parent":
                    seen.setdefault(c.id, c)
        return seen

    def record(self) -> ScoringRecord:
        """The scoring record from whatever the run got to."""
        s = self.scoring
        outcome = self.outcome
        selection = outcome.selection if outcome else None
        dropped = self.rounds[0].invalid
        candidates = tuple(
            c.model_copy(update={"card": self.cards.get(c.id), "invalid": dropped.get(c.id)})
            for c in self.first
        )
        judges = self.rounds[0].judges
        evolution = None
        if s.evolution.enabled:
            evolution = self._evolution()
            last = self.rounds[-1]
            if last.index > 0:
                candidates = last.final_candidates()
                judges = last.judges
        return ScoringRecord(
            aggregation=s.aggregation,
            normalise=s.normalise,
            config_snapshot={
                **s.model_dump(mode="json", exclude=self._unsnapshotted()),
                "judges": [_judge_snapshot(j) for j in self.judges],
                "min_ok_judges": s.effective_min_ok_judges,
            },
            candidates=candidates,
            judges=judges,
            evolution=evolution,
            score_table=outcome.table if outcome else (),
            selected_id=selection.selected_id if selection else None,
            selected_score=selection.selected_score if selection else None,
            exploration_rate=s.exploration_rate,
            exploration_roll=selection.exploration_roll if selection else None,
            selection_mode=selection.mode if selection else None,
            selection=selection.detail if selection else None,
            novelty=self.novelty.to_record(),
        )

    def _unsnapshotted(self) -> set[str]:
        """The scoring keys the config snapshot leaves out: the judges (snapshotted one by
        one, every fallback applied), evolution when it is off and the judge protocol when
        it is the default ``list`` (so a run that uses neither records what it did before
        they existed)."""
        s = self.scoring
        out = {"judges"}
        if not s.evolution.enabled:
            out.add("evolution")
        if named_protocol(s.judge_protocol) is None:
            out.add("judge_protocol")
        return out

    def _evolution(self) -> EvolutionRecord:
        evo = self.scoring.evolution
        return EvolutionRecord(
            generations=evo.generations,
            survivors=evo.survivors,
            variants_per_survivor=evo.variants_per_survivor,
            keep_parents=evo.keep_parents,
            selector=evo.selector,
            rounds=tuple(r.record() for r in self.rounds),
        )
