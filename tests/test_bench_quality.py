"""The selection-quality bench's own logic (bench/quality.py): its simulated judges read the
order they were shown from the request, its world keeps motifs apart, the variety runs feed
novelty through the real generations history, and the same seed gives the same table."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from PIL import Image

from image_project.app import RunResult, run_generation
from image_project.record import ScoringRecord
from image_project.stages.profile import load_profile
from image_project.stages.scoring.hints import content_tokens

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

if TYPE_CHECKING:  # mypy sees the real module (bench/ is on its path; see pyproject.toml)
    import quality
else:
    quality = pytest.importorskip("quality")

REPO = Path(__file__).resolve().parents[1]
LIKES = load_profile(REPO / "config" / "profile.csv").likes
TINY = ["--silent", "--seeds", "3", "--ideas", "4", "--variety-runs", "3", "--variety-seeds", "1"]


def scoring_of(result: RunResult) -> ScoringRecord:
    record = result.record.blackbox_scoring
    assert isinstance(record, ScoringRecord)
    return record


def test_neutral_motifs_share_no_word_with_each_other_or_any_like() -> None:
    liked = {t for like in LIKES for t in content_tokens(like)}
    seen: set[str] = set()
    for motif in quality.NEUTRAL_MOTIFS:
        words = set(content_tokens(motif))
        assert words and not words & liked and not words & seen, motif
        seen |= words


@pytest.mark.anyio
async def test_a_judge_scores_truth_plus_position_and_like_bias_in_the_order_it_was_shown(
    tmp_path: Path,
) -> None:
    params = quality.WorldParams(sigma=0.0, beta=5.0, lam=7.0, p_refuse=0.0, p_garbage=0.0)
    world = quality.World(11, params, LIKES)
    cfg = quality.make_config(
        tmp_path, quality.panel_override(3), "prompt.scoring.num_ideas=5", prompt_only=True
    )
    result = await run_generation(cfg, quality._backends(world), seed=77, generation_id="t1")
    record = scoring_of(result)
    truths = {c.id: world.cards[c.card.hook] for c in record.candidates if c.card is not None}
    assert len({j.order for j in record.judges}) > 1  # the product shuffles per judge
    for judge in record.judges:
        assert judge.status == "ok" and judge.scores is not None
        for place, card_id in enumerate(judge.order):
            truth = truths[card_id]
            expected = truth.quality + 5.0 * (4 - place) + (7.0 if truth.liked else 0.0)
            assert judge.scores[card_id] == min(100, max(0, round(expected)))
    chosen = quality.chosen_of(result, world)
    assert chosen.best == max(t.quality for t in truths.values())
    assert chosen.quality == truths[record.selected_id or ""].quality


@pytest.mark.anyio
async def test_shared_order_counterfactual_biases_by_id_order_and_broken_judges_break(
    tmp_path: Path,
) -> None:
    params = quality.WorldParams(
        sigma=0.0, beta=5.0, lam=0.0, p_refuse=0.0, p_garbage=0.0, broken="garbage"
    )
    world = quality.World(11, params, LIKES, shared_order=True)
    cfg = quality.make_config(
        tmp_path,
        quality.panel_override(3, broken=True),
        "prompt.scoring.num_ideas=4",
        prompt_only=True,
    )
    result = await run_generation(cfg, quality._backends(world), seed=78, generation_id="t2")
    record = scoring_of(result)
    truths = {c.id: world.cards[c.card.hook] for c in record.candidates if c.card is not None}
    assert [j.status for j in record.judges] == ["ok", "ok", "parse_error"]
    for judge in record.judges[:2]:
        assert judge.scores is not None
        for rank, card_id in enumerate("ABCD"):
            expected = truths[card_id].quality + 5.0 * (3 - rank)
            assert judge.scores[card_id] == min(100, max(0, round(expected)))


@pytest.mark.anyio
async def test_variety_runs_write_the_history_that_novelty_reads(tmp_path: Path) -> None:
    world = quality.World(5, quality.WorldParams(p_refuse=0.0, p_garbage=0.0), LIKES)
    cfg = quality.make_config(
        tmp_path,
        quality.panel_override(1),
        "prompt.scoring.novelty.enabled=true",
        "prompt.scoring.novelty.window=25",
        prompt_only=False,
    )
    records = []
    for i in range(3):
        result = await run_generation(
            cfg, quality._backends(world), seed=100 + i, generation_id=f"v{i}"
        )
        records.append(scoring_of(result))
        chosen = quality.chosen_of(result, world)
        assert all(m in chosen.final_prompt for m in chosen.motifs)
    with (tmp_path / "generations.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    assert records[0].novelty.used is False  # no history yet: the documented fallback
    assert records[2].novelty.used is True and records[2].novelty.rows == 2


@pytest.mark.anyio
async def test_the_same_seed_gives_the_same_table_and_another_seed_another() -> None:
    first = quality.format_table(await quality.build_report(quality.parse_args(TINY)))
    again = quality.format_table(await quality.build_report(quality.parse_args(TINY)))
    other = quality.format_table(
        await quality.build_report(quality.parse_args([*TINY, "--seed", "7"]))
    )
    assert first == again
    assert first != other
    assert "median of 3" in first and "exploration + novelty" in first


def test_the_command_writes_strict_json_and_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, png = tmp_path / "q.json", tmp_path / "q.png"
    assert quality.main([*TINY, "--variety-runs", "0", "--json", str(out), "--plot", str(png)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"), parse_constant=pytest.fail)
    assert [r["name"] for r in report["choosing_well"]] == [p.name for p in quality.PANELS]
    assert report["variety"] == [] and report["rounds"] is None
    assert quality.format_table(report) in capsys.readouterr().out
    with Image.open(png) as img:
        assert img.format == "PNG" and img.width > 800


def test_world_flags_are_checked() -> None:
    with pytest.raises(SystemExit):
        quality.parse_args(["--neutral-motifs", "2"])
    with pytest.raises(SystemExit):
        quality.parse_args(["--p-refuse", "0.7", "--p-garbage", "0.5"])
    with pytest.raises(ValueError, match="liked-motifs"):
        quality.World(1, quality.WorldParams(liked_motifs=99), LIKES)
