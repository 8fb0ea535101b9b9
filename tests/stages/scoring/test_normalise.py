"""``prompt.scoring.normalise`` (stages/scoring/aggregation.py): every judge on a common
scale within the round (z-scores, or z-scored ranks) before the aggregation, put back on the
panel's mean and spread; by worked example, its invariances, what the score table records,
the config key and a whole offline run."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import anyio
import pytest

from image_project.backends.factory import make_backends
from image_project.cli.summary import record_lines
from image_project.errors import ConfigError
from image_project.record.run import RunRecord
from image_project.run.driver import run_generation
from image_project.stages.scoring.aggregation import (
    NORMALISATIONS,
    aggregate_scores,
    normalise_scores,
)
from image_project.stages.scoring.selection import aggregate
from tests.review.offline_runs import offline_cfg

IDS = ("A", "B", "C")
# ``narrow`` uses 60..80, ``wide`` 0..100: with raw scores the wide judge decides alone.
PANEL = {"narrow": {"A": 60, "B": 70, "C": 80}, "wide": {"A": 100, "B": 0, "C": 50}}


def means(how: str, panel: dict[str, dict[str, int]] = PANEL) -> dict[str, int | float]:
    return {r.id: r.aggregate for r in aggregate(IDS, panel, method="mean", normalise=how)}  # type: ignore[arg-type]


def test_a_wide_scale_judge_no_longer_decides_alone() -> None:
    assert means("none") == {"A": 80, "B": 35, "C": 65}
    # Means 70 and 50 -> M = 60; sds 8.165 and 40.825 -> S = 24.495; z = -1.22, 0, 1.22 for
    # narrow and 1.22, -1.22, 0 for wide, so S * z = +-30 exactly.
    assert normalise_scores(IDS, PANEL, "zscores") == {
        "narrow": {"A": 30, "B": 60, "C": 90},
        "wide": {"A": 90, "B": 30, "C": 60},
    }
    assert means("zscores") == {"A": 60, "B": 45, "C": 75}
    assert means("ranks") == {"A": 60, "B": 45, "C": 75}  # ranks 1,2,3 and 3,1,2: the same


def test_ranks_keep_only_the_order_and_average_ties() -> None:
    panel = {"a": {"A": 10, "B": 20, "C": 90}, "b": {"A": 50, "B": 50, "C": 80}}
    ranks = normalise_scores(IDS, panel, "ranks")
    # b ranks A and B 1.5 each: they get one normalised score.
    assert ranks["b"]["A"] == ranks["b"]["B"] < ranks["b"]["C"]
    # a's ranks are 1, 2, 3 however far apart its scores are: evenly spaced.
    a = ranks["a"]
    assert a["C"] - a["B"] == pytest.approx(a["B"] - a["A"], abs=2e-3)
    assert normalise_scores(IDS, panel, "zscores")["a"]["C"] - a["C"] > 0  # z keeps distances


@pytest.mark.parametrize(
    ("how", "remap"),
    [
        ("zscores", lambda s: 2 * s + 4),
        ("zscores", lambda s: s - 10),
        ("ranks", lambda s: s * s // 100),
    ],
)
def test_the_ranking_ignores_a_judges_own_scale(how: str, remap: object) -> None:
    """A judge's scores stretched and shifted (zscores) or bent by an increasing map (ranks)
    leave the order of the mean of the normalised scores as it was."""
    panel = {"x": {"A": 62, "B": 70, "C": 81}, "y": {"A": 90, "B": 14, "C": 40}}
    moved = {**panel, "y": {i: remap(s) for i, s in panel["y"].items()}}  # type: ignore[operator]
    assert moved["y"] != panel["y"]
    before, after = means(how, panel), means(how, moved)
    assert sorted(IDS, key=lambda i: -after[i]) == sorted(IDS, key=lambda i: -before[i])


def test_a_judge_who_gives_one_score_to_every_card_adds_no_order() -> None:
    flat = normalise_scores(IDS, {"flat": {i: 70 for i in IDS}, **PANEL}, "zscores")
    assert len(set(flat["flat"].values())) == 1
    assert normalise_scores(IDS, {"flat": {i: 70 for i in IDS}}, "ranks") == {
        "flat": {"A": 70, "B": 70, "C": 70}
    }


def test_the_score_table_records_the_normalised_scores_it_aggregated() -> None:
    for how in NORMALISATIONS:
        rows = aggregate(IDS, PANEL, method="median", normalise=how)
        for row in rows:
            assert row.judge_scores == {j: PANEL[j][row.id] for j in PANEL}  # raw, as said
            assert row.median == aggregate_scores(list(row.judge_scores.values()))
            if how == "none":
                assert row.normalised is None
                assert "normalised" not in row.model_dump()
            else:
                assert row.normalised is not None
                assert row.aggregate == aggregate_scores(list(row.normalised.values()))


def test_an_unknown_normalisation_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown normalisation 'minmax'"):
        normalise_scores(IDS, PANEL, "minmax")  # type: ignore[arg-type]


def test_the_config_key_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        offline_cfg(tmp_path, 1, "prompt.scoring.normalise=minmax")
    assert info.value.key == "prompt.scoring.normalise"
    assert offline_cfg(tmp_path, 1).prompt.scoring.normalise == "robust"  # the default


def _record(out: Path, *extra: str) -> dict[str, object]:
    cfg = offline_cfg(
        out,
        5,
        "run.mode=prompt_only",
        "prompt.scoring.enabled=true",
        "prompt.scoring.judges=[{id: a, rubric: strict}, {id: b, rubric: profile_fit}, "
        "{id: c, rubric: novelty_heavy}]",
        "prompt.scoring.aggregation=median",  # (the default is mean)
        *extra,
    )
    anyio.run(run_generation, cfg, make_backends(cfg, {}))
    (path,) = (out / "logs").glob("*_transcript.json")
    scoring = json.loads(path.read_text(encoding="utf-8"))["blackbox_scoring"]
    assert isinstance(scoring, dict)
    return scoring


def test_a_run_records_its_normalisation(tmp_path: Path) -> None:
    plain = _record(tmp_path / "plain", "prompt.scoring.normalise=none")
    assert "normalise" not in plain
    assert all("normalised" not in row for row in plain["score_table"])  # type: ignore[attr-defined]
    ranked = _record(tmp_path / "ranks", "prompt.scoring.normalise=ranks")
    assert ranked["normalise"] == "ranks"
    assert ranked["config_snapshot"]["normalise"] == "ranks"  # type: ignore[index]
    for row in ranked["score_table"]:  # type: ignore[attr-defined]
        assert row["aggregate"] == aggregate_scores(list(row["normalised"].values()))
    (path,) = (tmp_path / "ranks" / "logs").glob("*_transcript.json")
    record = RunRecord.model_validate_json(path.read_text(encoding="utf-8"))
    lines = record_lines(record, whole_prompt=False)
    assert any(line.startswith("  Selected    idea ") and "median(r)" in line for line in lines)
    assert any("Scores" in line and "median(r)" in line for line in lines)


def _pick(ids: tuple[str, ...], panel: dict[str, dict[str, int]], how: str, method: str) -> str:
    rows = aggregate(ids, panel, method=method, normalise=how)  # type: ignore[arg-type]
    return min(rows, key=lambda r: (-r.effective_score, -r.aggregate, r.id)).id


def test_robust_gives_a_near_constant_judge_no_full_vote() -> None:
    """Two judges agree C > B > A by 20 points a step; a third answers 81, 80, 79. Its z-scores
    are full +-1.22 votes against them; robust divides its 0.8-point spread by about half
    the panel's median spread, so its pull stays under a tenth of the others'."""
    panel = {"a": {"A": 50, "B": 70, "C": 90}, "b": {"A": 55, "B": 75, "C": 95}}
    panel["flat"] = {"A": 81, "B": 80, "C": 79}
    z = normalise_scores(IDS, panel, "zscores")
    robust = normalise_scores(IDS, panel, "robust")
    assert z["flat"]["A"] - z["flat"]["C"] == pytest.approx(z["a"]["C"] - z["a"]["A"], abs=0.01)
    pull = robust["flat"]["A"] - robust["flat"]["C"]
    assert 0 < pull < 0.1 * (robust["a"]["C"] - robust["a"]["A"])
    assert _pick(IDS, panel, "robust", "median") == "C"


def test_robust_keeps_the_distances_of_two_cards_and_a_tie_is_no_preference() -> None:
    """With two cards each judge's own z-scores are +-1 or 0: judge ``a`` prefers B by 20
    points, ``b`` prefers A by 1, ``tie`` has none. z-scores make that one vote each way and
    a tie broken by id (A); robust keeps the 20 points against the 1."""
    ids = ("A", "B")
    panel = {"a": {"A": 60, "B": 80}, "b": {"A": 71, "B": 70}, "tie": {"A": 70, "B": 70}}
    assert {r.id: r.aggregate for r in aggregate(ids, panel, method="mean", normalise="zscores")}[
        "A"
    ] == {r.id: r.aggregate for r in aggregate(ids, panel, method="mean", normalise="zscores")}["B"]
    assert _pick(ids, panel, "zscores", "mean") == "A"
    robust = normalise_scores(ids, panel, "robust")
    assert robust["tie"]["A"] == robust["tie"]["B"]  # no preference, not a vote
    assert _pick(ids, panel, "robust", "mean") == "B"
    assert _pick(ids, panel, "robust", "median") == "B"


def test_the_panel_scale_is_the_mean_of_the_judges_spreads_above_zero() -> None:
    """S (the spread z is put back on) leaves out a judge whose spread is 0, and M is the
    mean of every judge's mean: adding a flat judge at 70 to ``PANEL`` moves M from 60 to
    63.333 but keeps ``narrow``'s steps S * z = 30 points apart."""
    common = normalise_scores(IDS, {**PANEL, "flat": {i: 70 for i in IDS}}, "zscores")
    assert common["narrow"] == {"A": 33.333, "B": 63.333, "C": 93.333}
    assert common["flat"] == {"A": 63.333, "B": 63.333, "C": 63.333}


def test_robust_divides_by_the_spread_shrunk_towards_the_panels_median() -> None:
    """``sqrt((4 m² + (n - 1) s²) / (4 + n - 1))`` for the judge's own spread s, the panel's
    median spread m and n cards, by the numbers: ``wide`` (s = 40.825) in a panel whose median
    spread is ``narrow``'s (m = 8.165) is divided by 24.495, not by its own 40.825."""
    panel = {**PANEL, "narrow2": {"A": 61, "B": 71, "C": 81}}
    s, m, n = statistics.pstdev([100, 0, 50]), statistics.pstdev([60, 70, 80]), 3
    shrunk = math.sqrt((4 * m**2 + (n - 1) * s**2) / (4 + n - 1))
    assert shrunk == pytest.approx(24.495, abs=1e-3)
    common = normalise_scores(IDS, panel, "robust")
    centre = statistics.fmean([70, 50, 71])
    scale = statistics.fmean([m, s, m])
    assert common["wide"]["A"] == pytest.approx(centre + scale * (100 - 50) / shrunk, abs=1e-3)
    assert common["wide"]["B"] == pytest.approx(centre + scale * (0 - 50) / shrunk, abs=1e-3)


def test_a_judge_with_one_score_for_every_card_is_left_out_of_the_aggregate() -> None:
    """After a normalisation, a judge who gave every card one score casts no vote (its
    normalised scores are still recorded): with two cards its honest tie would otherwise be
    the middle of three and make the median a tie the ids break. With ``none`` it votes."""
    two = {"a": {"A": 60, "B": 80}, "b": {"A": 75, "B": 70}, "tie": {"A": 70, "B": 70}}
    three = {"a": {"A": 60, "B": 70, "C": 85}, "b": {"A": 95, "B": 20, "C": 50}}
    three["tie"] = {"A": 70, "B": 70, "C": 70}
    cases: list[tuple[tuple[str, ...], dict[str, dict[str, int]], str]]
    cases = [(("A", "B"), two, "robust")]
    cases += [(IDS, three, how) for how in ("zscores", "robust", "ranks")]
    for ids, panel, how in cases:
        rows = aggregate(ids, panel, method="median", normalise=how)  # type: ignore[arg-type]
        for row in rows:
            assert row.normalised is not None and set(row.normalised) == {"a", "b", "tie"}
            voters = [row.normalised["a"], row.normalised["b"]]
            assert row.aggregate == aggregate_scores(voters), (how, row.id)
        everyone = [aggregate_scores(list(r.normalised.values())) for r in rows]  # type: ignore[union-attr]
        assert [r.aggregate for r in rows] != everyone, how  # the case tells the two apart
    plain = aggregate(("A", "B"), two, method="median", normalise="none")
    assert [r.aggregate for r in plain] == [70, 70]
