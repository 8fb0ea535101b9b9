"""The selection-quality bench's own logic (bench/quality.py): its simulated judges read the
order they were shown from the request, its world keeps motifs apart, the variety runs feed
novelty through the real generations history, its variants follow their parents as the flags
say, the rounds rows count the calls the product made, and the same seed gives the same
table."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from image_project.backends.base import Message, TextRequest
from image_project.record.scoring import IdeaCard, ScoringRecord
from image_project.run.driver import run_generation
from image_project.run.state import RunResult
from image_project.stages.scoring.hints import content_tokens
from tests.support.quality_bench import LIKES, quality

TINY = [
    *("--silent", "--seeds", "3", "--ideas", "4", "--variety-runs", "3", "--variety-seeds", "1"),
    *("--rounds-seeds", "2", "--rounds-max", "1"),
]


def scoring_of(result: RunResult) -> ScoringRecord:
    record = result.record.blackbox_scoring
    assert isinstance(record, ScoringRecord)
    return record


def test_neutral_motifs_share_no_word_with_each_other_or_any_like() -> None:
    liked = {t for like in LIKES for t in content_tokens(like)}
    seen: set[str] = set()
    for motif in (*quality.NEUTRAL_MOTIFS, *quality.MOTIF_PADDING):
        words = set(content_tokens(motif))
        assert words and not words & liked and not words & seen, motif
        seen |= words


@pytest.mark.anyio
async def test_a_judge_scores_truth_plus_position_and_like_bias_in_the_order_it_was_shown(
    tmp_path: Path,
) -> None:
    params = quality.WorldParams(
        sigma=0.0, beta=5.0, lam=7.0, p_refuse=0.0, p_garbage=0.0, position_bias="linear"
    )
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
        sigma=0.0,
        beta=5.0,
        lam=0.0,
        p_refuse=0.0,
        p_garbage=0.0,
        broken="garbage",
        position_bias="linear",
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
    # The first line names the seed; the figures below it must differ too.
    assert first.splitlines()[1:] != other.splitlines()[1:]
    assert "median of 3" in first and "exploration + novelty" in first


def test_the_command_writes_strict_json_and_a_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, png = tmp_path / "q.json", tmp_path / "q.png"
    flags = [*TINY, "--variety-runs", "0", "--json", str(out), "--plot", str(png)]
    assert quality.main(flags) == 0
    report = json.loads(out.read_text(encoding="utf-8"), parse_constant=pytest.fail)
    assert [r["name"] for r in report["choosing_well"]] == [p.name for p in quality.PANELS]
    assert report["variety"] == []
    rows = report["rounds"]["rows"]
    assert [r["name"] for r in rows] == [
        "0 rounds",
        "flat, 13 cards",
        "1 rounds, variants -0",
        "1 rounds, variants -1.5",
    ]
    assert [len(r["top_per_round"]) for r in rows] == [1, 1, 2, 2]
    assert [r["vs_control"] is None for r in rows] == [True, True, False, False]
    sweep = report["judge_corr_sweep"]
    worlds = [(row["judge_scale_spread"], row["judge_offset_spread"]) for row in sweep]
    assert worlds == [(0.0, 0.0)] * 3 + [(0.3, 8.0)] * 3
    assert [row["judge_corr"] for row in sweep] == [0.0, 0.5, 0.8] * 2
    assert [p["name"] for p in sweep[0]["panels"]] == [p.name for p in quality.sweep_panels()]
    assert all("minus_median" in p for p in sweep[0]["panels"])
    assert quality.format_table(report) in capsys.readouterr().out
    with Image.open(png) as img:
        assert img.format == "PNG" and img.width > 800


def test_world_flags_are_checked() -> None:
    with pytest.raises(SystemExit):
        quality.parse_args(["--neutral-motifs", "2"])
    with pytest.raises(SystemExit):
        quality.parse_args(["--p-refuse", "0.7", "--p-garbage", "0.5"])
    with pytest.raises(SystemExit):
        quality.parse_args(["--survivors", "7", "--ideas", "6"])
    with pytest.raises(SystemExit):
        quality.parse_args(["--child-sigma", "-1"])
    with pytest.raises(SystemExit):
        quality.parse_args(["--rounds-max", "0"])
    with pytest.raises(ValueError, match="liked-motifs"):
        quality.World(1, quality.WorldParams(liked_motifs=99), LIKES)


def variant_request(parent_hook: str, directive: str, seed: int) -> TextRequest:
    """A variant generator's request as the product words it (the parts the world reads)."""
    user = (
        "Concepts to blend:\n- a concept\n\nThe idea card to rework:\n"
        f"Hook: {parent_hook}\nNarrative: x\n\nDirective: {directive}.\n\nTaste: y"
    )
    return TextRequest(messages=(Message("user", user),), temperature=0.8, seed=seed)


def test_variant_quality_is_the_parents_plus_drift_and_a_seeded_step_of_child_sigma() -> None:
    params = quality.WorldParams(
        quality_mean=50.0, quality_sd=0.0, child_sigma=4.0, child_drift=3.0
    )
    world = quality.World(9, params, LIKES)
    parent = json.loads(world.card(TextRequest(messages=(), temperature=0.8, seed=1)))["hook"]
    steps = []
    for seed in range(2, 402):
        answer = world.variant(variant_request(parent, "change the palette and mood", seed))
        steps.append(world.cards[IdeaCard.model_validate_json(answer).hook].quality - 50.0)
    assert abs(statistics.fmean(steps) - 3.0) < 0.6
    assert 3.4 < statistics.stdev(steps) < 4.6
    again = quality.World(9, params, LIKES)
    again.card(TextRequest(messages=(), temperature=0.8, seed=1))
    repeat = again.variant(variant_request(parent, "change the palette and mood", 2))
    assert again.cards[IdeaCard.model_validate_json(repeat).hook].quality - 50.0 == steps[0]
    with pytest.raises(ValueError, match="reworks no card"):
        world.variant(variant_request("No. 999: unknown", "change the palette and mood", 5))


@pytest.mark.anyio
async def test_variants_in_a_real_run_are_valid_cards_that_follow_parent_and_directive(
    tmp_path: Path,
) -> None:
    params = quality.WorldParams(child_sigma=0.0, child_drift=5.0, p_refuse=0.0, p_garbage=0.0)
    world = quality.World(13, params, LIKES)
    args = quality.parse_args(["--ideas", "4", "--survivors", "2", "--variants", "3"])
    args.rounds_judges = 2
    cfg = quality.rounds_config(args, tmp_path, 2, 4)
    result = await run_generation(cfg, quality._backends(world), seed=91, generation_id="r1")
    evolution = scoring_of(result).evolution
    assert evolution is not None and len(evolution.rounds) == 3
    cards = {c.id: c.card for r in evolution.rounds for c in r.candidates if c.card is not None}
    variants = [c for r in evolution.rounds[1:] for c in r.candidates if c.kind == "variant"]
    assert len(variants) == 12
    settings = 0
    for v in variants:
        assert v.card is not None and v.parent is not None
        card, parent = cards[v.id], cards[v.parent]
        assert card is not None and parent is not None
        IdeaCard.model_validate_json(card.model_dump_json())
        truth, origin = world.cards[card.hook], world.cards[parent.hook]
        assert truth.parent == origin
        assert truth.quality == min(100.0, origin.quality + 5.0)
        kept = [m for m in truth.motifs if m in origin.motifs]
        if "setting" in v.directive:
            settings += 1
            assert len(kept) == len(origin.motifs) - 1 and len(set(truth.motifs)) == len(kept) + 1
        else:
            assert truth.motifs == origin.motifs
        for axis in ("composition", "palette", "medium", "mood"):
            same = getattr(card.options, axis) == getattr(parent.options, axis)
            assert same is (axis not in v.directive), (v.id, axis, v.directive)
    assert 0 < settings < len(variants)
    rounds = quality.rounds_of(result, world)
    assert rounds.chosen == world.cards[cards[scoring_of(result).selected_id or ""].hook].quality
    assert rounds.best_seen == max(rounds.best) and len(rounds.top) == 3


@pytest.mark.anyio
async def test_rounds_rows_are_paired_count_the_calls_and_repeat_for_a_seed() -> None:
    flags = [
        *("--silent", "--ideas", "4", "--rounds-seeds", "3", "--rounds-max", "2"),
        *("--survivors", "2", "--variants", "2", "--rounds-judges", "2", "--drifts", "0"),
        *("--p-refuse", "0", "--p-garbage", "0"),
    ]
    report = await quality.rounds_part(quality.parse_args(flags), LIKES)
    assert report is not None
    assert report == await quality.rounds_part(quality.parse_args(flags), LIKES)
    other = await quality.rounds_part(quality.parse_args([*flags, "--seed", "5"]), LIKES)
    assert other is not None and other["rows"] != report["rows"]
    rows = {r["name"]: r for r in report["rows"]}
    assert list(rows) == [
        "0 rounds",
        "flat, 10 cards",
        "flat, 16 cards",
        "1 rounds, variants -0",
        "2 rounds, variants -0",
    ]
    for g, name in enumerate(["0 rounds", "1 rounds, variants -0", "2 rounds, variants -0"]):
        row = rows[name]
        assert row["failed"] == 0 and row["runs"] == 3
        # N + G*S*V generator calls, J judge calls per round (no re-asks in this world)
        assert (row["generator_calls"], row["judge_calls"]) == (4 + 4 * g, 2 * (g + 1))
        # round 0 is the same cards and the same judging in every row
        assert row["top_per_round"][0] == rows["0 rounds"]["top_per_round"][0]
        assert row["best_seen"] >= max(row["best_per_round"]) - 1e-9
        assert row["mean_regret"] == pytest.approx(row["best_seen"] - row["chosen_quality"])
        if g:  # the equal-calls control: as many generator + judge calls, one round
            control = rows[f"flat, {quality.control_ideas(quality.parse_args(flags), g)} cards"]
            assert control["calls"] == row["calls"]
            diffs = [row["chosen_quality"] - control["chosen_quality"]]
            assert row["vs_control"]["mean"] == pytest.approx(diffs[0])
    last = rows["2 rounds, variants -0"]
    assert last["chosen_quality"] == last["top_per_round"][-1]
    assert (rows["flat, 16 cards"]["generator_calls"], rows["flat, 16 cards"]["judge_calls"]) == (
        16,
        2,
    )


def test_bounded_position_bias_spreads_the_same_advantage_over_any_number_of_cards() -> None:
    linear = quality.World(1, quality.WorldParams(beta=2.0, position_bias="linear"), LIKES)
    bounded = quality.World(1, quality.WorldParams(beta=2.0, bias_cards=6), LIKES)
    assert [bounded.position_bias(k, 6) for k in range(6)] == [
        linear.position_bias(k, 6) for k in range(6)
    ]
    assert linear.position_bias(0, 24) == 46.0
    assert bounded.position_bias(0, 24) == 10.0 and bounded.position_bias(23, 24) == 0.0
    assert bounded.position_bias(0, 1) == 0.0


def _judge_request(model: str, seed: int, hooks: list[str]) -> TextRequest:
    lines = "\n".join(json.dumps({"id": chr(65 + k), "hook": h}) for k, h in enumerate(hooks))
    return TextRequest(
        messages=(Message("user", f"Cards:\n{lines}"),), temperature=0.0, model=model, seed=seed
    )


def _world_with_cards(params: quality.WorldParams, n: int = 5) -> tuple[quality.World, list[str]]:
    world = quality.World(3, params, LIKES)
    hooks = [
        json.loads(world.card(TextRequest(messages=(), temperature=0.8, seed=s)))["hook"]
        for s in range(n)
    ]
    return world, hooks


def test_judge_correlation_is_the_share_of_noise_the_judges_have_in_common() -> None:
    def errors(rho: float) -> list[tuple[float, float]]:
        params = quality.WorldParams(
            sigma=8.0, beta=0.0, lam=0.0, p_refuse=0.0, p_garbage=0.0, judge_corr=rho,
            quality_mean=50.0, quality_sd=0.0,
        )  # fmt: skip
        world, hooks = _world_with_cards(params, 400)
        pairs = []
        for start in range(0, 400, 8):
            chunk = hooks[start : start + 8]
            a = json.loads(world.judge(_judge_request("sim-judge-1", start, chunk)))["scores"]
            b = json.loads(world.judge(_judge_request("sim-judge-2", start, chunk)))["scores"]
            pairs += [(x["score"] - 50.0, y["score"] - 50.0) for x, y in zip(a, b, strict=True)]
        return pairs

    for rho in (0.0, 0.5, 0.8, 1.0):
        xs, ys = zip(*errors(rho), strict=True)
        assert abs(statistics.correlation(xs, ys) - rho) < 0.1, rho
        assert 7.0 < statistics.stdev(xs) < 9.0


def test_judges_on_different_scales_stretch_and_shift_the_same_scores() -> None:
    base = {"sigma": 8.0, "beta": 0.0, "lam": 0.0, "p_refuse": 0.0, "p_garbage": 0.0}
    same = quality.WorldParams(**base)  # type: ignore[arg-type]
    spread = quality.WorldParams(**base, judge_scale_spread=0.3, judge_offset_spread=8.0)  # type: ignore[arg-type]
    world, hooks = _world_with_cards(same, 6)
    other, _ = _world_with_cards(spread, 6)
    assert [other.judge_scale(f"sim-judge-{k}") for k in (1, 2, 3)] == [
        (1.0, 0.0),
        (pytest.approx(1.3499, abs=1e-4), 8.0),
        (pytest.approx(0.7408, abs=1e-4), -8.0),
    ]
    for k in (1, 2, 3):
        request = _judge_request(f"sim-judge-{k}", 11, hooks)
        plain = json.loads(world.judge(request))["scores"]
        scaled = json.loads(other.judge(request))["scores"]
        scale, offset = other.judge_scale(f"sim-judge-{k}")
        mean = spread.quality_mean
        for x, y in zip(plain, scaled, strict=True):
            # the same draw, stretched around the mean quality and shifted (rounding apart)
            expected = min(100, max(0, mean + offset + scale * (x["score"] - mean)))
            assert abs(y["score"] - expected) <= scale / 2 + 0.5, (k, x, y)
        if k == 1:
            assert plain == scaled


def test_a_re_asked_judge_draws_again_and_can_answer_validly() -> None:
    params = quality.WorldParams(p_refuse=0.0, p_garbage=0.5)
    world, hooks = _world_with_cards(params)
    recovered = 0
    for seed in range(200):
        request = _judge_request("sim-judge-1", seed, hooks)
        first, again = world.judge(request), world.judge(request)
        if first in quality._GARBAGE and again not in quality._GARBAGE:
            recovered += 1
    assert 30 < recovered < 70  # about 200 x 0.5 x 0.5
    # Seeded: a fresh world answers the same attempts the same way.
    request = _judge_request("sim-judge-1", 7, hooks)
    first_world, _ = _world_with_cards(params)
    second_world, _ = _world_with_cards(params)
    answers = [first_world.judge(request) for _ in range(4)]
    assert answers == [second_world.judge(request) for _ in range(4)]
    assert len(set(answers)) > 1


def test_the_sweep_measures_every_aggregation_the_config_accepts() -> None:
    from typing import get_args

    from image_project.config.models import Aggregation

    assert quality.aggregation_names() == get_args(Aggregation)
    assert quality.sweep_panel("trimmed_mean").trim == 1
    assert quality.sweep_panel("median").trim == 0


def test_the_sweep_measures_every_normalisation_the_config_accepts() -> None:
    from typing import get_args

    from image_project.config.models import Normalise, ScoringConfig

    assert quality.normalise_names() == get_args(Normalise)
    panels = quality.sweep_panels()
    pairs = {(p.aggregation, p.normalise) for p in panels}
    assert {(a, "none") for a in quality.aggregation_names()} <= pairs
    for normalise in get_args(Normalise):
        for aggregation in quality.NORMALISED_AGGREGATIONS:
            assert (aggregation, normalise) in pairs
    assert len({p.name for p in panels}) == len(panels)
    reference = quality.REFERENCE_PANEL
    assert (reference.aggregation, reference.normalise) == ("median", "none")
    assert reference in panels
    fields = ScoringConfig.model_fields
    default = (fields["aggregation"].default, fields["normalise"].default)
    assert default in pairs  # the product's default is measured
    assert {p.normalise for p in quality.sweep_panels(["ranks"])} == {"ranks"}


def test_merge_joins_sweep_parts_per_world_and_correlation() -> None:
    def row(scale: float | None, rho: float, names: list[str], one: float = 3.0) -> dict[str, Any]:
        panels = [{"name": n, "mean_regret": 1.0, "cut": {}} for n in names]
        out: dict[str, Any] = {"judge_corr": rho, "one_judge_regret": one, "panels": panels}
        if scale is not None:
            out |= {"judge_scale_spread": scale, "judge_offset_spread": 8.0 * scale}
        return out

    none, ranks = quality.sweep_panels(["none"]), quality.sweep_panels(["ranks"])
    rows = quality.merge_sweep(
        [
            row(0.5, 0.0, [p.name for p in ranks]),
            row(None, 0.5, [p.name for p in none]),  # a part written before scale worlds
            row(0.0, 0.5, [p.name for p in ranks]),
            row(0.5, 0.0, [p.name for p in none]),
        ]
    )
    assert [(r["judge_scale_spread"], r["judge_corr"]) for r in rows] == [(0.0, 0.5), (0.5, 0.0)]
    order = [p.name for p in quality.sweep_panels(["none", "ranks"])]
    assert [[p["name"] for p in r["panels"]] for r in rows] == [order, order]
    assert rows[0]["panels"][0]["normalise"] == "none"
    with pytest.raises(ValueError, match="one judge differs"):
        quality.merge_sweep([row(0.0, 0.0, ["a"]), row(0.0, 0.0, ["b"], one=4.0)])


def test_equal_encoding_gives_other_motifs_as_many_words_as_the_likes() -> None:
    likes = LIKES[:4]
    equal = quality.neutral_motifs(quality.WorldParams(), likes)
    old = quality.neutral_motifs(quality.WorldParams(motif_encoding="old"), likes)
    assert old == quality.NEUTRAL_MOTIFS[:40]
    lengths = [len(quality.motif_words(like)) for like in likes]
    assert [len(quality.motif_words(m)) for m in equal] == [lengths[k % 4] for k in range(40)]
    assert [len(quality.motif_words(m)) for m in old] == [2] * 40
