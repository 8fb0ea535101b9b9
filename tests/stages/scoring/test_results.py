"""The scoring record built as a run goes, as a unit (:mod:`image_project.stages.scoring.results`):
round 0 opened from the first cards, a round's judges in ensemble order whatever order they
answered in, its record with every candidate's card, drop and error, the candidates a later
round hands on, and the top-level record with its config snapshot (judges with every
fallback applied, the default protocol and evolution left out) at any moment of a run."""

from __future__ import annotations

from typing import Any

from image_project.config.models import EffectiveJudge, RubricSpec, ScoringConfig
from image_project.record.scoring import (
    CandidateRecord,
    JudgeResult,
    NearDuplicate,
    RoundCandidate,
    ScoreRow,
    SelectorRecord,
    Survivor,
)
from image_project.stages.scoring.novelty import NoveltyState
from image_project.stages.scoring.results import Choice, Judged, ScoringLog, ScoringOutcome
from image_project.stages.scoring.selection import select
from tests.stages.scoring.support import CARDS

FIRST = tuple(CandidateRecord(id=i, seed=10 + n, direction=f"as {i}") for n, i in enumerate("ABC"))
STRICT = EffectiveJudge("strict", "m", 0.0, RubricSpec(name="strict"))
OWN = RubricSpec(name="mine", source="file", text="- concepts: +0 to +9", path="/r/mine.md")
WARM = EffectiveJudge("warm", "m2", 0.3, OWN, 2.0, "hints", "local", "reasoned")
OFF = NoveltyState(enabled=False, window=0)


def log(**scoring: Any) -> ScoringLog:
    config = ScoringConfig.model_validate({"judges": [{"id": "strict"}, {"id": "warm"}], **scoring})
    return ScoringLog(config, (STRICT, WARM), OFF, FIRST)


def result(judge_id: str, scores: dict[str, int] | None = None) -> JudgeResult:
    return JudgeResult(
        id=judge_id,
        model="m",
        temperature=0.0,
        status="ok" if scores else "error",
        attempts=1,
        order=tuple(scores or "ABC"),
        path=f"root/judges/{judge_id}",
        scores=scores,
    )


def row(card_id: str, score: int) -> ScoreRow:
    return ScoreRow(
        id=card_id,
        judge_scores={"strict": score},
        median=score,
        aggregate=score,
        spread=0,
        n_ok=1,
        effective_score=float(score),
    )


def test_round_0_opens_with_the_first_cards_all_sent_to_judging() -> None:
    first = log().rounds[0]
    assert first.index == 0 and first.judged == Judged(("A", "B", "C"), {})
    assert [(c.id, c.kind, c.directive, c.seed) for c in first.planned] == [
        ("A", "card", "as A", 10),
        ("B", "card", "as B", 11),
        ("C", "card", "as C", 12),
    ]
    assert first.judge_ids == ("strict", "warm") and first.judges == ()


def test_a_rounds_judges_are_in_ensemble_order_whatever_order_they_answered_in() -> None:
    first = log().rounds[0]
    first.add_result(result("warm", {"A": 1, "B": 50, "C": 90}))
    assert [j.id for j in first.judges] == ["warm"]
    first.add_result(result("strict", {"A": 10, "B": 60, "C": 80}))
    assert [j.id for j in first.judges] == ["strict", "warm"]
    first.judged = Judged((), {})
    assert first.judges == ()  # nothing was sent to judging


def test_a_rounds_record_merges_each_candidates_card_drop_and_error() -> None:
    scoring = log(evolution={"enabled": True, "survivors": 2})
    scoring.cards.update(CARDS)
    parent = RoundCandidate(id="A", kind="parent", parent=None, directive="as A", seed=10)
    planned = (
        parent,
        RoundCandidate(id="D", kind="variant", parent="A", directive="warmer", seed=1),
        RoundCandidate(id="E", kind="variant", parent="A", directive="colder", seed=2),
        RoundCandidate(id="F", kind="variant", parent="A", directive="bolder", seed=3),
    )
    later = scoring.start_round(planned)
    assert later.index == 1 and later.judges == ()
    scoring.cards["D"] = CARDS["B"]
    scoring.cards["E"] = CARDS["C"]
    near = NearDuplicate(of="A", distance=0.1, threshold=0.2)
    later.judged = Judged(("A", "D"), {"E": near})
    later.invalid["F"] = "gate:card_field: empty hook"
    later.add_result(result("strict", {"A": 40, "D": 70}))
    later.table = (row("D", 70), row("A", 40))
    code = SelectorRecord(kind="code", status="ok")
    later.choice = Choice(
        (Survivor(id="D", category="performance", reason="r", proposed_by="code"),), code
    )
    record = later.record()
    assert [(c.id, c.card, c.dropped, c.invalid) for c in record.candidates] == [
        ("A", CARDS["A"], None, None),
        ("D", CARDS["B"], None, None),
        ("E", CARDS["C"], near, None),
        ("F", None, None, "gate:card_field: empty hook"),
    ]
    assert [j.id for j in record.judges] == ["strict"] and record.score_table == later.table
    assert [s.id for s in record.survivors] == ["D"] and record.selector == code
    # What the round hands on: its judged candidates, as the top-level record lists them.
    assert [(c.id, c.card) for c in later.final_candidates()] == [
        ("A", CARDS["A"]),
        ("D", CARDS["B"]),
    ]
    # Every candidate written so far, at its first appearance; a kept parent is not one.
    known = scoring.known_candidates()
    assert list(known) == ["A", "B", "C", "D", "E", "F"] and known["A"].kind == "card"


def test_the_record_snapshots_each_judge_with_every_fallback_applied() -> None:
    snapshot = log().record().config_snapshot
    assert snapshot["judges"] == [
        {
            "id": "strict",
            "model": "m",
            "temperature": 0.0,
            "rubric": {"name": "strict", "source": "builtin"},
            "weight": 1.0,
            "profile": "raw",
        },
        {
            "id": "warm",
            "model": "m2",
            "temperature": 0.3,
            "rubric": {
                "name": "mine",
                "source": "file",
                "text": "- concepts: +0 to +9",
                "path": "/r/mine.md",
            },
            "weight": 2.0,
            "profile": "hints",
            "backend": "local",
            "protocol": "reasoned",
        },
    ]
    assert snapshot["min_ok_judges"] == 2  # null in the config: a majority of two judges


def test_the_snapshot_leaves_out_the_default_protocol_and_evolution_when_off() -> None:
    plain = log().record().config_snapshot
    assert "judge_protocol" not in plain and "evolution" not in plain
    assert log(judge_protocol="pairwise").record().config_snapshot["judge_protocol"] == "pairwise"
    rounds = log(evolution={"enabled": True, "survivors": 2}).record().config_snapshot
    assert rounds["evolution"] == {
        **ScoringConfig().evolution.model_dump(mode="json"),
        "enabled": True,
        "survivors": 2,
    }


def test_the_record_shows_a_run_as_far_as_it_got() -> None:
    scoring = log()
    empty = scoring.record()
    assert [c.id for c in empty.candidates] == ["A", "B", "C"]
    assert all(c.card is None for c in empty.candidates)
    assert (empty.judges, empty.score_table, empty.selected_id, empty.evolution) == (
        (),
        (),
        None,
        None,
    )
    scoring.cards["A"] = CARDS["A"]
    scoring.rounds[0].invalid["B"] = "no card"
    scoring.rounds[0].add_result(result("strict", {"A": 80, "C": 20}))
    table = (row("A", 80), row("C", 20))
    selection = select(list(table), exploration_rate=0.0, run_seed=1)
    scoring.outcome = ScoringOutcome(table, selection, CARDS["A"])
    done = scoring.record()
    assert [(c.id, c.card, c.invalid) for c in done.candidates] == [
        ("A", CARDS["A"], None),
        ("B", None, "no card"),
        ("C", None, None),
    ]
    assert [j.id for j in done.judges] == ["strict"] and done.score_table == table
    assert (done.selected_id, done.selection_mode) == ("A", "exploit")


def test_with_rounds_the_record_lists_the_last_rounds_candidates_and_judges() -> None:
    scoring = log(evolution={"enabled": True, "survivors": 2, "generations": 1})
    scoring.cards.update(CARDS)
    scoring.rounds[0].add_result(result("strict", {"A": 80, "B": 50, "C": 20}))
    planned = (RoundCandidate(id="D", kind="variant", parent="A", directive="warmer", seed=1),)
    later = scoring.start_round(planned)
    scoring.cards["D"] = CARDS["B"]
    later.judged = Judged(("D",), {})
    later.add_result(result("warm", {"D": 70}))
    record = scoring.record()
    assert [c.id for c in record.candidates] == ["D"] and [j.id for j in record.judges] == ["warm"]
    assert record.evolution is not None
    assert [r.index for r in record.evolution.rounds] == [0, 1]
    assert (record.evolution.generations, record.evolution.survivors) == (1, 2)
