"""The leak detector: canaries planted in everything a generator must never see, and every
generator-side request of a run scanned for them on the wire.

Each mode runs the real CLI in-process with the OpenAI adapter against the fake OpenAI
server of :mod:`image_project.testing`. The offline backend answers every generator call;
the judges and the LLM selector answer with canaries: unique strings, and unique numbers
that occur in nothing a generator may legitimately read. Every request the server received
is classified by the product's own system prompts and schema names (:func:`kind_of`; an
unknown request fails the test): the judges and the selector may see scores and judge
text; every other call is generator-side (the dislike rewrite, the profile abstraction, the
idea cards, the variants, the final-prompt and image-prompt stages with their ToT enclave,
the title, the image request) and is scanned for:

* **judge text**: a judge id, a rubric (a custom rubric's canary, each line of the built-in
  rubrics), a judge's system prompt, a ``reasoned`` judge's rationale;
* **scores, and anything computed from them**: a generator-side request may hold no number
  (a run of digits) that its legitimate inputs do not, namely the fixed text of the modules
  that write generator prompts (:data:`PROMPT_WRITERS`), the concepts, the answers of
  generator-side calls (hints, cards, drafts, titles) and, for the calls that read the raw
  profile by design, the profile. The judges' scores are numbers none of those hold, so a
  score, a median, a normalised or weighted aggregate, a spread, a pairwise fit or a
  log-probability-weighted score shows up as an extra number (``(86/100)`` gives ``86``);
* **the selector's and the survivors' words**: the LLM selector's reasons and summary
  (canaries), and every survivor reason in the record (the code's, which quote judge ids
  and scores);
* **raw likes**: every taste item (loves, likes, notes) carries a canary word, one of them a
  canary number. The profile abstraction, the judges and the final-prompt stages (with the
  title and image written from them) read the raw profile by design; nothing downstream of
  the hints (an idea card, a variant), nor the dislike rewrite, may hold a taste item.

Modes: one round; three rounds with the code selector and with the LLM selector; rounds
without the profile abstraction; rounds under each judging protocol the config accepts; a
batch of two runs. A rank written as a small ordinal (``1st``) looks like the templates'
own numbers and is not told apart; every judge score and aggregate is.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, get_args

import pytest

from image_project import markers
from image_project._fake_openai import OpenAIServer, RecordedRequest, chat_completion
from image_project.cli.command import main
from image_project.config.models import JudgeProtocol
from image_project.stages import standard, title
from image_project.stages.scoring import cards, evolution, hints, prompts
from image_project.stages.scoring.rubrics import BUILTIN_RUBRIC_TEXTS

REPO = Path(__file__).resolve().parents[1]
CONCEPTS = REPO / "config" / "categories.csv"

# ------------------------------------------------------------------------------ canaries

SCORES = (73, 86, 91, 67, 58, 94, 79, 62, 83, 77, 69)
"""The judges' scores: numbers no template, concept or generator answer holds."""
JUDGE_IDS = ("qzjudge-kappa", "qzjudge-sigma", "qzjudge-omega")
RUBRIC_CANARY = "QZRUBRIC-word 6529"
RATIONALE_CANARY = "QZRATIONALE-word 9251"
REASON_CANARY = "QZSELREASON-word 7093"
SUMMARY_CANARY = "QZSELSUMMARY-word 8147"
LIKES_NUMBER = "4217"
TASTE = {
    "Loves": ("Qzlove-alpha tidepool lanterns at dusk",),
    "Likes": (
        "Qzlike-beta copper weathervanes on barns",
        f"Qzlike-gamma ferry timetables from {LIKES_NUMBER}",
    ),
    "Notes": ("Qznote-delta prefers kelp-green skies",),
}
DISLIKES = ("Clowns", "Gore or anything gruesome")
CANARY_NUMBERS = frozenset({*map(str, SCORES), "6529", "9251", "7093", "8147", LIKES_NUMBER})
HINTS_ANSWER = {"adjectives": ["quiet", "tactile", "airy", "weathered"], "avoid": ["no gore"]}

PROMPT_WRITERS: tuple[ModuleType, ...] = (standard, title, prompts, cards, evolution, hints)
"""The modules whose fixed text (templates, directions, directives, gate and re-ask wording)
generator-side requests are written from: a number in their source is a template number. A
generator prompt that gains a fixed number from another module fails here naming the
number; add that module."""

# ------------------------------------------------------------------------------ the modes

SHAPE = (
    "prompt.scoring.num_ideas=4",
    "prompt.scoring.evolution.survivors=2",
    "prompt.scoring.evolution.variants_per_survivor=2",
)
ROUNDS = ("prompt.scoring.evolution.enabled=true", "prompt.scoring.evolution.generations=2")
LLM = ("prompt.scoring.evolution.selector=llm",)
PROTOCOLS: tuple[str, ...] = get_args(JudgeProtocol)
MODES: dict[str, tuple[str, ...]] = {
    "one_round": ("prompt.refinement=per_stage",),
    "rounds_code_selector": ROUNDS,
    "rounds_llm_selector": (*ROUNDS, *LLM),
    "rounds_without_hints": (*ROUNDS, "prompt.scoring.generator_profile_abstraction=false"),
    **{
        f"rounds_protocol_{p}": (
            "prompt.scoring.evolution.enabled=true",
            "prompt.scoring.evolution.generations=1",
            f"prompt.scoring.judge_protocol={p}",
        )
        for p in PROTOCOLS
    },
    "batch": (*ROUNDS, *LLM, "run.runs=2"),
}

# ------------------------------------------------------------------------------ the server


def _score(seed: int, card_id: str) -> int:
    return SCORES[(seed + sum(map(ord, card_id))) % len(SCORES)]


def _schema(request: RecordedRequest) -> dict[str, Any]:
    schema: dict[str, Any] = request.body["response_format"]["json_schema"]["schema"]
    return schema


class CanaryServer(OpenAIServer):
    """The fake server whose judges and LLM selector answer with canaries and whose hints
    are fixed; the offline backend answers every other call. Keeps every chat answer."""

    def __init__(self) -> None:
        super().__init__(offline=True, offline_model_error=0.0)
        self.answers: list[tuple[RecordedRequest, str]] = []

    async def default_answer(self, request: RecordedRequest) -> tuple[int, Any]:
        status, payload = await self._answer(request)
        if request.route.endswith("/chat/completions") and status == 200:
            self.answers.append((request, payload["choices"][0]["message"]["content"] or ""))
        return status, payload

    async def _answer(self, request: RecordedRequest) -> tuple[int, Any]:
        name = request.schema_name
        if name == "idea_scores":
            return 200, _judge(request)
        if name == "idea_comparison":
            pair = _schema(request)["properties"]["better"]["enum"]
            better = max(pair, key=lambda i: sum(map(ord, i)))  # consistent, either order
            return 200, chat_completion(json.dumps({"better": better}))
        if name == evolution.SELECTOR_SCHEMA:
            return 200, chat_completion(_selection(request))
        if name == "generator_profile_hints":
            return 200, chat_completion(json.dumps(HINTS_ANSWER))
        return await super().default_answer(request)


def _judge(request: RecordedRequest) -> dict[str, Any]:
    """Canary scores (and, to a ``reasoned`` judge, canary rationales); to a ``logprobs``
    judge, token log-probabilities too."""
    scores_schema = _schema(request)["properties"]["scores"]
    ids: list[str] = scores_schema["required"]
    seed = request.seed or 0
    scores = {i: _score(seed, i) for i in ids}
    answer: dict[str, Any] = dict(scores)
    if scores_schema["properties"][ids[0]].get("type") == "object":
        answer = {
            i: {"rationale": f"{RATIONALE_CANARY} on {i}", "score": s} for i, s in scores.items()
        }
    text = json.dumps({"scores": answer})
    reply = chat_completion(text)
    if request.body.get("logprobs"):
        reply["choices"][0]["logprobs"] = {"content": _token_logprobs(text, seed)}
    return reply


def _token_logprobs(text: str, seed: int) -> list[dict[str, Any]]:
    """``text`` as tokens, each score one token with another canary score as its
    alternative: the weighted score is a number computed from two canaries."""
    content = []
    for n, token in enumerate(re.findall(r"\d+|\D+", text)):
        top = [{"token": token, "logprob": 0.0}]
        if token.isdigit():
            other = str(SCORES[(seed + n) % len(SCORES)])
            top = [
                {"token": token, "logprob": math.log(0.6)},
                {"token": other, "logprob": math.log(0.4)},
            ]
        content.append({"token": token, "logprob": top[0]["logprob"], "top_logprobs": top})
    return content


def _selection(request: RecordedRequest) -> str:
    """The slots filled with the candidates in the order shown, each reason and the summary
    carrying canaries (a reason names its card's hook, as the reason gate asks)."""
    user = request.body["messages"][-1]["content"]
    slots = user.rsplit(markers.SELECTOR_SLOTS, 1)[1].split("\n", 1)[0].rstrip(".").split(", ")
    rows = [json.loads(ln) for ln in user.splitlines() if ln.startswith('{"id"')]
    picks = [
        {"id": row["id"], "category": slot, "reason": f"{REASON_CANARY} {row['card']['hook']}"}
        for row, slot in zip(rows, slots, strict=False)
    ]
    return json.dumps({"selections": picks, "summary": f"{SUMMARY_CANARY} kept the boldest"})


# ------------------------------------------------------------------------------ a run


@dataclass(frozen=True)
class Observed:
    """One mode's run: what the server received and answered, the run's transcripts."""

    mode: str
    requests: list[RecordedRequest]
    answers: list[tuple[RecordedRequest, str]]
    transcripts: list[dict[str, Any]]
    profile: str


def _profile_csv() -> str:
    columns = {**TASTE, "Dislikes": DISLIKES}
    depth = max(len(v) for v in columns.values())
    rows = [",".join(columns)]
    rows += [",".join(v[i] if i < len(v) else "" for v in columns.values()) for i in range(depth)]
    return "\n".join(rows) + "\n"


def observe(mode: str, work: Path) -> Observed:
    """Run ``mode`` in ``work`` against a :class:`CanaryServer`."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    profile = work / "profile.csv"
    profile.write_text(_profile_csv(), encoding="utf-8")
    judges = [
        {"id": JUDGE_IDS[0], "rubric": {"text": f"{RUBRIC_CANARY}: weigh the craft."}},
        {"id": JUDGE_IDS[1], "rubric": "strict"},
        {"id": JUDGE_IDS[2], "rubric": "novelty_heavy"},
    ]
    with CanaryServer() as server:
        cfg = {
            "backend": {"provider": "openai", "base_url": server.base_url},
            "image": {
                "generation_path": str(work / "images"),
                "log_path": str(work / "logs"),
                "size": "256x256",
                "model": "test-image",
            },
            "prompt": {
                "categories_path": str(CONCEPTS),
                "profile_path": str(profile),
                "generations_path": str(work / "generations.csv"),
                "scoring": {"enabled": True, "judges": judges},
            },
            "store": {"enabled": False},
        }
        config = work / "config.yaml"
        config.write_text(json.dumps(cfg), encoding="utf-8")
        sets = [a for s in (*SHAPE, *MODES[mode]) for a in ("--set", s)]
        code = main(
            ["--config", str(config), "--seed", "11", "-q", *sets],
            env={"OPENAI_API_KEY": "test-key"},
            root=REPO,
        )
        assert code == 0, f"{mode}: the run exited {code}"
        requests, answers = server.requests, list(server.answers)
    transcripts = [
        json.loads(p.read_text(encoding="utf-8"))
        for p in sorted((work / "logs").glob("*_transcript.json"))
    ]
    return Observed(mode, requests, answers, transcripts, profile.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------ the scan

JUDGE_SIDE = frozenset({"judge", "selector"})
"""The calls that may see scores and judge text."""
RAW_PROFILE = frozenset({"hints", "judge", "stage", "title", "image"})
"""The calls that read the raw profile by design (the final-prompt stages and what is
written from them; the hints, which abstract it; the judges)."""


def kind_of(request: RecordedRequest) -> str:
    """What a request is, by the product's own system prompts and schema names."""
    if request.is_image:
        return "image"
    messages = request.body["messages"]
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    for prefix, kind in (
        (prompts.IDEA_SYSTEM, "idea"),
        (prompts.VARIANT_SYSTEM, "variant"),
        (prompts.SELECTOR_SYSTEM, "selector"),
        (prompts.HINTS_SYSTEM, "hints"),
        (standard.SYSTEM_PROMPT, "stage"),
        (title.TITLE_SYSTEM_PROMPT, "title"),
    ):
        if system.startswith(prefix):
            return kind
    if request.schema_name in ("idea_scores", "idea_comparison"):
        return "judge"
    if request.schema_name == "concept_rewrite":
        return "rewrite"
    raise AssertionError(
        f"an unclassified request (system prompt {system[:80]!r}, schema "
        f"{request.schema_name!r}): decide whether it is a generator and add it to kind_of"
    )


def text_of(request: RecordedRequest) -> str:
    """Every string in the request's body: the messages, the image prompt, the schema."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(request.body)
    return "\n".join(out)


def numbers(text: str) -> set[str]:
    """The runs of digits in ``text``, leading zeros dropped."""
    return {n.lstrip("0") or "0" for n in re.findall(r"\d+", text)}


def template_numbers() -> set[str]:
    found = numbers(
        "\n".join(v for n, v in vars(markers).items() if n.isupper() and isinstance(v, str))
    )
    for module in PROMPT_WRITERS:
        found |= numbers(inspect.getsource(module))
    return found


def forbidden_strings(seen: Observed) -> dict[str, str]:
    """Every judge- and selector-side string no generator-side request may hold, by what
    it is."""
    out = {
        **{f"judge id {j!r}": j for j in JUDGE_IDS},
        "the custom rubric": RUBRIC_CANARY,
        "a judge's rationale": RATIONALE_CANARY,
        "a selector reason": REASON_CANARY,
        "the selector's summary": SUMMARY_CANARY,
    }
    for name, text in BUILTIN_RUBRIC_TEXTS.items():
        for n, line in enumerate((text or "").splitlines()):
            out[f"line {n + 1} of the {name} rubric"] = line
    for request in seen.requests:
        if kind_of(request) == "judge":
            system = request.body["messages"][0]["content"]
            out[f"a judge's system prompt ({system[:30]}...)"] = system
    for t in seen.transcripts:
        for r in (t["blackbox_scoring"].get("evolution") or {}).get("rounds", []):
            for s in r["survivors"]:
                out[f"the survivor reason of {s['id']} in round {r['index']}"] = s["reason"]
    return out


def taste_strings() -> dict[str, str]:
    out = {}
    for section, items in TASTE.items():
        for item in items:
            out[f"the {section} item {item!r}"] = item
            out[f"the {section} canary {item.split()[0]!r}"] = item.split()[0]
    return out


def _excerpt(text: str, start: int, end: int) -> str:
    return repr(text[max(0, start - 50) : end + 30])


def legitimate_numbers(seen: Observed) -> set[str]:
    """The numbers any generator-side request of ``seen`` may hold: the templates', the
    concepts' and those of the generator-side answers (the profile's come on top, for the
    calls that read it)."""
    allowed = template_numbers() | numbers(CONCEPTS.read_text(encoding="utf-8"))
    for request, answer in seen.answers:
        if kind_of(request) not in JUDGE_SIDE:
            allowed |= numbers(answer)
    return allowed


def leaks(seen: Observed) -> list[str]:
    """Every leak into a generator-side request of ``seen``, one line per request."""
    allowed = legitimate_numbers(seen)
    profile = numbers(seen.profile)
    strings, taste = forbidden_strings(seen), taste_strings()
    paths = {
        s["params"]["seed"]: s["path"]
        for t in seen.transcripts
        for s in t["steps"]
        if s.get("params", {}).get("seed") is not None
    }
    found = []
    for n, request in enumerate(seen.requests):
        kind = kind_of(request)
        if kind in JUDGE_SIDE:
            continue
        text = text_of(request)
        lowered = text.lower()
        forbidden = strings if kind in RAW_PROFILE else {**strings, **taste}
        what = []
        for name, needle in forbidden.items():
            at = lowered.find(needle.lower()) if needle else -1
            if at >= 0:
                what.append(f"{name}: {_excerpt(text, at, at + len(needle))}")
        extra = numbers(text) - allowed - (profile if kind in RAW_PROFILE else set())
        for number in sorted(extra, key=int):
            hit = re.search(rf"(?<!\d)0*{number}(?!\d)", text)
            assert hit is not None
            what.append(
                f"the number {number}, in none of its legitimate inputs: "
                f"{_excerpt(text, hit.start(), hit.end())}"
            )
        if what:
            where = paths.get(request.seed, kind)
            found.append(f"request #{n} ({where}) holds " + "; ".join(what))
    return found


def assert_no_leak(seen: Observed) -> None:
    found = leaks(seen)
    assert not found, (
        f"{seen.mode}: {len(found)} generator-side request(s) hold what only judges and the "
        "selector may see:\n" + "\n".join(found[:12])
    )


# ------------------------------------------------------------------------------ the tests

_RUNS: dict[str, Observed] = {}


@pytest.fixture
def observed(
    tmp_path_factory: pytest.TempPathFactory, allow_loopback: None
) -> Callable[[str], Observed]:
    """A mode's run, made once per test session."""

    def get(mode: str) -> Observed:
        if mode not in _RUNS:
            _RUNS[mode] = observe(mode, tmp_path_factory.mktemp(mode))
        return _RUNS[mode]

    return get


def assert_the_canaries_were_planted(seen: Observed) -> None:
    """The run gave every canary a chance to leak: every kind of call ran, the protocol
    and selector the mode names were used, the likes reached the calls that read them, and
    the judges' and selector's canaries are in the record."""
    mode, settings = seen.mode, MODES[seen.mode]
    kinds = [kind_of(r) for r in seen.requests]
    rounds = "prompt.scoring.evolution.enabled=true" in settings
    hinted = "prompt.scoring.generator_profile_abstraction=false" not in settings
    llm = LLM[0] in settings
    for kind in ("rewrite", "idea", "judge", "stage", "title", "image"):
        assert kind in kinds, f"{mode}: no {kind} request"
    assert ("hints" in kinds) == hinted and ("variant" in kinds) == rounds
    assert ("selector" in kinds) == llm
    assert len(seen.transcripts) == (2 if "run.runs=2" in settings else 1)
    allowed = legitimate_numbers(seen)
    protocol = next((s.rsplit("=", 1)[1] for s in settings if "judge_protocol" in s), "list")
    for t in seen.transcripts:
        record = t["blackbox_scoring"]
        for judge in record["judges"]:
            assert judge["status"] == "ok" and judge["id"] in JUDGE_IDS
            assert judge.get("protocol", "list") == protocol and "warning" not in judge
            if protocol == "reasoned":
                assert all(RATIONALE_CANARY in r for r in judge["rationales"].values())
        # Every score and aggregate would stand out in a generator request.
        values = [v for j in record["judges"] for v in j["scores"].values()]
        values += [v for row in record["score_table"] for v in (row["median"], row["aggregate"])]
        hidden = [v for v in values if not numbers(str(v)) - allowed]
        assert not hidden, f"{mode}: scores the number check cannot tell apart: {hidden}"
        for r in (record.get("evolution") or {}).get("rounds", [])[:-1]:
            reasons = [s["reason"] for s in r["survivors"]]
            assert reasons and all(reasons)
            if llm:
                assert all(REASON_CANARY in x for x in reasons)
                assert SUMMARY_CANARY in r["selector"]["summary"]
    for kind in ("hints", "judge", "stage") if hinted else ("judge", "stage"):
        assert any(
            all(i in text_of(r) for items in TASTE.values() for i in items)
            for r in seen.requests
            if kind_of(r) == kind
        ), f"{mode}: the likes never reached a {kind} request"
    custom = [r for r in seen.requests if kind_of(r) == "judge" and RUBRIC_CANARY in text_of(r)]
    assert custom, f"{mode}: the custom rubric reached no judge"


@pytest.mark.parametrize("mode", list(MODES))
def test_no_judge_selector_or_likes_canary_reaches_a_generator(
    mode: str, observed: Callable[[str], Observed]
) -> None:
    seen = observed(mode)
    assert_the_canaries_were_planted(seen)
    assert_no_leak(seen)


def test_the_canary_numbers_are_in_no_legitimate_input() -> None:
    allowed = template_numbers() | numbers(CONCEPTS.read_text(encoding="utf-8"))
    assert not CANARY_NUMBERS & allowed
    assert "100" in allowed  # "0-100" is template text: "(86/100)" leaks 86, not 100


@pytest.mark.parametrize(
    ("leak", "caught"),
    [
        (" (86/100)", "the number 86"),
        ("\n" + "\n".join(i for items in TASTE.values() for i in items), "the Likes item"),
        (f" ({JUDGE_IDS[1]} liked it)", f"judge id {JUDGE_IDS[1]!r}"),
    ],
)
def test_the_detector_catches_a_leak_appended_to_a_variant_prompt(
    leak: str, caught: str, observed: Callable[[str], Observed]
) -> None:
    """The scan itself has teeth: the rounds run with one variant request's prompt
    extended by a leak fails it, naming what leaked and where."""
    seen = observed("rounds_code_selector")
    assert not leaks(seen)
    n = next(i for i, r in enumerate(seen.requests) if kind_of(r) == "variant")
    body = json.loads(json.dumps(seen.requests[n].body))
    body["messages"][-1]["content"] += leak
    requests = list(seen.requests)
    requests[n] = dataclasses.replace(requests[n], body=body)
    found = leaks(dataclasses.replace(seen, requests=requests))
    assert len(found) == 1 and found[0].startswith(
        f"request #{n} (pipeline/blackbox_scoring/round_1/"
    )
    assert caught in found[0]
