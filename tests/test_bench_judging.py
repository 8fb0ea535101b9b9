"""The judging bench (bench/judging.py) and its planted-defect set (bench/planted_defects.py).

Fast tests: the data set is what the bench says it is (every card the product's card type,
through its gates; one sound card and each defect once per round; the file is what its seed
makes), the maths (Wilson interval, top-1, catch rates, quorum failures) and the whole bench
path through the product's judge panel, with a fake judge. The slow test runs ``--quick``
against a real llama-server on 127.0.0.1 and skips when the binary or the model is absent.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from image_project.backends.base import TextRequest
from image_project.errors import ConfigError
from image_project.stages.profile import avoid_list, load_profile
from image_project.stages.scoring.cards import CARD_OUTPUT
from image_project.testing import FunctionTextBackend, last_user_text
from tests.support.openai_server import OpenAIServer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "scripts"))

import judging  # noqa: E402
import planted_defects  # noqa: E402

DATA = json.loads(planted_defects.DATA.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- the data set
def test_the_data_file_is_what_its_seed_makes() -> None:
    made = planted_defects.render(planted_defects.generate(DATA["seed"], len(DATA["rounds"])))
    assert made == planted_defects.DATA.read_text(encoding="utf-8")


def test_every_card_passes_the_products_card_schema_and_gates() -> None:
    for r in DATA["rounds"]:
        for entry in r["cards"]:
            card = CARD_OUTPUT.parse(json.dumps(entry["card"]))
            assert card.hook and card.narrative, (r["round"], entry["defect"])


def test_each_round_has_one_sound_card_and_every_defect_once() -> None:
    assert len(DATA["rounds"]) >= 20
    for r in DATA["rounds"]:
        labels = [c["defect"] for c in r["cards"]]
        assert labels.count("none") == 1, r["round"]
        assert sorted(x for x in labels if x != "none") == sorted(DATA["defects"]), r["round"]
    assert set(DATA["defects"]) == {
        "disliked_motif",
        "concept_contradicted",
        "incoherent_narrative",
        "near_duplicate",
        "off_profile_style",
    }


def test_defects_name_the_profiles_dislikes_and_the_rounds_concepts() -> None:
    dislikes = set(avoid_list(load_profile(REPO / DATA["profile"])))
    with (REPO / DATA["categories"]).open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    concepts = {cell for row in rows for cell in row.values()}
    subjects = set()
    for r in DATA["rounds"]:
        assert set(r["concepts"]) <= concepts
        subjects.add(r["concepts"][0])
        by = {c["defect"]: c for c in r["cards"]}
        assert by["disliked_motif"]["detail"] in dislikes
        assert by["concept_contradicted"]["detail"] in r["concepts"]
        sound = by["none"]["card"]
        assert not any(d.lower() in json.dumps(sound).lower() for d in ("clown", "spider"))
    assert subjects == {row["Subject Matter"] for row in rows}  # every subject, in cycle
    assert [r["concepts"][0] for r in DATA["rounds"][: len(rows)]] == [
        row["Subject Matter"] for row in rows
    ]


# --------------------------------------------------------------------------- the maths
@pytest.mark.parametrize(
    ("k", "n", "lo", "hi"),
    [(5, 10, 0.2366, 0.7634), (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (1, 6, 0.0301, 0.5635)],
)
def test_the_wilson_interval_matches_known_values(k: int, n: int, lo: float, hi: float) -> None:
    got = judging.wilson(k, n)
    assert got == pytest.approx((lo, hi), abs=5e-4)


def test_no_trials_is_the_whole_interval() -> None:
    assert judging.wilson(0, 0) == (0.0, 1.0)
    assert judging.Rate(0, 0).as_json()["rate"] is None


def test_summaries_count_quorum_failures_as_misses() -> None:
    rows = [
        {"status": "ok", "top1": True, "caught": {"a": True, "b": False}},
        {"status": "ok", "top1": False, "caught": {"a": True, "b": True}},
        {"status": "quorum_failed", "top1": False, "caught": {}},
    ]
    s = judging.summarise(rows, ["a", "b"])
    assert s["rounds"] == 3 and s["quorum_failed"] == 1
    assert (s["top1"]["k"], s["top1"]["n"]) == (1, 3)
    assert (s["caught"]["a"]["k"], s["caught"]["b"]["k"]) == (2, 1)
    assert s["top1"]["lo"] < 1 / 3 < s["top1"]["hi"]


def test_the_card_order_is_seeded_and_differs_between_rounds() -> None:
    r0 = DATA["rounds"][0]
    assert judging.shuffled_round(36, 0, r0)[2] == judging.shuffled_round(36, 0, r0)[2]
    sound = [
        next(i for i, d in judging.shuffled_round(36, k, r)[2].items() if d == "none")
        for k, r in enumerate(DATA["rounds"])
    ]
    assert len(set(sound)) >= 3, sound  # the sound card does not sit at one id


# --------------------------------------------------------------------------- the bench path
CARD_LINE = re.compile(r'^\{"id": .*\}$', re.MULTILINE)


def _fake_judge(quality: dict[str, int], *, flat: bool = False) -> FunctionTextBackend:
    """A judge that reads the cards of each request and scores each by its hook in
    ``quality`` (every card the same with ``flat``), in the form the request's schema asks."""

    def answer(request: TextRequest) -> str:
        shown = [json.loads(line) for line in CARD_LINE.findall(last_user_text(request))]
        scores = {c["id"]: 50 if flat else quality[c["hook"]] for c in shown}
        schema = json.dumps(request.json_schema.schema if request.json_schema else {})
        if "better" in schema:
            return json.dumps({"better": max(scores, key=lambda i: scores[i])})
        if "rationale" in schema:
            return json.dumps(
                {
                    "scores": {
                        i: {"rationale": "reads the card", "score": s} for i, s in scores.items()
                    }
                }
            )
        return json.dumps({"scores": scores})

    return FunctionTextBackend(answer, default_model="fake-judge")


def _quality(round_data: dict[str, Any], best: str = "none") -> dict[str, int]:
    ranks = {"none": 90, "near_duplicate": 80, "off_profile_style": 60, "disliked_motif": 40,
             "concept_contradicted": 30, "incoherent_narrative": 10}  # fmt: skip
    if best != "none":
        ranks[best], ranks["none"] = ranks["none"], ranks[best]
    return {c["card"]["hook"]: ranks[c["defect"]] for c in round_data["cards"]}


def _config(protocol: str) -> Any:
    urls = {"instruct": "http://127.0.0.1:9/v1", "base": "http://127.0.0.1:9/v1"}
    models = {"instruct": "fake-judge", "base": "fake-judge"}
    return judging.config_for(protocol, urls, models, 60.0)


async def _round(protocol: str, fake: FunctionTextBackend, index: int = 0) -> dict[str, Any]:
    r = DATA["rounds"][index]
    return await judging.run_round(
        _config(protocol), fake, {}, protocol, 36, index, r, REPO / DATA["profile"]
    )


@pytest.mark.anyio
@pytest.mark.parametrize("protocol", judging.PROTOCOLS)
async def test_a_judge_that_knows_the_defects_ranks_the_sound_card_first(protocol: str) -> None:
    """Through the product's panel under every protocol: top-1 and every catch."""
    fake = _fake_judge(_quality(DATA["rounds"][0]))
    row = await _round(protocol, fake)
    assert set(row["panels"]) == set(judging.PANELS)
    for name, outcome in row["panels"].items():
        assert outcome["status"] == "ok", (name, outcome)
        assert outcome["top1"] is True
        assert all(outcome["caught"].values()), outcome["caught"]
        assert set(outcome["caught"]) == set(DATA["defects"])
    assert {j["status"] for j in row["judges"]} == {"ok"}
    expected_calls = {"pointwise": 4 * 6, "pairwise": 4 * 30}.get(protocol, 4)
    assert row["calls"] == len(fake.requests) == expected_calls


@pytest.mark.anyio
async def test_a_judge_that_prefers_a_defect_misses_top1_and_that_catch() -> None:
    fake = _fake_judge(_quality(DATA["rounds"][2], best="disliked_motif"))
    row = await _round("list", fake, 2)
    outcome = row["panels"]["panel of 3"]
    assert outcome["top1"] is False
    assert outcome["caught"]["disliked_motif"] is False
    assert outcome["caught"]["incoherent_narrative"] is True
    assert row["ids"][outcome["ranking"][0]] == "disliked_motif"


@pytest.mark.anyio
async def test_degenerate_judges_fail_the_quorum_and_are_counted() -> None:
    fake = _fake_judge({}, flat=True)
    row = await _round("list", fake)
    assert {j["status"] for j in row["judges"]} == {"degenerate"}
    assert all(p["status"] == "quorum_failed" and not p["top1"] for p in row["panels"].values())
    rep = judging.report([row], DATA["defects"])["list"]
    assert rep["judge_statuses"]["strict"] == {"degenerate": 1}
    assert rep["panels"]["panel of 3"]["quorum_failed"] == 1
    assert rep["panels"]["panel of 3"]["top1"]["k"] == 0


@pytest.mark.anyio
async def test_logprobs_without_log_probabilities_is_a_counted_fallback() -> None:
    row = await _round("logprobs", _fake_judge(_quality(DATA["rounds"][0])))
    rep = judging.report([row], DATA["defects"])["logprobs"]
    assert rep["logprobs_fallbacks"] == 4  # every judge said so; none silently


@pytest.mark.anyio
async def test_a_tie_with_the_sound_card_is_no_catch() -> None:
    """The near-duplicate scored exactly as the sound card by every judge is not caught."""
    quality = _quality(DATA["rounds"][0])
    sound = next(c["card"]["hook"] for c in DATA["rounds"][0]["cards"] if c["defect"] == "none")
    copy = next(
        c["card"]["hook"] for c in DATA["rounds"][0]["cards"] if c["defect"] == "near_duplicate"
    )
    quality[copy] = quality[sound]
    row = await _round("list", _fake_judge(quality))
    for outcome in row["panels"].values():
        assert outcome["status"] == "ok"
        assert outcome["caught"]["near_duplicate"] is False
        assert all(v for d, v in outcome["caught"].items() if d != "near_duplicate")


@pytest.mark.anyio
async def test_each_judge_sees_its_own_order_and_logprobs_sends_the_list_prompts() -> None:
    """Every judge of a round is shown the six cards in its own seeded order, as in a run,
    and a ``logprobs`` round sends exactly the prompts of the ``list`` round (so a server's
    prompt cache answers it), plus the request for log-probabilities."""
    quality = _quality(DATA["rounds"][0])
    as_list, as_logprobs = _fake_judge(quality), _fake_judge(quality)
    await _round("list", as_list)
    await _round("logprobs", as_logprobs)

    def prompts(fake: FunctionTextBackend) -> list[tuple[tuple[str, str], ...]]:
        return sorted(tuple((m.role, m.content) for m in r.messages) for r in fake.requests)

    assert len(as_list.requests) == 4 and prompts(as_list) == prompts(as_logprobs)
    assert {r.top_logprobs for r in as_list.requests} == {None}
    assert {r.top_logprobs for r in as_logprobs.requests} == {10}
    orders = [
        tuple(json.loads(line)["id"] for line in CARD_LINE.findall(last_user_text(r)))
        for r in as_list.requests
    ]
    assert all(sorted(order) == list("ABCDEF") for order in orders)
    assert len(set(orders)) > 1, orders


def _verdict_doc(intervals: dict[str, tuple[float, float]], ok_share: float) -> dict[str, Any]:
    """A bench JSON with the panel-of-3 top-1 interval of each protocol and every judge of
    the first protocol ``ok`` in ``ok_share`` of its 20 judge-rounds (the others always)."""
    protocols: dict[str, Any] = {}
    for i, (name, (lo, hi)) in enumerate(intervals.items()):
        ok = round(20 * ok_share) if i == 0 else 20
        protocols[name] = {
            "panels": {judging.VERDICT_PANEL: {"top1": {"k": 5, "n": 20, "lo": lo, "hi": hi}}},
            "judge_statuses": {"strict": {"ok": ok, "degenerate": 20 - ok}},
        }
    return {"chance": 1 / 6, "protocols": protocols}


@pytest.mark.parametrize(
    ("intervals", "ok_share", "recommended"),
    [
        # wholly above every other protocol's interval, judges usable in 90 %: the default
        ({"pointwise": (0.6, 0.9), "list": (0.1, 0.4), "reasoned": (0.2, 0.5)}, 0.9, "pointwise"),
        # the same with judges usable in 85 % of their rounds: list stays
        ({"pointwise": (0.6, 0.9), "list": (0.1, 0.4), "reasoned": (0.2, 0.5)}, 0.85, "list"),
        # above one protocol but overlapping another: list stays
        ({"pointwise": (0.45, 0.9), "list": (0.1, 0.4), "reasoned": (0.2, 0.5)}, 1.0, "list"),
    ],
)
def test_the_verdict_names_a_protocol_only_by_its_fixed_rule(
    intervals: dict[str, tuple[float, float]], ok_share: float, recommended: str
) -> None:
    text = judging.verdict(_verdict_doc(intervals, ok_share))
    expected = "keep `list`" if recommended == "list" else f"`{recommended}`"
    assert f"**Recommendation: {expected}**" in text


@pytest.mark.anyio
async def test_the_json_is_rewritten_after_every_protocols_round(
    tmp_path: Path, allow_loopback: None
) -> None:
    """A run stopped after its first protocol-round (here by an unknown protocol next in
    ``--protocols``) leaves a JSON with that round and its figures, on the fake OpenAI server
    on 127.0.0.1."""
    out = tmp_path / "judging.json"
    args = judging.parse_args(["--rounds", "1", "--protocols", "list,nope", "--json", str(out)])
    with OpenAIServer(offline=True) as server:
        servers = judging.Servers(
            urls={"instruct": server.base_url, "base": server.base_url},
            models={"instruct": "fake-judge", "base": "fake-judge"},
            speed={"instruct": {"decode_tok_s": 100.0, "prompt_tok_s": 1000.0}},
        )
        doc: dict[str, Any] = {"settings": {}, "round_results": []}
        with pytest.raises(ConfigError):
            await judging.bench(args, servers, doc)
    written = json.loads(out.read_text(encoding="utf-8"))
    assert [(r["protocol"], r["round"]) for r in written["round_results"]] == [("list", 0)]
    assert list(written["protocols"]) == ["list"]


def test_the_call_timeout_scales_with_the_measured_speed() -> None:
    slow = judging.timeout_for({"decode_tok_s": 5.0, "prompt_tok_s": 20.0}, 780)
    fast = judging.timeout_for({"decode_tok_s": 50.0, "prompt_tok_s": 400.0}, 780)
    assert slow is not None and fast is not None and slow > 5 * fast
    assert fast >= judging.TIMEOUT_MIN_S
    assert judging.timeout_for({"error": "no server"}, 780) is None


# --------------------------------------------------------------------------- a real model
def _real_model_missing() -> str | None:
    from real_model_io import MODELS, binary_path, find_binary

    if find_binary() is None:
        return f"no llama-server binary at {binary_path()} (set $LLAMA_SERVER)"
    if not MODELS["instruct"].file.is_file():
        return (
            f"no instruct model at {MODELS['instruct'].file} (scripts/real-model-check fetches it)"
        )
    return None


@pytest.mark.slow
@pytest.mark.timeout(3600)  # a hang guard only: the bench's call limits come from its probe
def test_quick_bench_on_a_real_model(tmp_path: Path, allow_loopback: None) -> None:
    """``bench/judging.py --quick``: llama-server on 127.0.0.1 (started and stopped by the
    bench), the instruct model, 2 rounds of ``list``; every judge ends with a known status
    and the figures are written with their provenance."""
    missing = _real_model_missing()
    if missing:
        pytest.skip(missing)
    out = tmp_path / "judging.json"
    assert judging.main(["--quick", "--json", str(out)]) == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["measured"]["commit"] and doc["server_speed"]["instruct"]["decode_tok_s"] > 0
    assert [r["round"] for r in doc["round_results"]] == [0, 1]
    for r in doc["round_results"]:
        assert {j["status"] for j in r["judges"]} <= {"ok", *judging.FAILED}
        assert r["calls"] >= 3
    figures = doc["protocols"]["list"]["panels"]
    assert set(figures) == {"one judge", "panel of 3"}
    assert figures["panel of 3"]["top1"]["n"] == 2
