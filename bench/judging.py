"""Which judging protocol judges best: the product's judges on a planted-defect set.

Every round of ``bench/data/planted_defects.json`` (``bench/planted_defects.py``) holds one
sound card and five cards that each carry one planted defect. For each protocol (``list``,
``reasoned``, ``pointwise``, ``pairwise``, ``logprobs``) and each round, this bench runs the
product's own judge panel (:class:`image_project.stages.scoring.panel.Panel`: its prompts,
schemas, gates, re-asks and protocol code, through the real ``openai`` client) against
``llama-server`` on 127.0.0.1, then scores the answers with the product's score table
(quorum, normalisation, median: :func:`~image_project.stages.scoring.panel.score_table`) and
ranks them like the selector (:func:`~image_project.stages.scoring.selection.select`,
exploiting). The card ids of a round are shuffled by the seed (``rng_for(seed, "judging",
"cards", round)``), and each judge sees its own seeded order, as in a run.

One panel of four judges runs per protocol and round: the instruct model (Qwen2.5-Coder 0.5B)
with the rubrics ``strict``, ``profile_fit`` and ``novelty_heavy``, and the base model (Gemma
3 270M) with ``novelty_heavy``. Three panels are read from its answers (:data:`PANELS`):
*one judge* (instruct, ``strict``), *panel of 3* (instruct, the three rubrics) and *mixed
panel* (instruct ``strict`` and ``profile_fit``, base ``novelty_heavy``).

Reported per protocol and panel: how often the sound card is ranked first (top-1, with a
95 % Wilson interval; chance is 1/6), how often each defect is caught (its card's aggregate
below the sound card's), the rounds whose panel fell below its quorum, every judge's status
(``degenerate``, ``parse_error``, ``refused``, ``error``) and the ``logprobs`` fallbacks, the
tokens and the wall time. A round that fails its quorum counts as a miss in top-1 and in
every catch rate (the product would have stopped there).

The rounds run protocol by protocol within each round, so a run stopped by ``--budget-s``
(or Ctrl-C) has every protocol on about the same rounds; the JSON is rewritten after each
protocol's round, so nothing measured is lost::

    python bench/judging.py                     # every protocol, as many rounds as fit
    python bench/judging.py --quick             # 2 rounds, list only (the slow test)
    python bench/judging.py --rounds 8 --budget-s 2700 --json bench/results/judging.json

Exit 0 with a SKIPPED line when no llama-server binary is found (``$LLAMA_SERVER``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "bench"))

import anyio  # noqa: E402

from image_project.backends.base import TextBackend  # noqa: E402
from image_project.config.loading import load_config  # noqa: E402
from image_project.config.models import AppConfig, ScoringConfig  # noqa: E402
from image_project.engine.context import Context  # noqa: E402
from image_project.engine.runner import ChatRunner  # noqa: E402
from image_project.errors import ModelOutputError  # noqa: E402
from image_project.record.events import ChatEvent  # noqa: E402
from image_project.record.scoring import IdeaCard, JudgeResult  # noqa: E402
from image_project.run.driver import token_limits  # noqa: E402
from image_project.seeding import derive_seed, rng_for  # noqa: E402
from image_project.stages.profile import avoid_list, load_profile, render_guidance  # noqa: E402
from image_project.stages.scoring.cards import card_ids  # noqa: E402
from image_project.stages.scoring.panel import Panel, score_table  # noqa: E402
from image_project.stages.scoring.selection import select  # noqa: E402
from image_project.stages.standard import Brief  # noqa: E402

DATA = REPO / "bench" / "data" / "planted_defects.json"
PROTOCOLS = ("list", "reasoned", "pointwise", "pairwise", "logprobs")
SEED = 36
BASE = "base"
"""The name of the base model's section in ``backends:``."""
JUDGES: tuple[dict[str, str], ...] = (
    {"id": "strict", "rubric": "strict"},
    {"id": "warm", "rubric": "profile_fit"},
    {"id": "novel", "rubric": "novelty_heavy"},
    {"id": "base_novel", "rubric": "novelty_heavy", "backend": BASE},
)
PANELS: dict[str, tuple[str, ...]] = {
    "one judge": ("strict",),
    "panel of 3": ("strict", "warm", "novel"),
    "mixed panel": ("strict", "warm", "base_novel"),
}
FAILED = ("degenerate", "parse_error", "refused", "error")
Z95 = 1.959963984540054

# The backend settings of scripts/real-model-check (COMMON): small limits, the grammar dialect.
SETTINGS: dict[str, Any] = {
    "backend.provider": "openai",
    "backend.max_attempts": 1,
    "backend.max_concurrency": 4,
    "backend.schema_dialect": "grammar",
    "backend.max_output_tokens.judge_base": 60,
    "backend.max_output_tokens.judge_per_card": 40,
    "store.enabled": False,
    "prompt.scoring.enabled": True,
    "prompt.scoring.num_ideas": 6,
}
PROMPT_TOKENS_MAX = 1800
"""The longest judge prompt of the set, in tokens (a full list of six cards, with a rubric)."""
TIMEOUT_MARGIN = 2.0
TIMEOUT_MIN_S = 60.0


# --------------------------------------------------------------------------- the maths
def wilson(k: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials ((0, 1) for none)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Rate:
    """``k`` of ``n`` with its 95 % Wilson interval."""

    k: int
    n: int

    def as_json(self) -> dict[str, Any]:
        lo, hi = wilson(self.k, self.n)
        rate = self.k / self.n if self.n else None
        return {"k": self.k, "n": self.n, "rate": rate, "lo": round(lo, 3), "hi": round(hi, 3)}


def panel_outcome(
    ids: Sequence[str],
    defects: Mapping[str, str],
    results: Sequence[JudgeResult],
    cards: Mapping[str, IdeaCard],
    scoring: ScoringConfig,
    run_seed: int,
) -> dict[str, Any]:
    """One panel's reading of one round: the product's score table of ``results`` (the
    panel's judges), ranked like the selector when it exploits; the sound card's rank and
    each defect's catch (its aggregate below the sound card's). ``defects`` maps id -> label
    (``none`` for the sound card). A panel below its quorum: ``quorum_failed``, no ranking."""
    sound = next(i for i in ids if defects[i] == "none")
    try:
        table = score_table(ids, results, cards, scoring, None)
    except ModelOutputError as exc:
        return {"status": "quorum_failed", "error": str(exc)[:300], "top1": False, "caught": {}}
    ranking = select(list(table), exploration_rate=0.0, run_seed=run_seed).ranking
    by_id = {row.id: row for row in table}
    caught = {
        defects[i]: by_id[i].effective_score < by_id[sound].effective_score
        for i in ids
        if i != sound
    }
    return {
        "status": "ok",
        "ranking": list(ranking),
        "aggregates": {i: by_id[i].aggregate for i in ids},
        "top1": ranking[0] == sound,
        "caught": caught,
    }


def summarise(rows: Sequence[Mapping[str, Any]], defects: Sequence[str]) -> dict[str, Any]:
    """The figures of one protocol and panel from its rounds' :func:`panel_outcome` s: top-1
    and each defect's catch rate as :class:`Rate` (a quorum failure a miss), the quorum
    failures."""
    n = len(rows)
    return {
        "rounds": n,
        "top1": Rate(sum(bool(r["top1"]) for r in rows), n).as_json(),
        "caught": {
            d: Rate(sum(bool(r["caught"].get(d)) for r in rows), n).as_json() for d in defects
        },
        "quorum_failed": sum(r["status"] == "quorum_failed" for r in rows),
    }


def shuffled_round(
    seed: int, index: int, round_data: Mapping[str, Any]
) -> tuple[tuple[str, ...], dict[str, IdeaCard], dict[str, str]]:
    """A round's cards under ids ``A..F`` in a seeded order: (ids, cards by id, defect by id)."""
    entries = list(round_data["cards"])
    rng_for(seed, "judging", "cards", index).shuffle(entries)
    ids = card_ids(len(entries))
    cards = {i: IdeaCard.model_validate(e["card"]) for i, e in zip(ids, entries, strict=True)}
    defects = {i: str(e["defect"]) for i, e in zip(ids, entries, strict=True)}
    return ids, cards, defects


def brief_for(concepts: Sequence[str], profile_path: Path) -> Brief:
    """The brief a run would have: the concepts and the shipped profile, rendered by the
    product's code."""
    profile = load_profile(profile_path)
    return Brief(tuple(concepts), render_guidance(profile), tuple(avoid_list(profile)))


# --------------------------------------------------------------------------- one round
class _Usage:
    """Sums the tokens of every chat step, by backend (None: the main one)."""

    def __init__(self) -> None:
        self.tokens: dict[str, dict[str, int]] = {}
        self.calls = 0

    def on_step_start(self, ctx: Context, path: str, **metrics: Any) -> None:
        return None

    def on_step_end(self, ctx: Context, record: Any) -> None:
        if isinstance(record, ChatEvent):
            self.calls += 1
            key = "base" if "base_" in record.path.rsplit("/", 1)[-1] else "instruct"
            t = self.tokens.setdefault(key, {"prompt": 0, "completion": 0})
            t["prompt"] += record.usage.prompt_tokens
            t["completion"] += record.usage.completion_tokens

    def on_step_error(self, ctx: Context, path: str, step_name: str, exc: BaseException) -> None:
        return None


def config_for(protocol: str, urls: Mapping[str, str], models: Mapping[str, str], timeout: float,
               judges: Sequence[Mapping[str, str]] = JUDGES) -> AppConfig:  # fmt: skip
    """The configuration of one protocol's panel: the instruct server as the main backend,
    the base server as ``backends.base`` (when its URL is given)."""
    sets = {
        **SETTINGS,
        "backend.base_url": urls["instruct"],
        "backend.text_model": models["instruct"],
        "backend.timeout_s": timeout,
        "prompt.scoring.judge_protocol": protocol,
        "prompt.scoring.judges": [
            dict(j) for j in judges if j.get("backend") != BASE or BASE in urls
        ],
    }
    if BASE in urls:
        sets["backends"] = {
            BASE: {
                "provider": "openai",
                "base_url": urls[BASE],
                "text_model": models[BASE],
                "timeout_s": timeout,
                "max_attempts": 1,
                "max_concurrency": 2,
                "schema_dialect": "grammar",
                "max_output_tokens": {"judge_base": 60, "judge_per_card": 40},
            }
        }
    overrides = [f"{k}={json.dumps(v)}" for k, v in sets.items()]
    return load_config(root=REPO, env={}, overrides=overrides)


async def judge_round(
    cfg: AppConfig,
    text: TextBackend,
    text_models: Mapping[str, str],
    brief: Brief,
    ids: Sequence[str],
    cards: Mapping[str, IdeaCard],
    run_seed: int,
    usage: _Usage,
) -> tuple[JudgeResult, ...]:
    """The product's judge panel of ``cfg`` on one round's cards (one ``judges`` block)."""
    scoring = cfg.prompt.scoring
    judges = scoring.effective_judges(text.default_model, text_models)
    runner = ChatRunner(
        text,
        recorder=usage,
        token_limits=token_limits(cfg),
        max_prompt_chars=cfg.prompt.max_prompt_chars,
    )
    panel = Panel(judges, brief, None, None, run_seed, scoring.max_reasks)
    async with runner.root(Context.with_system("judging bench")).scope(
        "judging", merge="all_messages"
    ) as scope:
        return await panel.judge(scope, ids, cards, 0, lambda _r: None)


def panel_scoring(cfg: AppConfig, members: Sequence[str]) -> ScoringConfig:
    """The scoring settings of a panel of ``members``: its own quorum (a majority of it)."""
    scoring = cfg.prompt.scoring
    judges = [j for j in scoring.judges or () if j.id in members]
    return scoring.model_copy(update={"judges": judges})


def judge_line(r: JudgeResult) -> dict[str, Any]:
    return {
        "id": r.id,
        "status": r.status,
        "attempts": r.attempts,
        "scores": r.scores,
        "warning": r.warning,
        "error": (r.error or "")[:200] or None,
        "rationales": r.rationales,
        "comparisons": [list(c) for c in r.comparisons] if r.comparisons else None,
    }


async def run_round(
    cfg: AppConfig,
    text: TextBackend,
    text_models: Mapping[str, str],
    protocol: str,
    seed: int,
    index: int,
    round_data: Mapping[str, Any],
    profile_path: Path,
) -> dict[str, Any]:
    """One protocol on one round: the panel's answers and every panel's reading of them."""
    ids, cards, defects = shuffled_round(seed, index, round_data)
    brief = brief_for(round_data["concepts"], profile_path)
    run_seed = derive_seed(seed, "judging", index)
    usage = _Usage()
    started = time.perf_counter()
    results = await judge_round(cfg, text, text_models, brief, ids, cards, run_seed, usage)
    wall = time.perf_counter() - started
    present = {r.id for r in results}
    panels = {
        name: panel_outcome(
            ids,
            defects,
            [r for r in results if r.id in members],
            cards,
            panel_scoring(cfg, members),
            run_seed,
        )
        for name, members in PANELS.items()
        if set(members) <= present
    }
    return {
        "protocol": protocol,
        "round": index,
        "ids": dict(defects),
        "wall_s": round(wall, 1),
        "calls": usage.calls,
        "tokens": usage.tokens,
        "judges": [judge_line(r) for r in results],
        "panels": panels,
    }


def report(rounds: Sequence[Mapping[str, Any]], defects: Sequence[str]) -> dict[str, Any]:
    """Per protocol: each panel's figures, the judges' statuses, calls, tokens, wall time."""
    out: dict[str, Any] = {}
    for protocol in PROTOCOLS:
        mine = [r for r in rounds if r["protocol"] == protocol]
        if not mine:
            continue
        statuses: dict[str, dict[str, int]] = {}
        fallbacks = 0
        tokens: dict[str, dict[str, int]] = {}
        for r in mine:
            for j in r["judges"]:
                s = statuses.setdefault(j["id"], {})
                s[j["status"]] = s.get(j["status"], 0) + 1
                fallbacks += bool(j["warning"])
            for key, t in r["tokens"].items():
                acc = tokens.setdefault(key, {"prompt": 0, "completion": 0})
                acc["prompt"] += t["prompt"]
                acc["completion"] += t["completion"]
        out[protocol] = {
            "rounds": len(mine),
            "panels": {
                name: summarise([r["panels"][name] for r in mine if name in r["panels"]], defects)
                for name in PANELS
                if any(name in r["panels"] for r in mine)
            },
            "judge_statuses": statuses,
            "logprobs_fallbacks": fallbacks,
            "calls": sum(r["calls"] for r in mine),
            "tokens": tokens,
            "wall_s": round(sum(r["wall_s"] for r in mine), 1),
            "wall_s_per_round": round(sum(r["wall_s"] for r in mine) / len(mine), 1),
        }
    return out


# --------------------------------------------------------------------------- the tables
DEFECT_HEADS = {
    "disliked_motif": "disliked motif",
    "concept_contradicted": "concept contradicted",
    "incoherent_narrative": "incoherent",
    "near_duplicate": "near-duplicate",
    "off_profile_style": "off-profile style",
}
VERDICT_PANEL = "panel of 3"
"""The panel the default is chosen by: the product's example panel (three rubrics)."""


def _rate(r: Mapping[str, Any], interval: bool = True) -> str:
    if not r["n"]:
        return "-"
    text = f"{r['k']}/{r['n']}"
    return f"{text} ({r['lo']:.2f}-{r['hi']:.2f})" if interval else text


def format_table(doc: Mapping[str, Any]) -> str:
    """The Markdown tables of a result: top-1 and catches per protocol and panel, then each
    protocol's judge statuses, calls, tokens and wall time."""
    protocols: Mapping[str, Any] = doc.get("protocols", {})
    defects = [d for d in DEFECT_HEADS if any(
        d in f["caught"] for p in protocols.values() for f in p["panels"].values()
    )]  # fmt: skip
    lines = [
        "| protocol | panel | rounds | sound card first (95 % CI) | "
        + " | ".join(f"{DEFECT_HEADS[d]} caught" for d in defects)
        + " | below quorum |",
        "|---|---|---:|---|" + "---:|" * len(defects) + "---:|",
    ]
    for protocol, p in protocols.items():
        for name, f in p["panels"].items():
            caught = " | ".join(_rate(f["caught"][d], False) for d in defects)
            lines.append(
                f"| `{protocol}` | {name} | {f['rounds']} | {_rate(f['top1'])} | {caught} | "
                f"{f['quorum_failed']} |"
            )
    lines += [
        "",
        "| protocol | judges (non-ok answers of judge-rounds) | logprobs fallbacks | calls | "
        "tokens in / out: instruct | base | wall s per round |",
        "|---|---|---:|---:|---|---|---:|",
    ]
    for protocol, p in protocols.items():
        parts = []
        for judge, statuses in p["judge_statuses"].items():
            total = sum(statuses.values())
            bad = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()) if k != "ok")
            parts.append(
                f"{judge}: {total - statuses.get('ok', 0)}/{total}" + (f" ({bad})" if bad else "")
            )
        t = p["tokens"]
        tok = [
            f"{t[k]['prompt']:,} / {t[k]['completion']:,}" if k in t else "-"
            for k in ("instruct", "base")
        ]
        lines.append(
            f"| `{protocol}` | {'; '.join(parts)} | {p['logprobs_fallbacks']} | {p['calls']} | "
            f"{tok[0]} | {tok[1]} | {p['wall_s_per_round']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def verdict(doc: Mapping[str, Any]) -> str:
    """Which protocol the evidence makes the default, by a fixed rule: the one whose top-1
    interval with :data:`VERDICT_PANEL` lies wholly above every other protocol's and whose
    judges answered usably in at least 90 % of their judge-rounds; else ``list`` stays."""
    rows = {
        protocol: p["panels"][VERDICT_PANEL]
        for protocol, p in doc.get("protocols", {}).items()
        if VERDICT_PANEL in p["panels"]
    }
    chance = float(doc.get("chance") or 0)
    above = [p for p, f in rows.items() if f["top1"]["n"] and f["top1"]["lo"] > chance]
    described = "; ".join(
        f"`{p}` {_rate(f['top1'])}"
        for p, f in sorted(rows.items(), key=lambda x: -x[1]["top1"]["k"])
    )
    lead = (
        f"Sound card first with the {VERDICT_PANEL}: {described}; chance {chance:.2f}. "
        f"Above chance (the interval's lower end over {chance:.2f}): "
        + (", ".join(f"`{p}`" for p in above) or "none")
        + ". "
    )
    for protocol, f in rows.items():
        others = [g for q, g in rows.items() if q != protocol]
        statuses = doc["protocols"][protocol]["judge_statuses"]
        total = sum(sum(s.values()) for s in statuses.values())
        ok = sum(s.get("ok", 0) for s in statuses.values())
        reliable = total > 0 and ok / total >= 0.9
        if others and reliable and all(f["top1"]["lo"] > g["top1"]["hi"] for g in others):
            return lead + (
                f"**Recommendation: `{protocol}`**: its interval lies above every other "
                f"protocol's and its judges answered usably in {ok} of {total} judge-rounds."
            )
    return lead + (
        "**Recommendation: keep `list`**: no protocol's interval lies wholly above every "
        "other's (or the one that does failed too often), so the evidence does not single "
        "one out."
    )


# --------------------------------------------------------------------------- servers
@dataclass
class Servers:
    """The llama-server processes of the bench (instruct, and base for the mixed panel)."""

    urls: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    speed: dict[str, dict[str, Any]] = field(default_factory=dict)
    stops: list[Callable[[], None]] = field(default_factory=list)

    def stop(self) -> None:
        for stop in self.stops:
            stop()


def start_servers(keys: Sequence[str], threads: int, logs: Path) -> Servers:
    """Start one llama-server per model key on 127.0.0.1 (``-t threads``) and measure each
    one's speed first (``probe_speed``)."""
    from real_model_io import MODELS, Server, ensure_model, find_binary, probe_speed

    binary = find_binary()
    assert binary is not None
    out = Servers()
    try:
        for key in keys:
            spec = MODELS[key]
            template = next(iter(spec.templates.values()))
            server = Server(
                binary, ensure_model(spec), spec.alias, template, logs / f"{key}.log", threads
            )
            out.stops.append(server.stop)
            server.wait_ready()
            out.speed[key] = probe_speed(server.port)
            out.urls[key] = f"http://127.0.0.1:{server.port}/v1"
            out.models[key] = spec.alias
    except BaseException:
        out.stop()
        raise
    return out


def timeout_for(speed: Mapping[str, Any], limit: int, parallel: int = 4) -> float | None:
    """A call's time limit from the measured speed: ``parallel`` of the longest prompts at
    the prompt speed (one thread shares them) and the largest answer at the decode speed,
    times a margin; None when the probe failed."""
    decode = float(speed.get("decode_tok_s") or 0.0)
    prompt = float(speed.get("prompt_tok_s") or 0.0)
    if decode <= 0 or prompt <= 0:
        return None
    per_call = parallel * PROMPT_TOKENS_MAX / prompt + limit / decode
    return float(round(max(TIMEOUT_MIN_S, TIMEOUT_MARGIN * per_call)))


# --------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", type=Path, default=None, help="write the result here")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--rounds", type=int, default=None, help="the first N rounds (default all)")
    ap.add_argument(
        "--pairwise-rounds",
        type=int,
        default=None,
        help="pairwise on the first N rounds only (it costs n(n-1) calls per judge)",
    )
    ap.add_argument(
        "--pairwise-judges",
        default=",".join(j["id"] for j in JUDGES),
        help="the judges of the pairwise panel (comma-separated ids)",
    )
    ap.add_argument("--budget-s", type=float, default=None, help="start no round after this")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--threads", type=int, default=1, help="llama-server -t")
    ap.add_argument("--no-base", action="store_true", help="no base model (no mixed panel)")
    ap.add_argument("--quick", action="store_true", help="2 rounds, list only, no base model")
    return ap.parse_args(argv)


def write(path: Path | None, doc: Mapping[str, Any]) -> None:
    if path is None:
        return
    tmp = path.with_suffix(".partial")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


async def bench(args: argparse.Namespace, servers: Servers, doc: dict[str, Any]) -> None:
    data = json.loads(args.data.read_text(encoding="utf-8"))
    defects: list[str] = list(data["defects"])
    protocols = [p for p in args.protocols.split(",") if p]
    rounds = data["rounds"][: args.rounds] if args.rounds else data["rounds"]
    profile_path = REPO / data["profile"]
    timeout = max(t for t in (timeout_for(s, 60 + 6 * 120) for s in servers.speed.values()) if t)
    pairwise_judges = args.pairwise_judges.split(",")
    doc["settings"].update(timeout_s=timeout)
    started = time.monotonic()
    for r in rounds:
        if args.budget_s is not None and time.monotonic() - started > args.budget_s:
            doc["stopped_by_budget"] = f"after {len(doc['round_results'])} protocol-rounds"
            break
        for protocol in protocols:
            late = args.pairwise_rounds is not None and r["round"] >= args.pairwise_rounds
            if protocol == "pairwise" and late:
                continue
            judges = JUDGES
            if protocol == "pairwise":
                judges = tuple(j for j in JUDGES if j["id"] in pairwise_judges)
            cfg = config_for(protocol, servers.urls, servers.models, timeout, judges)
            from image_project.backends.factory import make_backends

            backends = make_backends(cfg, {})
            try:
                row = await run_round(
                    cfg, backends.text, backends.text_models, protocol, args.seed,
                    r["round"], r, profile_path,
                )  # fmt: skip
            finally:
                await backends.aclose()
            doc["round_results"].append(row)
            doc["protocols"] = report(doc["round_results"], defects)
            doc["elapsed_s"] = round(time.monotonic() - started, 1)
            write(args.json, doc)
            tops = ", ".join(f"{k}={v['top1']}" for k, v in row["panels"].items())
            statuses = " ".join(f"{j['id']}={j['status']}" for j in row["judges"])
            print(
                f"round {r['round']} {protocol}: {row['wall_s']} s, {row['calls']} calls; "
                f"{statuses}; top1: {tops}",
                flush=True,
            )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.rounds, args.protocols, args.no_base = args.rounds or 2, "list", True
    from provenance import Provenance
    from real_model_io import MODELS, binary_path, find_binary

    if find_binary() is None:
        print(f"judging bench: SKIPPED: no llama-server binary at {binary_path()} ($LLAMA_SERVER)")
        return 0
    keys = ["instruct"] if args.no_base else ["instruct", "base"]
    meter = Provenance.start()
    doc: dict[str, Any] = {
        "bench": "judging",
        "data": args.data.relative_to(REPO).as_posix()
        if args.data.is_relative_to(REPO)
        else str(args.data),
        "seed": args.seed,
        "models": {k: MODELS[k].description for k in keys},
        "settings": {
            "threads": args.threads,
            "judges": list(JUDGES),
            "panels": {k: list(v) for k, v in PANELS.items()},
            "backend": SETTINGS,
            "rounds": args.rounds,
            "pairwise_rounds": args.pairwise_rounds,
            "pairwise_judges": args.pairwise_judges,
            "budget_s": args.budget_s,
            "quick": args.quick,
        },
        "cards_per_round": None,
        "chance": None,
        "round_results": [],
    }
    data = json.loads(args.data.read_text(encoding="utf-8"))
    n = len(data["rounds"][0]["cards"])
    doc.update(cards_per_round=n, chance=round(1 / n, 4))
    logs = Path(tempfile.mkdtemp(prefix="judging-bench-"))
    servers = start_servers(keys, args.threads, logs)
    doc["server_speed"] = servers.speed
    print(f"servers: {servers.speed} (logs in {logs})", flush=True)
    try:
        anyio.run(bench, args, servers, doc)
    except KeyboardInterrupt:
        doc["interrupted"] = True
    finally:
        servers.stop()
        doc["measured"] = meter.finish()
        doc["load_avg_end"] = os.getloadavg()[0]
        write(args.json, doc)
    for protocol, figures in doc.get("protocols", {}).items():
        for name, f in figures["panels"].items():
            t = f["top1"]
            print(
                f"{protocol:<10} {name:<12} top1 {t['k']}/{t['n']} [{t['lo']:.2f}, {t['hi']:.2f}]"
            )
    return 130 if doc.get("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
