"""The judging protocols (``judges[i].protocol``): config validation, offline runs, the
degeneracy gate and the quorum under each, their token limits, and the isolation of a
``reasoned`` judge's rationales from every later request (generators, the LLM selector,
later rounds' judges, the final-prompt stages)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from image_project.backends.base import TextReply, TextRequest, TokenLogprob
from image_project.backends.offline.text import OfflineTextBackend
from image_project.cli.command import main
from image_project.config.models import RubricSpec
from image_project.errors import ConfigError
from image_project.record.events import TokenLogprobs
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.seeding import derive_seed
from image_project.stages.scoring.judges import RATIONALE_MAX_CHARS, reasoned_output
from image_project.stages.scoring.logprobs import NO_LOGPROBS, Weighted, expected_scores
from image_project.stages.scoring.pairwise import (
    binomial_two_sided,
    bradley_terry,
    fitted_scores,
    pair_schedule,
    position_bias,
)
from image_project.stages.scoring.rubrics import judge_system_prompt
from image_project.testing import FunctionTextBackend
from tests.test_app import backends, make_cfg, transcript
from tests.test_cli import write_config
from tests.test_evolution_run import EVOLUTION, LLM, evolution_answer
from tests.test_scoring_run import ENSEMBLE, SEED, role, scoring_answer

pytestmark = pytest.mark.anyio

PANEL = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.judges=[{id: strict, protocol: reasoned}, {id: warm, protocol: pointwise},"
    " {id: novel}]",
)


def card_ids(request: TextRequest) -> list[str]:
    assert request.json_schema is not None
    ids: list[str] = request.json_schema.schema["properties"]["scores"]["required"]
    return ids


def is_reasoned(request: TextRequest) -> bool:
    assert request.json_schema is not None
    first = request.json_schema.schema["properties"]["scores"]["properties"]
    return bool(first[card_ids(request)[0]].get("type") == "object")


def marked_rationales(request: TextRequest) -> str:
    """A reasoned answer whose rationales carry a marker no other request may contain."""
    ids = card_ids(request)
    return json.dumps(
        {
            "scores": {
                i: {
                    "rationale": f"RATIONALE-MARK {request.seed} {i}",
                    "score": (37 * n + (request.seed or 0)) % 101,
                }
                for n, i in enumerate(ids)
            }
        }
    )


def protocol_answer(request: TextRequest) -> str | TextReply:
    if role(request) == "idea_scores" and is_reasoned(request):
        return marked_rationales(request)
    return evolution_answer(request)


# ------------------------------------------------------------------------------ config


def test_a_bad_protocol_is_named_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        make_cfg(tmp_path, "prompt.scoring.judges=[{id: a, protocol: resoned}]")
    message = str(caught.value)
    assert "prompt.scoring.judges[0].protocol" in message and "'resoned'" in message
    assert "'reasoned'" in message
    with pytest.raises(ConfigError) as caught:
        make_cfg(tmp_path, "prompt.scoring.judge_protocol=votes")
    assert "prompt.scoring.judge_protocol" in str(caught.value) and "'votes'" in str(caught.value)


def test_a_judge_without_a_protocol_takes_the_panel_default(tmp_path: Path) -> None:
    cfg = make_cfg(
        tmp_path,
        "prompt.scoring.judge_protocol=reasoned",
        "prompt.scoring.judges=[{id: a}, {id: b, protocol: pointwise}]",
    )
    judges = cfg.prompt.scoring.effective_judges("m")
    assert [(j.id, j.protocol) for j in judges] == [("a", "reasoned"), ("b", "pointwise")]
    default = make_cfg(tmp_path).prompt.scoring.effective_judges("m")
    assert [j.protocol for j in default] == ["list"]


# ------------------------------------------------------------------------------ schema


def test_the_reasoned_schema_puts_a_bounded_rationale_before_each_score() -> None:
    output = reasoned_output(["B", "A"])
    scores = output.schema.schema["properties"]["scores"]
    assert scores["required"] == ["B", "A"]
    card = scores["properties"]["B"]
    assert list(card["properties"]) == ["rationale", "score"]
    assert card["required"] == ["rationale", "score"]
    grammar = output.schema.grammar
    assert grammar is not None
    assert grammar["properties"]["scores"]["properties"]["B"]["properties"]["rationale"][
        "maxLength"
    ] == (RATIONALE_MAX_CHARS)
    good = {
        "scores": {"B": {"rationale": "fits", "score": 70}, "A": {"rationale": "no", "score": 20}}
    }
    parsed = output.parse(json.dumps(good))
    assert parsed.scores == {"B": 70, "A": 20} and parsed.rationales == {"B": "fits", "A": "no"}
    too_long = {
        "scores": {
            "B": {"rationale": "x" * (RATIONALE_MAX_CHARS + 1), "score": 70},
            "A": {"rationale": "no", "score": 20},
        }
    }
    with pytest.raises(ValueError, match="rationale"):
        output.parse(json.dumps(too_long))
    with pytest.raises(ValueError, match="score"):
        output.parse(json.dumps({"scores": {"B": {"rationale": "ok"}, "A": {"rationale": "ok"}}}))


# ------------------------------------------------------------------------------ offline runs


def test_an_offline_run_with_every_protocol_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    code = main(
        [
            "--config",
            str(config),
            "--offline",
            "--prompt-only",
            "--seed",
            "7",
            "--set",
            "prompt.scoring.enabled=true",
            "--set",
            "prompt.scoring.judges=[{id: strict, rubric: strict, protocol: reasoned},"
            " {id: warm, rubric: profile_fit, protocol: pointwise}, {id: novel, rubric: novelty_heavy}]",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "protocol reasoned" in out and "protocol pointwise" in out
    (path,) = (tmp_path / "out" / "logs").glob("*_transcript.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    judges = {j["id"]: j for j in data["blackbox_scoring"]["judges"]}
    assert {j["status"] for j in judges.values()} == {"ok"}
    strict, warm, novel = judges["strict"], judges["warm"], judges["novel"]
    assert strict["protocol"] == "reasoned" and set(strict["rationales"]) == set(strict["order"])
    assert all(0 < len(r) <= RATIONALE_MAX_CHARS for r in strict["rationales"].values())
    assert warm["protocol"] == "pointwise" and "rationales" not in warm
    assert warm["attempts"] == len(warm["order"])
    assert "protocol" not in novel and "rationales" not in novel
    pointwise_steps = [s for s in data["steps"] if s.get("meta", {}).get("judge_id") == "warm"]
    assert sorted(s["meta"]["order"][0] for s in pointwise_steps) == sorted(warm["order"])
    assert all(len(s["meta"]["order"]) == 1 for s in pointwise_steps)
    snapshot = {j["id"]: j for j in data["blackbox_scoring"]["config_snapshot"]["judges"]}
    assert snapshot["strict"]["protocol"] == "reasoned" and "protocol" not in snapshot["novel"]


async def test_each_protocol_sends_its_own_token_limit(tmp_path: Path) -> None:
    text = FunctionTextBackend(protocol_answer)
    cfg = make_cfg(
        tmp_path,
        *PANEL,
        "backend.max_output_tokens.judge_base=100",
        "backend.max_output_tokens.judge_per_card=10",
        "backend.max_output_tokens.judge_reasoned_per_card=50",
    )
    await run_generation(cfg, backends(text))
    judges = [r for r in text.requests if role(r) == "idea_scores"]
    n = len(card_ids(next(r for r in judges if is_reasoned(r))))
    limits = sorted(
        {(is_reasoned(r), len(card_ids(r)), r.max_output_tokens) for r in judges},
        key=str,
    )
    assert limits == sorted(
        {(True, n, 100 + 50 * n), (False, 1, 110), (False, n, 100 + 10 * n)}, key=str
    )
    # One call per card for the pointwise judge, one each for the others.
    assert sum(1 for r in judges if len(card_ids(r)) == 1) == n
    assert len(judges) == n + 2


# ------------------------------------------------------------------------------ gate, quorum


def pointwise_seeds(judge_id: str, ids: str = "ABCDEFGH") -> dict[int, str]:
    return {derive_seed(SEED, "step", "judge", judge_id, i): i for i in ids}


async def test_a_pointwise_judge_is_gated_across_its_per_card_answers(tmp_path: Path) -> None:
    seeds = pointwise_seeds("warm")

    def fn(request: TextRequest) -> str | TextReply:
        if role(request) == "idea_scores" and request.seed in seeds:
            return json.dumps({"scores": {seeds[request.seed]: 50}})
        return scoring_answer(request)

    text = FunctionTextBackend(fn)
    cfg = make_cfg(
        tmp_path,
        *ENSEMBLE[:1],
        "prompt.scoring.judges=[{id: strict}, {id: warm, protocol: pointwise}, {id: novel}]",
        "prompt.scoring.min_ok_judges=2",
    )
    await run_generation(cfg, backends(text))
    data = transcript(tmp_path)
    judges = {j["id"]: j for j in data["blackbox_scoring"]["judges"]}
    warm = judges["warm"]
    n = len(warm["order"])
    assert (warm["status"], warm["attempts"]) == ("degenerate", n)
    assert (
        "gate:judge_degenerate" in warm["error"]
        and "every card got the same score" in (warm["error"])
    )
    assert judges["strict"]["status"] == judges["novel"]["status"] == "ok"
    assert all(
        set(r["judge_scores"]) == {"strict", "novel"}
        for r in data["blackbox_scoring"]["score_table"]
    )
    # Each card was its own call, none re-asked.
    assert sum(1 for r in text.requests if r.seed in seeds) == n


async def test_degenerate_reasoned_judges_fail_the_quorum(tmp_path: Path) -> None:
    def fn(request: TextRequest) -> str | TextReply:
        if role(request) == "idea_scores" and is_reasoned(request):
            return json.dumps(
                {"scores": {i: {"rationale": "fine", "score": 0} for i in card_ids(request)}}
            )
        return scoring_answer(request)

    text = FunctionTextBackend(fn)
    cfg = make_cfg(
        tmp_path,
        "prompt.scoring.enabled=true",
        "prompt.scoring.judge_protocol=reasoned",
        "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel, protocol: list}]",
    )
    with pytest.raises(RunFailed) as caught:
        await run_generation(cfg, backends(text))
    message = caught.value.error.message
    assert "strict=degenerate" in message and "warm=degenerate" in message
    assert "novel=ok" in message
    # All-equal answers are not re-asked (one call each).
    assert sum(1 for r in text.requests if role(r) == "idea_scores" and is_reasoned(r)) == 2


# ------------------------------------------------------------------------------ isolation


async def test_no_rationale_reaches_a_generator_the_selector_or_a_later_round(
    tmp_path: Path,
) -> None:
    text = FunctionTextBackend(protocol_answer)
    cfg = make_cfg(tmp_path, *EVOLUTION, LLM, "prompt.scoring.judge_protocol=reasoned")
    await run_generation(cfg, backends(text))
    data = transcript(tmp_path)
    rounds = data["blackbox_scoring"]["evolution"]["rounds"]
    recorded = [
        r for rnd in rounds for j in rnd["judges"] for r in (j.get("rationales") or {}).values()
    ]
    # Every round's judges were reasoned, and their rationales are in the record.
    assert len(rounds) == 3 and all(
        j["protocol"] == "reasoned" and j["status"] == "ok" for rnd in rounds for j in rnd["judges"]
    )
    assert recorded and all(r.startswith("RATIONALE-MARK") for r in recorded)
    selectors = [r for r in text.requests if role(r) == "survivor_selection"]
    later_judges = [r for r in text.requests if role(r) == "idea_scores"]
    assert selectors and later_judges
    for request in text.requests:
        sent = "\n".join(m.content for m in request.messages)
        assert "RATIONALE-MARK" not in sent, role(request)
        assert "rationale" not in sent.lower() or role(request) == "idea_scores"


# ------------------------------------------------------------------------------ pairwise


def test_the_schedule_compares_every_pair_both_ways_in_a_seeded_order() -> None:
    ids = list("ABCDEF")
    pairs = pair_schedule(SEED, ids, "warm")
    assert len(pairs) == 30 == len(set(pairs))
    assert {(b, a) for a, b in pairs} == set(pairs)  # each card of a pair once shown first
    assert pairs == pair_schedule(SEED, ids, "warm")
    assert pairs != pair_schedule(SEED, ids, "novel")


def test_bradley_terry_recovers_a_consistent_order_and_ties_a_cycle() -> None:
    outcomes = [
        ("A", "B", "A"),
        ("C", "A", "A"),
        ("A", "D", "A"),
        ("B", "C", "B"),
        ("D", "B", "B"),
        ("C", "D", "C"),
    ]
    scores = fitted_scores("ABCD", outcomes)
    assert scores["A"] > scores["B"] > scores["C"] > scores["D"]
    assert all(0 < s < 100 for s in scores.values())  # the prior keeps every card finite
    strength = bradley_terry("ABCD", outcomes)
    assert abs(sum(math.log(v) for v in strength.values())) < 1e-9
    cycle = fitted_scores("ABC", [("A", "B", "A"), ("B", "C", "B"), ("C", "A", "C")])
    assert len(set(cycle.values())) == 1


def test_position_bias_is_degenerate() -> None:
    first = [("A", "B", "A"), ("C", "A", "C"), ("B", "C", "B")]
    assert position_bias(first) == "every comparison chose the card shown first"
    second = [(a, b, b) for a, b, _ in first]
    assert position_bias(second) == "every comparison chose the card shown second"
    assert position_bias([("A", "B", "A"), ("C", "A", "A"), ("B", "C", "B")]) is None
    assert position_bias(first[:1]) is None


def test_a_judge_whose_first_shown_card_wins_too_often_is_degenerate() -> None:
    """Asked both ways, a judge that follows the cards picks the first-shown card in half
    the comparisons; 11 of 12 (the share a small real model showed) fails the binomial
    rule, 9 of 12 and a consistent judge's 6 of 12 pass."""
    pairs = pair_schedule(SEED, "ABCD", "warm")
    assert len(pairs) == 12
    rank = {"A": 0, "B": 1, "C": 2, "D": 3}
    consistent = [(a, b, min(a, b, key=rank.__getitem__)) for a, b in pairs]
    assert sum(o[2] == o[0] for o in consistent) == 6 and position_bias(consistent) is None

    def first_wins(k: int) -> list[tuple[str, str, str]]:
        return [(a, b, a if n < k else b) for n, (a, b) in enumerate(pairs)]

    why = position_bias(first_wins(11))
    assert why is not None and "card shown first won 11 of 12" in why and "p=0.006" in why
    assert position_bias(first_wins(10)) is not None  # p = 0.039
    assert position_bias(first_wins(9)) is None  # p = 0.146
    why = position_bias([(a, b, b if n else a) for n, (a, b) in enumerate(pairs)])
    assert why is not None and "card shown second won 11 of 12" in why
    assert binomial_two_sided(6, 6) == binomial_two_sided(0, 6) == 1 / 32
    assert binomial_two_sided(3, 6) == 1.0


async def test_a_mostly_first_shown_pairwise_judge_is_degenerate_with_the_reason(
    tmp_path: Path,
) -> None:
    """A fake judge that picks the first-shown card except in one comparison per round is
    ``degenerate``; its record keeps every comparison and the reason."""
    seen: list[str] = []

    def fn(request: TextRequest) -> str | TextReply:
        if role(request) == "idea_comparison":
            assert request.json_schema is not None
            first, second = request.json_schema.schema["properties"]["better"]["enum"]
            seen.append(first)
            return json.dumps({"better": second if len(seen) == 1 else first})
        return scoring_answer(request)

    cfg = make_cfg(
        tmp_path,
        "prompt.scoring.enabled=true",
        "prompt.scoring.num_ideas=4",
        "prompt.scoring.judges=[{id: strict}, {id: warm, protocol: pairwise}, {id: novel}]",
    )
    await run_generation(cfg, backends(FunctionTextBackend(fn)))
    judges = {j["id"]: j for j in transcript(tmp_path)["blackbox_scoring"]["judges"]}
    warm = judges["warm"]
    n = len(warm["order"])
    assert n == 4 and len(warm["comparisons"]) == 12
    first = sum(1 for a, _, w in warm["comparisons"] if w == a)
    assert first == 11
    assert warm["status"] == "degenerate" and "card shown first won 11 of 12" in warm["error"]
    assert judges["strict"]["status"] == judges["novel"]["status"] == "ok"


async def test_an_offline_pairwise_judge_orders_cards_like_its_list_self(
    tmp_path: Path,
) -> None:
    """The offline rubric judge picks the card its rubric scores higher, so its fitted
    order agrees with its own list scores on every clear difference."""

    async def go(protocol: str, where: Path) -> dict[str, Any]:
        cfg = make_cfg(
            where,
            "prompt.scoring.enabled=true",
            f"prompt.scoring.judges=[{{id: warm, rubric: profile_fit, protocol: {protocol}}}]",
        )
        await run_generation(cfg, backends(OfflineTextBackend()))
        judge: dict[str, Any] = transcript(where)["blackbox_scoring"]["judges"][0]
        return judge

    pairwise = await go("pairwise", tmp_path / "p")
    listed = await go("list", tmp_path / "l")
    assert pairwise["status"] == "ok" and pairwise["protocol"] == "pairwise"
    n = len(pairwise["order"])
    assert pairwise["attempts"] == len(pairwise["comparisons"]) == n * (n - 1)
    for first, second, winner in pairwise["comparisons"]:
        assert winner in (first, second)
    a, b = pairwise["scores"], listed["scores"]
    for x in a:
        for y in a:
            if b[x] >= b[y] + 10:
                assert a[x] > a[y], (x, y, a, b)


async def test_pairwise_comparisons_that_follow_the_position_are_degenerate(
    tmp_path: Path,
) -> None:
    def fn(request: TextRequest) -> str | TextReply:
        if role(request) == "idea_comparison":
            assert request.json_schema is not None
            first = request.json_schema.schema["properties"]["better"]["enum"][0]
            return json.dumps({"better": first})
        return scoring_answer(request)

    text = FunctionTextBackend(fn)
    cfg = make_cfg(
        tmp_path,
        "prompt.scoring.enabled=true",
        "prompt.scoring.judges=[{id: strict}, {id: warm, protocol: pairwise}, {id: novel}]",
    )
    await run_generation(cfg, backends(text))
    judges = {j["id"]: j for j in transcript(tmp_path)["blackbox_scoring"]["judges"]}
    warm = judges["warm"]
    assert warm["status"] == "degenerate" and "card shown first" in warm["error"]
    pairs = [r for r in text.requests if role(r) == "idea_comparison"]
    n = len(warm["order"])
    assert len(pairs) == n * (n - 1)
    assert {r.max_output_tokens for r in pairs} == {200}


def test_each_protocol_has_its_own_instruction_and_list_keeps_the_old_one() -> None:
    strict = RubricSpec(name="strict")
    listed = judge_system_prompt(strict)
    assert judge_system_prompt(strict, "list") == listed == judge_system_prompt(strict, "pointwise")
    reasoned = judge_system_prompt(strict, "reasoned")
    assert "rationale" in reasoned and "no explanation" not in reasoned
    assert '"better"' in judge_system_prompt(strict, "pairwise")
    # The rubric itself is the same under every protocol.
    rubric = listed.split("\n\n", 1)[1]
    assert all(judge_system_prompt(strict, p).endswith(rubric) for p in ("reasoned", "pairwise"))


# ------------------------------------------------------------------------------ logprobs


Part = tuple[str, float, tuple[tuple[str, float], ...]]


def tokens(*parts: Part) -> tuple[TokenLogprobs, ...]:
    return tuple(TokenLogprobs(token=t, logprob=lp, top=top) for t, lp, top in parts)


def test_the_expected_score_weighs_the_first_digit_tokens_alternatives() -> None:
    text = '{"scores": {"A": 85, "B": 7}}'
    # One digit per token (Qwen, Llama 3): the tens digit's alternatives are weighed, the
    # units digit kept as sampled ("85": 8 -> 85, 9 -> 95; "x" is not a digit).
    split = tokens(
        ('{"scores": {"A": ', 0.0, ()),
        ("8", math.log(0.5), (("8", math.log(0.5)), ("9", math.log(0.25)), ("x", math.log(0.25)))),
        ("5", 0.0, ()),
        (', "B": ', 0.0, ()),
        ("7", math.log(0.6), (("7", math.log(0.6)), ("3", math.log(0.2)))),
        ("}}", 0.0, ()),
    )
    weighted = expected_scores(text, split, {"A": 85, "B": 7})
    assert isinstance(weighted, Weighted) and weighted.kept == ()
    assert weighted.scores == {"A": round((85 * 0.5 + 95 * 0.25) / 0.75), "B": 6}
    # A score in one token (OpenAI's tokenizers), with a leading space inside the token.
    whole = tokens(
        ('{"scores": {"A":', 0.0, ()),
        (" 85", math.log(0.7), ((" 85", math.log(0.7)), (" 60", math.log(0.3)), ("85", -1.0))),
        (', "B": 7}}', 0.0, ()),
    )
    weighted = expected_scores('{"scores": {"A": 85, "B": 7}}', whole, {"A": 85, "B": 7})
    assert isinstance(weighted, Weighted)
    # B's digit shares a token with the closing braces and has no alternatives: as sampled.
    assert weighted.scores == {"A": round(85 * 0.7 + 60 * 0.3), "B": 7}


def test_a_sampled_zero_reads_its_alternative_digits_as_tens() -> None:
    """After a leading 0 JSON allows no digit, so a sampled 0 does not show how long the
    alternatives' scores are: a digit 1-9 in its place is a tens digit (7 -> 70), while a
    sampled 7 keeps its one-digit alternatives (3 -> 3)."""
    text = '{"scores": {"A": 0, "B": 7}}'
    split = tokens(
        ('{"scores": {"A": ', 0.0, ()),
        ("0", math.log(0.4), (("0", math.log(0.4)), ("7", math.log(0.4)), ("1", math.log(0.2)))),
        (', "B": ', 0.0, ()),
        ("7", math.log(0.6), (("7", math.log(0.6)), ("3", math.log(0.2)))),
        ("}}", 0.0, ()),
    )
    weighted = expected_scores(text, split, {"A": 0, "B": 7})
    assert isinstance(weighted, Weighted)
    assert weighted.scores == {"A": round(0 * 0.4 + 70 * 0.4 + 10 * 0.2), "B": 6}


def test_without_usable_logprobs_the_sampled_scores_stay_and_it_says_why() -> None:
    assert expected_scores('{"scores": {"A": 85}}', None, {"A": 85}) == NO_LOGPROBS
    wrong = tokens(("something else", 0.0, ()))
    assert "do not spell" in str(expected_scores('{"scores": {"A": 85}}', wrong, {"A": 85}))


async def test_a_logprobs_judge_asks_for_them_and_records_the_weighted_scores(
    tmp_path: Path,
) -> None:
    def fn(request: TextRequest) -> str | TextReply:
        if role(request) == "idea_scores" and request.top_logprobs is not None:
            ids = card_ids(request)
            parts: list[Part] = [('{"scores": {', 0.0, ())]
            for n, i in enumerate(ids):
                tens = str(2 + n)
                top = ((tens, math.log(0.5)), (str(3 + n), math.log(0.5)))
                parts += [(f'"{i}": ', 0.0, ()), (tens, math.log(0.5), top), ("0", 0.0, ())]
                parts += [(", " if n < len(ids) - 1 else "", 0.0, ())]
            parts.append(("}}", 0.0, ()))
            text = "".join(p[0] for p in parts)
            wire = tuple(TokenLogprob(t, lp, top) for t, lp, top in parts)
            return TextReply(text=text, model="fake", logprobs=wire)
        return scoring_answer(request)

    text = FunctionTextBackend(fn)
    cfg = make_cfg(
        tmp_path,
        "prompt.scoring.enabled=true",
        "prompt.scoring.judges=[{id: strict, protocol: logprobs}, {id: warm}, {id: novel}]",
    )
    await run_generation(cfg, backends(text))
    judges = [r for r in text.requests if role(r) == "idea_scores"]
    assert sorted(str(r.top_logprobs) for r in judges) == ["10", "None", "None"]
    data = transcript(tmp_path)
    strict = data["blackbox_scoring"]["judges"][0]
    assert strict["protocol"] == "logprobs" and "warning" not in strict
    # 20 or 30 at even odds for the first card: 25; the next: 35, ...
    assert [strict["scores"][i] for i in strict["order"]] == [
        25 + 10 * n for n in range(len(strict["order"]))
    ]
    step = next(s for s in data["steps"] if s["name"] == "strict")
    assert step["params"]["top_logprobs"] == 10 and step["logprobs"]
    others = [s for s in data["steps"] if s["name"] != "strict"]
    assert all("logprobs" not in s and "top_logprobs" not in s.get("params", {}) for s in others)


def test_an_offline_logprobs_judge_falls_back_loudly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    code = main(
        [
            "--config",
            str(config),
            "--offline",
            "--prompt-only",
            "--set",
            "prompt.scoring.enabled=true",
            "--set",
            "prompt.scoring.judges=[{id: strict, rubric: strict, protocol: logprobs}]",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert f"judge strict: logprobs: {NO_LOGPROBS}" in captured.out
    (path,) = (tmp_path / "out" / "logs").glob("*_transcript.json")
    judge = json.loads(path.read_text(encoding="utf-8"))["blackbox_scoring"]["judges"][0]
    assert judge["status"] == "ok" and judge["warning"] == f"logprobs: {NO_LOGPROBS}"


async def test_a_logprobs_judge_is_gated_on_its_weighted_scores(tmp_path: Path) -> None:
    """Every card sampled 80, but the tens digit's alternatives differ per card: the weighted
    scores tell the cards apart (ok). Without logprobs the same answer is degenerate, and
    not re-asked (the gate runs after the call)."""

    def answer(with_logprobs: bool) -> Callable[[TextRequest], str | TextReply]:
        def fn(request: TextRequest) -> str | TextReply:
            if role(request) != "idea_scores" or request.top_logprobs is None:
                return scoring_answer(request)
            ids = card_ids(request)
            parts: list[Part] = [('{"scores": {', 0.0, ())]
            for n, i in enumerate(ids):
                top = (("8", math.log(0.5)), (str(n + 1), math.log(0.5)))
                parts += [(f'"{i}": ', 0.0, ()), ("8", math.log(0.5), top), ("0", 0.0, ())]
                parts += [(", " if n < len(ids) - 1 else "", 0.0, ())]
            parts.append(("}}", 0.0, ()))
            text = "".join(p[0] for p in parts)
            wire = tuple(TokenLogprob(t, lp, top) for t, lp, top in parts)
            return TextReply(text=text, model="fake", logprobs=wire if with_logprobs else None)

        return fn

    panel = "prompt.scoring.judges=[{id: strict, protocol: logprobs}, {id: warm}, {id: novel}]"
    for with_logprobs, where in ((True, tmp_path / "with"), (False, tmp_path / "without")):
        text = FunctionTextBackend(answer(with_logprobs))
        cfg = make_cfg(where, "prompt.scoring.enabled=true", panel)
        await run_generation(cfg, backends(text))
        strict = transcript(where)["blackbox_scoring"]["judges"][0]
        asked = [r for r in text.requests if r.top_logprobs is not None]
        assert len(asked) == 1
        if with_logprobs:
            assert strict["status"] == "ok"
            expected = [round((80 + 10 * (n + 1)) / 2) for n in range(len(strict["order"]))]
            assert [strict["scores"][i] for i in strict["order"]] == expected
        else:
            assert strict["status"] == "degenerate"
            assert "every card got the same score" in strict["error"]
            assert NO_LOGPROBS in strict["error"]


@pytest.mark.parametrize("protocol", ["list", "reasoned", "pointwise", "pairwise", "logprobs"])
async def test_under_every_protocol_degenerate_judges_count_against_the_quorum(
    tmp_path: Path, protocol: str
) -> None:
    """Two of three judges answer without judgement (every card 50; every comparison the
    card shown first): under each protocol they end ``degenerate`` and the run fails at the
    quorum, naming every judge's status."""
    novel = derive_seed(SEED, "step", "judge", "novel")

    def fn(request: TextRequest) -> str | TextReply:
        kind = role(request)
        if request.seed == novel or kind not in ("idea_scores", "idea_comparison"):
            return scoring_answer(request)
        assert request.json_schema is not None
        if kind == "idea_comparison":
            return json.dumps(
                {"better": request.json_schema.schema["properties"]["better"]["enum"][0]}
            )
        if is_reasoned(request):
            return json.dumps(
                {"scores": {i: {"rationale": "fine", "score": 50} for i in card_ids(request)}}
            )
        return json.dumps({"scores": dict.fromkeys(card_ids(request), 50)})

    cfg = make_cfg(
        tmp_path,
        "prompt.scoring.enabled=true",
        f"prompt.scoring.judge_protocol={protocol}",
        "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel, protocol: list}]",
    )
    with pytest.raises(RunFailed) as caught:
        await run_generation(cfg, backends(FunctionTextBackend(fn)))
    message = caught.value.error.message
    assert "strict=degenerate, warm=degenerate, novel=ok" in message, message


def test_a_logprobs_judge_on_a_reasoning_model_stops_before_any_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused at pre-flight (exit 2, the judge and the model named), so no run finds out
    mid-way; the base URL is a closed port that no call could reach."""
    config = write_config(tmp_path)
    code = main(
        [
            "--config",
            str(config),
            "--prompt-only",
            "--set",
            "backend.provider=openai",
            "--set",
            "backend.base_url=http://127.0.0.1:9/v1",
            "--set",
            "prompt.scoring.enabled=true",
            "--set",
            "prompt.scoring.judges=[{id: warm}, {id: strict, model: o3-mini, protocol: logprobs}]",
        ],
    )
    captured = capsys.readouterr()
    assert code == 2
    assert "prompt.scoring.judges[1].protocol" in captured.err
    assert "judge 'strict'" in captured.err and "'o3-mini'" in captured.err
    assert not list((tmp_path / "out").rglob("*_transcript.json"))
