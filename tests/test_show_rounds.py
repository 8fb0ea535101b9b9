"""``runs show`` answers "why this card?" in text: every round of a multi-round
run (each card's origin, scores, survivor category and proposer, every survivor's reason, the
selector and its fallback with the cause, the final pick's rule), ``--round N`` one round,
``--card X`` one card's whole history; an interrupted scoring run says why there is no card
(never ``idea None: median None``); usage errors exit 2. Real offline runs, the CLI
in-process against the store they wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from image_project.cli import command as cli
from image_project.record.run import RunRecord
from image_project.record.scoring import ScoringRecord, pick_rule
from tests.review.offline_runs import make_round_runs


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, RunRecord], str]:
    work = tmp_path_factory.mktemp("show-rounds")
    runs = make_round_runs(work)
    return runs, f"sqlite:///{work / 'logs' / 'runs.sqlite'}"


def show(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["runs", "show", *args, "--store", url], env={})
    out, err = capsys.readouterr()
    return code, out, err


def scoring(record: RunRecord) -> ScoringRecord:
    assert isinstance(record.blackbox_scoring, ScoringRecord)
    return record.blackbox_scoring


def test_show_prints_every_round_with_survivor_reasons_and_the_pick_rule(
    made: tuple[dict[str, RunRecord], str], capsys: pytest.CaptureFixture[str]
) -> None:
    runs, url = made
    record = runs["rounds"]
    s = scoring(record)
    assert s.evolution is not None
    code, out, _ = show(capsys, url, record.generation_id)
    assert code == 0
    heads = [ln for ln in out.splitlines() if ln.startswith("Round ")]
    assert [h.split(":")[0] for h in heads] == ["Round 0", "Round 1", "Round 2"]
    for r in s.evolution.rounds:
        for surv in r.survivors:
            line = f"  {surv.id} survived as {surv.category} ({surv.proposed_by}): {surv.reason}"
            assert line in out.splitlines()
        for c in r.candidates:
            origin = {"card": "first card", "parent": "kept"}.get(c.kind, f"variant of {c.parent}")
            assert any(ln.startswith(f"  {c.id:<4}  {origin}") for ln in out.splitlines())
    assert "survivors chosen by the LLM selector" in out
    fallback = next(ln for ln in out.splitlines() if "-> code FALLBACK:" in ln)
    assert (s.evolution.rounds[1].selector.warning or "-")[:60] in fallback  # type: ignore[union-attr]
    assert f"  final pick {s.selected_id}: {pick_rule(s)}" in out.splitlines()
    marked = [ln for ln in out.splitlines() if ln.endswith(" <")]
    assert len(marked) == 2  # the summary's score table and the last round
    assert all(ln.split()[0] == s.selected_id for ln in marked)


def test_round_and_card_views(
    made: tuple[dict[str, RunRecord], str], capsys: pytest.CaptureFixture[str]
) -> None:
    runs, url = made
    record = runs["rounds"]
    s = scoring(record)
    assert s.evolution is not None and s.selected_id is not None
    code, out, _ = show(capsys, url, record.generation_id, "--round", "1")
    assert code == 0
    assert [ln.split(":")[0] for ln in out.splitlines() if ln.startswith("Round ")] == ["Round 1"]
    assert "final pick" not in out and "Concepts" not in out
    code, out, _ = show(capsys, url, record.generation_id, "--card", s.selected_id)
    assert code == 0
    chain = s.evolution.history(s.selected_id)
    lines = out.splitlines()
    assert lines[1] == f"Card {s.selected_id}: " + " -> ".join(
        f"{c.id} (round {r.index})" for r, c in chain
    )
    for r, c in chain:
        assert any(ln.startswith(f"  Round {r.index}  {c.id}  ") for ln in lines)
        surv = next((x for x in r.survivors if x.id == c.id), None)
        if surv is not None:
            assert f"survived as {surv.category} ({surv.proposed_by}): {surv.reason}" in out
        row = next(x for x in r.score_table if x.id == c.id)
        assert f"effective {row.effective_score:g}" in out
    assert lines[-1] == f"  Final pick: {pick_rule(s)}"


def test_usage_errors_exit_2_and_name_what_there_is(
    made: tuple[dict[str, RunRecord], str], capsys: pytest.CaptureFixture[str]
) -> None:
    runs, url = made
    rid = runs["rounds"].generation_id
    code, _, err = show(capsys, url, rid, "--round", "7")
    assert code == 2 and "--round: got 7, the run has rounds 0..2" in err
    code, _, err = show(capsys, url, rid, "--card", "ZZ")
    assert code == 2 and "--card: no card 'ZZ' in this run (cards: A, B" in err
    code, _, err = show(capsys, url, runs["prompt_only"].generation_id, "--card", "A")
    assert code == 2 and "has no scoring record" in err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["runs", "show", rid, "--round", "-1", "--store", url], env={})
    assert exit_info.value.code == 2


def test_an_interrupted_scoring_run_says_why_there_is_no_card(
    made: tuple[dict[str, RunRecord], str], capsys: pytest.CaptureFixture[str]
) -> None:
    runs, url = made
    code, out, _ = show(capsys, url, runs["interrupted"].generation_id)
    assert code == 0
    assert "None" not in out
    assert "  Selected    no card: the run was interrupted in phase pipeline" in out
    assert "  not judged: the run was interrupted in phase pipeline" in out
    code, out, _ = show(capsys, url, runs["failed_early"].generation_id)
    assert "Scoring     not recorded: the run failed in phase concept_filter" in out


def test_a_one_round_run_has_round_0_and_cards(tmp_path: Path) -> None:
    from image_project.cli.summary import card_lines, round_lines
    from tests.support.records import judge, run

    record = run(1, [judge("strict", {"A": 80, "B": 20, "C": 50})])
    s = scoring(record)
    lines = round_lines(s, 0)
    assert lines[0] == f"Round 0: {len(s.score_table)} judged of 3 cards"
    assert card_lines(s, "B")[0] == "Card B: B (round 0)"
    with pytest.raises(KeyError, match="the run has rounds 0"):
        round_lines(s, 1)
