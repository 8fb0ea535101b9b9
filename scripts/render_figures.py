"""Render the figures of README.md and docs/*.md from the benches' JSON files in bench/results/.

A figure in the README or the docs is never typed by hand: it stands in a block between two
markers, ``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->``, and this script writes
the block from the JSON file that :data:`BLOCKS` names for it, ending with the line that
says which commit, date and machine (cores, load before and after) the figures were
measured on (``bench/provenance.py``)::

    python scripts/render_figures.py          # rewrite every block in place
    python scripts/render_figures.py --check  # exit 1 naming each block that differs

``tests/test_figures.py`` runs the check: a README table that does not match its JSON fails
the suite. After a bench wrote new JSON, run this script and commit both.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "scripts"))

__all__ = ["BLOCKS", "Block", "documents", "main", "render", "render_text", "stale_blocks"]

MARKER = re.compile(
    r"(<!-- figures:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /figures:(?P=name) -->)",
    re.DOTALL,
)

Json = Mapping[str, Any]


@dataclass(frozen=True)
class Block:
    """A named block: the JSON file(s) it is rendered from (relative to the repository,
    a glob for several) and the function that renders their contents."""

    source: str
    render: Callable[[list[tuple[str, Json]]], str]


def _load(source: str, root: Path) -> list[tuple[str, Json]]:
    paths = sorted(root.glob(source)) if "*" in source else [root / source]
    if not paths:
        raise FileNotFoundError(f"{source}: no JSON file to render figures from")
    return [
        (p.relative_to(root).as_posix(), json.loads(p.read_text(encoding="utf-8"))) for p in paths
    ]


def measured_on(path: str, data: Json) -> str:
    """The line that says where figures come from: commit, date, machine and its load."""
    m = data.get("measured")
    if not m:
        return (
            f"Figures from `{path}`, which does not record the commit, date or machine it "
            "was measured on."
        )
    commit = f"`{(m['commit'] or 'unknown')[:10]}`"
    if m.get("dirty"):
        commit += " with uncommitted changes"
    machine = m["machine"]
    before, after = machine["load_before"][0], machine["load_after"][0]
    return (
        f"Measured on commit {commit}, {m['date'].replace('T', ' ').rstrip('Z')} UTC, "
        f"{machine['cores']} cores, load average {before:.1f} before and {after:.1f} after "
        f"(1 minute), Python {machine['python']}, in {m['duration_s']:.0f} s; figures from "
        f"`{path}`."
    )


def _fenced(text: str, path: str, data: Json, note: str = "") -> str:
    return f"```\n{text}\n```\n\n{note}{measured_on(path, data)}\n"


# --------------------------------------------------------------------------- latency


def _latency(sources: list[tuple[str, Json]]) -> str:
    import latency

    path, data = sources[0]
    sweep = data.get("sweep_repeats", data["repeats"])
    note = f"{data['repeats']} repeat(s) per mode, the N x J sweep {sweep}. "
    return _fenced(latency.report_text(data), path, data, note)


def _by_name(data: Json, prefix: str) -> Json:
    return next(s for s in data["scenarios"] if s["scenario"].startswith(prefix))


def _latency_summary(sources: list[tuple[str, Json]]) -> str:
    path, data = sources[0]
    rows = data["scenarios"]
    ratios = [r["cpu_ratio"] for r in rows]
    calls = [r["calls"] for r in rows]
    cpu = [r["cpu_ms_per_call"] for r in rows]
    weighted = sum(c["project"] * n for c, n in zip(cpu, calls, strict=True)) / sum(
        c["sdk"] * n for c, n in zip(cpu, calls, strict=True)
    )
    worst = max(rows, key=lambda r: r["cpu_ratio"])
    gc_max = max(r.get("gc_ms_per_call", {}).get("project", 0.0) for r in rows)
    scoring = _by_name(data, "scoring N=6 x J=3")
    evolution = _by_name(data, "evolution")
    limiter = _by_name(data, "scoring N=24 x J=3, max_concurrency")
    at_most_1 = sum(1 for r in ratios if r <= 1.0)
    singles = [x for r in rows for x in r.get("cpu_ratio_repeats", ())]
    spread = (
        f" Single runs against their own replay ({len(singles)}: {data['repeats']} per "
        f"scenario): {min(singles):.2f} to {max(singles):.2f}, "
        f"{sum(1 for x in singles if x <= 1.0)} at or below 1.0."
        if singles
        else ""
    )
    lines = [
        f"- **Client CPU per call** (event-loop thread), project / bare SDK on the same "
        f"requests: **{min(ratios):.2f}** to **{max(ratios):.2f}** over the {len(rows)} "
        f"scenarios (median {statistics.median(ratios):.2f}; {weighted:.2f} over all their "
        f"calls); {at_most_1} of {len(rows)} at or below 1.0, the highest "
        f"{worst['scenario']} ({worst['cpu_ms_per_call']['project']:.2f} / "
        f"{worst['cpu_ms_per_call']['sdk']:.2f} ms).{spread} Garbage collection is at most "
        f"{gc_max:.2f} ms of the project's per-call figure.",
        f"- **Scoring 6 x 3:** {scoring['sequential_s']['median']:.2f} s sequential, "
        f"{scoring['concurrent_s']['median']:.2f} s concurrent, efficiency "
        f"**{scoring['efficiency']:.3f}** against the bound (the bare SDK on the same "
        f"requests: {scoring['floor_efficiency']['sdk']:.3f}); speedup "
        f"{scoring['speedup']:.2f}x of an ideal {scoring['ideal_speedup']:.2f}x.",
        f"- **Evolution** (6 cards, 3 judges, then 2 rounds of 3 survivors x 2 variants, "
        f"{evolution['calls']} calls): {evolution['sequential_s']['median']:.2f} s sequential, "
        f"{evolution['concurrent_s']['median']:.2f} s concurrent, efficiency "
        f"{evolution['efficiency']:.3f}.",
    ]
    if data["sweep"]:
        growth = " / ".join(f"{s['concurrent_growth']:+.1%}" for s in data["sweep"])
        seq = " / ".join(f"{s['sequential_growth']:+.0%}" for s in data["sweep"])
        stage = " / ".join(f"{s['stage_concurrent_growth']:+.0%}" for s in data["sweep"])
        bound = " / ".join(f"{s['stage_critical_path_growth']:+.0%}" for s in data["sweep"])
        judges = " / ".join(str(s["judges"]) for s in data["sweep"])
        lines.append(
            f"- **Sweep** from N=2 to N=24 cards, for {judges} judges: the concurrent run "
            f"grows {growth}, the sequential run {seq}; the scoring stage alone {stage}, of "
            f"which {bound} is the physical bound."
        )
    lines += [
        f"- **The limiter** (`backend.max_concurrency: 4`, N=24 x 3): "
        f"{limiter['concurrent_s']['median']:.2f} s, efficiency {limiter['efficiency']:.3f} "
        f"against the limiter-aware bound; the bare SDK under the same limit "
        f"{limiter['floor_efficiency']['sdk']:.3f}.",
        f"- **Every scenario** selected the same card and wrote the same final prompt in both "
        f"modes: {'yes' if data['all_same_selection'] else '**no**'}.",
        f"- **Engine overhead** with an in-process backend and zero latency: "
        f"{data['engine_overhead_ms_per_step']:.3f} ms per step.",
    ]
    return "\n".join(lines) + f"\n\n{measured_on(path, data)}\n"


def _latency_conversation(sources: list[tuple[str, Json]]) -> str:
    import latency

    path, data = sources[0]
    return _fenced(latency.conversation_table(data["along_conversation"]), path, data)


def _latency_quick(sources: list[tuple[str, Json]]) -> str:
    names = [s["scenario"] for s in sources[0][1]["scenarios"]]
    head = "| scenario | " + " | ".join(f"run {i + 1}" for i in range(len(sources))) + " |"
    lines = [head, "|---" + "|---:" * len(sources) + "|"]
    for name in names:
        cells = []
        for _, data in sources:
            row = next(s for s in data["scenarios"] if s["scenario"] == name)
            cpu = row["cpu_ms_per_call"]
            cells.append(f"**{row['cpu_ratio']:.2f}** ({cpu['project']:.2f} / {cpu['sdk']:.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"- run {i + 1}: {measured_on(p, d)}" for i, (p, d) in enumerate(sources)]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- others


def _startup(sources: list[tuple[str, Json]]) -> str:
    path, data = sources[0]
    lines = [f"{'command':<34} {'wall median [min-max] s':>26} {'x python':>9} {'cpu s':>7}"]
    for name, f in data["commands"].items():
        w = f["wall_s"]
        lines.append(
            f"{name:<34} {w['median']:>9.3f} [{w['min']:.3f}-{w['max']:.3f}] "
            f"{f['wall_ratio_to_python']:>8.2f}x {f['cpu_s_median']:>7.3f}"
        )
    run = data["commands"].get("main.py --offline --prompt-only")
    target = ""
    if run is not None:
        median = run["wall_s"]["median"]
        target = (
            f"The offline prompt-only run (store on): median {median:.3f} s against the "
            f"target of 0.35 s ({'met' if median <= 0.35 else '**missed**'}).\n"
        )
    fenced = _fenced("\n".join(lines), path, data)
    return f"{data['rounds']} interleaved rounds:\n\n{fenced}" + (f"\n{target}" if target else "")


def _store(sources: list[tuple[str, Json]]) -> str:
    path, data = sources[0]
    write_ms = data["median_transcript_and_store_write_s"] * 1000
    return (
        f"In-process, the transcript and store write is {write_ms:.0f} ms and the store adds "
        f"{data['added_percent']:+.1f}% to an offline run (`python bench/store.py`: "
        f"{data['median_without_s']:.4f} s without, {data['median_with_s']:.4f} s with, "
        f"{data['runs']} interleaved runs each). Once per "
        f"process, importing and opening an existing store costs "
        f"{data['open_existing_store_in_a_new_process_s'] * 1000:.0f} ms; creating a new one "
        f"(SQLAlchemy, Alembic, the schema) costs "
        f"{data['create_new_store_in_a_new_process_s']:.2f} s.\n\n{measured_on(path, data)}\n"
    )


def _interrupt(sources: list[tuple[str, Json]]) -> str:
    """bench/interrupt.py: SIGINT to exit with the idea calls held in flight."""
    path, data = sources[0]
    verdict = "met" if data["max_s"] < data["target_s"] else "**missed**"
    return (
        f"`python bench/interrupt.py --repeats {data['repeats']}`: SIGINT to process exit "
        f"with {data['calls_in_flight']} calls in flight, median "
        f"{data['median_s'] * 1000:.0f} ms, max {data['max_s'] * 1000:.0f} ms (target: under "
        f"{data['target_s']:.0f} s: {verdict}).\n\n{measured_on(path, data)}\n"
    )


def _batch(sources: list[tuple[str, Json]]) -> str:
    path, data = sources[0]
    batch = data["simulator"]["batch"] if "simulator" in data else data["batch"]
    lines = [
        "| parallel | wall s | bound s | efficiency | replay s | vs replay | speedup "
        "| 429s (after 1st window) | CPU ms/call | peak RSS MB | queued s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in batch["rows"]:
        label = (
            f"auto ({r['most_in_flight']} in flight)" if r["parallel"] == "auto" else r["parallel"]
        )
        rate_bound = batch["rate_per_s"] and r["calls"] / batch["rate_per_s"]
        bound = f"{r['bound_s']:.2f}" + (" (rate)" if abs(r["bound_s"] - rate_bound) < 1e-9 else "")
        lines.append(
            f"| {label} | {r['wall_s']:.2f} | {bound} | {r['efficiency']:.3f} | "
            f"{r['replay_s']:.2f} | {r['replay_efficiency']:.3f} | {r['speedup']:.2f}x | "
            f"{r['429s']} ({r['429s_after_first_window']}) | {r['cpu_ms_per_call']:.2f} | "
            f"{r['peak_rss_mb']:.0f} | {r['runqueue_wait_s']:.2f} |"
        )
    shared = batch.get("two_machines")
    tail = ""
    if shared:
        tail = (
            f"\nTwo processes x {shared['runs_each']} runs, `auto`, one key, each pacing "
            f"alone: {shared['wall_s']:.2f} s against a rate bound of "
            f"{shared['rate_bound_s']:.2f} s, {shared['429s']} 429s "
            f"({shared['429s_after_first_window']} after the first window).\n"
        )
    return (
        f"N = {batch['runs']} runs, rate limit {batch['rate_limit']}.\n\n"
        + "\n".join(lines)
        + f"\n{tail}\n{_batch_targets(batch['rows'])}{measured_on(path, data)}\n"
    )


def _batch_two_machines(sources: list[tuple[str, Json]]) -> str:
    """bench/batch.py's ``two_machines``: two processes' worth of batches on one key, each
    pacing alone, against the same runs in one process at ``auto`` through one pacer."""
    path, data = sources[0]
    batch = data["simulator"]["batch"] if "simulator" in data else data["batch"]
    shared = batch["two_machines"]
    auto = next(r for r in batch["rows"] if r["parallel"] == "auto")
    runs = shared["machines"] * shared["runs_each"]
    auto_bound = batch["rate_per_s"] and auto["calls"] / batch["rate_per_s"]
    bounds = (
        f"rate bound {shared['rate_bound_s']:.2f} s for both"
        if abs(shared["rate_bound_s"] - auto_bound) < 1e-9
        else f"rate bounds {shared['rate_bound_s']:.2f} s and {auto_bound:.2f} s"
    )
    return (
        f"{shared['machines']} batches of {shared['runs_each']} runs at once, each with its own "
        f"transport and pacer, at `auto`, against the simulator's one limit of "
        f"{batch['rate_limit']}: **{shared['429s']} requests refused with 429, "
        f"{shared['429s_after_first_window']} of them after the first window, and "
        f"{shared['wall_s']:.2f} s for the {runs} runs**, where one process running the same "
        f"{batch['runs']} runs at `auto` through one pacer had **{auto['429s']} 429s "
        f"({auto['429s_after_first_window']} after the first window) and took "
        f"{auto['wall_s']:.2f} s** ({bounds}).\n\n{measured_on(path, data)}\n"
    )


def _batch_targets(rows: Sequence[Json]) -> str:
    """The batch's figures against its targets: K=12 at least 5x faster than one after
    another, no 429 after the first window with ``auto``, efficiency >= 0.85 of the bound."""
    by = {str(r["parallel"]): r for r in rows}
    k12, auto = by.get("12"), by.get("auto")
    if k12 is None or auto is None:
        return ""

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    late = auto["429s_after_first_window"]
    return (
        f"Against the targets: `--parallel 12` is {k12['speedup']:.2f}x faster than one after "
        f"another (target >= 5x: {verdict(k12['speedup'] >= 5)}); `auto` had {auto['429s']} "
        f"429s, {late} after the first window (target none: {verdict(late == 0)}); against "
        f"the bound, {k12['efficiency']:.3f} and {auto['efficiency']:.3f} (target >= 0.85: "
        f"{verdict(min(k12['efficiency'], auto['efficiency']) >= 0.85)}); against the "
        f"replay, {k12['replay_efficiency']:.3f} and {auto['replay_efficiency']:.3f}.\n\n"
    )


def _quality(sources: list[tuple[str, Json]]) -> str:
    import quality

    path, data = sources[0]
    return _fenced(quality.format_table(data), path, data)


def _judging(sources: list[tuple[str, Json]]) -> str:
    """bench/judging.py: what ran (models, speed, rounds), the tables, the rule's verdict."""
    import judging

    path, data = sources[0]
    settings = data["settings"]
    speed = data.get("server_speed", {})
    counted = {p: f["rounds"] for p, f in data.get("protocols", {}).items()}
    ran = ", ".join(f"`{p}` {n}" for p, n in counted.items())
    pairwise = ""
    if "pairwise" in counted and settings.get("pairwise_judges"):
        pairwise = f" (`pairwise` with the judges {settings['pairwise_judges']} only)"
    models = "; ".join(
        f"{key}: {desc}, measured {speed.get(key, {}).get('decode_tok_s', '?')} tokens/s "
        f"decoding and {speed.get(key, {}).get('prompt_tok_s', '?')} reading the prompt"
        for key, desc in data["models"].items()
    )
    stopped = (
        f" Stopped by the time budget {data['stopped_by_budget']}."
        if data.get("stopped_by_budget")
        else ""
    )
    head = (
        f"Rounds per protocol: {ran}{pairwise}, {data['cards_per_round']} cards a round "
        f"(chance of ranking the sound card first: {data['chance']:.2f}).{stopped} "
        f"Models: {models}; llama-server `-t {settings['threads']}`.\n\n"
    )
    return (
        head
        + judging.format_table(data)
        + f"\n{judging.verdict(data)}\n\n{measured_on(path, data)}\n"
    )


# --------------------------------------------------------------------------- evidence


def _pm(x: float, digits: int = 2) -> str:
    return f"{x:+.{digits}f}"


def _ci(d: Json, scale: float = 1.0, digits: int = 2) -> str:
    """``mean [lo, hi]`` of a paired-difference dict (``mean``/``lo``/``hi``, or a
    ``[mean, lo, hi]`` list), signed."""
    m, lo, hi = (d["mean"], d["lo"], d["hi"]) if isinstance(d, Mapping) else d
    return f"{_pm(m * scale, digits)} [{_pm(lo * scale, digits)}, {_pm(hi * scale, digits)}]"


def _bench_line(path: str, data: Json) -> str:
    """The provenance line of a bench that records its own (``commit``, ``machine``)."""
    return (
        f"Figures from `{path}`: commit {data['commit']}, {data['machine']}, "
        f"{data['seconds']:.0f} s."
    )


def _evidence_decision(sources: list[tuple[str, Json]]) -> str:
    """docs/evidence.md's summary of bench/decision.py: the default against one judge in
    every cell, the mean of z-scores' worst cells, and the price where every judge is
    sound."""
    path, data = sources[0]
    default = data["default"]
    cells = data["cells"]

    def label(c: Json) -> str:
        return f"{c['world']}, N {c['n']}"

    worse = data["decision"]["worse_than_one_judge_in"]
    largest = max(cells, key=lambda c: c["vs_one_judge"][default][0])
    zscores = [c for c in cells if label(c) in worse["mean, zscores"]]
    worst_z = max(zscores, key=lambda c: c["vs_one_judge"]["mean, zscores"][0])

    def gap(c: Json) -> float:
        others = [v for k, v in c["regret"].items() if k != "one judge"]
        return float(c["regret"][default] - min(others))

    sound = [c for c in cells if c["world"].startswith("sound")]
    price = max(sound, key=gap)
    by = {(c["world"], c["n"]): c for c in cells}
    rho0, rho8 = by[("sound, one scale, rho 0", 6)], by[("sound, one scale, rho 0.8", 6)]
    ns = " / ".join(str(n) for n in sorted({c["n"] for c in cells}))
    in_cells = len(worse[default])
    return (
        f"- **The default never costs more than one sound judge.** `python bench/decision.py "
        f"--json bench/results/decision.json` ({len(cells)} cells: sound judges on one or different "
        f"scales at \N{GREEK SMALL LETTER RHO} 0 / 0.5 / 0.8, one random, near-constant or position judge, {ns} cards; "
        f"up to {data['max_rounds']:,} paired rounds each). The default, the **median after "
        f"`normalise: robust`**, is worse than one sound judge in "
        f"{'no cell' if not in_cells else f'{in_cells} cells'} (its largest difference: "
        f"{_ci(largest['vs_one_judge'][default])} regret points, {label(largest)}). The mean "
        f"of z-scores is worse than one judge in {len(zscores)} cells "
        f"(the worst: {_ci(worst_z['vs_one_judge']['mean, zscores'])}, {label(worst_z)}). "
        f"The price: where every judge is sound, the best candidate beats the default by up "
        f"to {gap(price):.2f} points ({price['world']}, N {price['n']}).\n"
        f"- **A panel of independent judges beats one judge; judges on one model, by "
        f"little.** The default against one judge, 6 cards, one scale: "
        f"{_ci(rho0['vs_one_judge'][default])} regret points at \N{GREEK SMALL LETTER RHO} 0 (one judge's regret "
        f"{rho0['regret']['one judge']:.2f}), {_ci(rho8['vs_one_judge'][default])} at \N{GREEK SMALL LETTER RHO} 0.8 "
        f"(three prompts on one model).\n\n{_bench_line(path, data)}\n"
    )


def _evidence_quality(sources: list[tuple[str, Json]]) -> str:
    """docs/evidence.md's summary of bench/quality.py: the panel in the real pipeline,
    shuffling, rounds against a flat round of as many calls."""
    path, data = sources[0]
    head = data["headline"]
    panel = head["median3_minus_one_judge_regret"]
    rows = {r["name"]: r for r in data["rounds"]["rows"]}
    rounds = [rows[f"{k} rounds, variants -0"]["vs_control"] for k in (1, 2, 3)]
    return (
        f"- **The panel in the real pipeline**: `python bench/quality.py --only choosing` "
        f"({data['seeds']} run seeds; the median of the judges' own scores): the median of 3 against one judge {_ci(panel)} regret points over "
        f"{panel['runs']} paired runs.\n"
        f"- **Shuffling removes most of the position bias.** The first-shown card's win share "
        f"with each judge's own order against one shared order (median of 3, paired): "
        f"{_ci(head['shuffled_minus_shared_first_shown'], 100, 1)} points (`python "
        f"bench/quality.py --only choosing`).\n"
        f"- **Rounds pay against equal calls only late**: rounds \N{MINUS SIGN} a flat round of as many "
        f"calls, 1 / 2 / 3 rounds, variants losing 0 points: "
        + " / ".join(_ci(r) for r in rounds)
        + f" (`python bench/quality.py --only rounds`).\n\nFigures from `{path}`, which does "
        "not record the commit it was measured on.\n"
    )


def _evidence_novelty(sources: list[tuple[str, Json]]) -> str:
    """docs/evidence.md's summary of bench/novelty.py: the old default and the chosen one,
    in both motif encodings."""
    import novelty

    path, data = sources[0]
    old, choice = data["defaults"], data["decision"]

    def row(encoding: Json, scale: float, cap: float, share: float) -> Json:
        return next(
            r
            for r in encoding["rows"]
            if (r["scale"], r["cap"], r["min_share"]) == (scale, cap, share)
        )

    def removed(r: Json) -> str:
        e = r["excess_removed"]
        return f"**{e['share']:.0%}** [{e['lo']:.0%}, {e['hi']:.0%}]"

    equal, *others = data["encodings"]
    before = row(equal, old["penalty_per_share"], old["max_penalty"], old["min_share"])
    now = [row(e, choice["scale"], choice["cap"], choice["min_share"]) for e in data["encodings"]]
    return (
        f"- **Novelty, strong enough to matter.** `python bench/novelty.py --json "
        f"bench/results/novelty.json` ({data['histories']} histories of {data['runs']} runs per row, "
        f"the default judging): a penalty of {old['penalty_per_share']:g} "
        f"points per share (motifs in {old['min_share']:.0%} of the window) removed "
        f"{removed(before)} of greedy's excess liked-motif tilt "
        f"({_ci(before['quality_vs_greedy'])} true-quality points against greedy; positive "
        f"is better); the default (`penalty_per_share: {choice['scale']:g}`, "
        f"`max_penalty: {choice['cap']:g}`, `min_share: {choice['min_share']:g}`) removes "
        + ", and ".join(
            f"{removed(r)} at {_ci(r['quality_vs_greedy'])} points"
            + (f" with the {e['encoding']} motif encoding" if e is not equal else "")
            for e, r in zip(data["encodings"], now, strict=True)
        )
        + f". Target (≥ {novelty.TARGET_REMOVED:.0%} at ≤ {novelty.MAX_COST} points, "
        f"{'both encodings' if others else 'one encoding'}): "
        f"{'met' if choice['target_met'] else '**not met**'}.\n\n{_bench_line(path, data)}\n"
    )


def _cut(c: Json, bold: bool = True) -> str:
    """A share of one judge's regret cut, ``**34%** [24, 43]``."""
    share = f"{c['share']:.0%}"
    return f"{f'**{share}**' if bold else share} [{c['lo'] * 100:.0f}, {c['hi'] * 100:.0f}]"


def _significant(d: Json) -> bool:
    return bool(d["lo"] > 0 or d["hi"] < 0)


def _bold_ci(d: Json, scale: float = 1.0, digits: int = 2) -> str:
    text = _ci(d, scale, digits)
    return f"**{text}**" if _significant(d) else text


def _quality_findings(sources: list[tuple[str, Json]]) -> str:
    """docs/evidence.md's findings of bench/quality.py: the summary table and what it says,
    every figure read from bench/results/quality.json."""
    path, data = sources[0]
    sweep = {(s["judge_scale_spread"] > 0, s["judge_corr"]): s for s in data["judge_corr_sweep"]}
    shown = ("median of 3", "mean of 3", "trimmed_mean of 3 (trim 1)", "mean of 3, zscores")

    def panel(s: Json, name: str) -> Json:
        return next(p for p in s["panels"] if p["name"] == name)

    def sweep_row(world: str, s: Json) -> str:
        panels = [panel(s, n) for n in shown]
        regrets = " / ".join(f"{p['mean_regret']:.2f}" for p in panels)
        cuts = " / ".join(_cut(p["cut"]) for p in panels)
        none = all(not _significant(p["minus_one_judge"]) for p in panels)
        return (
            f"| {world} | {{figure}} | {s['one_judge_regret']:.2f} \N{RIGHTWARDS ARROW} "
            f"{regrets}: cut {cuts}{' (none significant)' if none else ''} |"
        )

    worlds = [
        ((False, 0.0), "judges on one scale, \N{GREEK SMALL LETTER RHO} = 0 (independent judges)"),
        ((False, 0.5), "one scale, \N{GREEK SMALL LETTER RHO} = 0.5"),
        ((False, 0.8), "one scale, \N{GREEK SMALL LETTER RHO} = 0.8 (judges on one model)"),
        ((True, 0.0), "judges on different scales, \N{GREEK SMALL LETTER RHO} = 0"),
        ((True, 0.5), "different scales, \N{GREEK SMALL LETTER RHO} = 0.5"),
        ((True, 0.8), "different scales, \N{GREEK SMALL LETTER RHO} = 0.8"),
    ]
    first = (
        "regret: one judge \N{RIGHTWARDS ARROW} panel of 3, median / mean / trimmed mean "
        "(trim 1) / mean of z-scores"
    )
    lines = ["| world | figure | result (95% interval) |", "|---|---|---|"]
    for i, (key, world) in enumerate(worlds):
        lines.append(
            sweep_row(world, sweep[key]).replace("{figure}", first if i == 0 else "the same")
        )
    choose = {r["name"]: r for r in data["choosing_well"]}
    broken = [
        choose[n]
        for n in (
            "median of 3, one broken",
            "mean of 3, one broken",
            "mean of 3, zscores, one broken",
        )
    ]
    lines.append(
        "| one scale, \N{GREEK SMALL LETTER RHO} = 0, one broken judge | regret: median of 3 / "
        "mean of 3 / mean of z-scores | "
        + " / ".join(
            f"**{r['mean_regret']:.2f}**"
            if r["mean_regret"] > choose["one judge"]["mean_regret"]
            else f"{r['mean_regret']:.2f}"
            for r in broken
        )
        + " |"
    )
    rows = {r["name"]: r for r in data["rounds"]["rows"]}
    for drift, label in (("0", "variants lose 0"), ("1.5", "variants lose 1.5")):
        vs = [rows[f"{k} rounds, variants -{drift}"]["vs_control"] for k in (1, 2, 3)]
        what = (
            "rounds \N{MINUS SIGN} equal-calls flat, 1 / 2 / 3 rounds"
            if drift == "0"
            else "the same"
        )
        lines.append(
            f"| bounded position bias, {label} | {what} | "
            + " / ".join(_bold_ci(v) for v in vs)
            + " |"
        )
    variety = {v["encoding"]: {r["name"]: r for r in v["rows"]} for v in data["variety"]}
    for encoding, world, what in (
        (
            "equal",
            "novelty, window 25, liked and other motifs of equal length",
            "share of the excess liked tilt removed: novelty only / exploration (0.15) + novelty",
        ),
        ("old", "the same, old encoding (two-word other motifs)", "the same"),
    ):
        v = variety[encoding]
        same = encoding != "equal" and all(
            v[n]["excess_removed"] == variety["equal"][n]["excess_removed"]
            for n in ("novelty only", "exploration + novelty")
        )
        lines.append(
            f"| {world} | {what} | {_cut(v['novelty only']['excess_removed'])} / "
            f"{_cut(v['exploration + novelty']['excess_removed'])}{' (identical)' if same else ''} |"
        )

    one, med3, med5 = (choose[n] for n in ("one judge", "median of 3", "median of 5"))
    head = data["headline"]
    p0, p5, p8 = (panel(sweep[(False, r)], "median of 3") for r in (0.0, 0.5, 0.8))
    m0, m5, m8 = (panel(sweep[(False, r)], "mean of 3") for r in (0.0, 0.5, 0.8))
    d0, d5, d8 = (panel(sweep[(True, r)], "median of 3") for r in (0.0, 0.5, 0.8))
    z0, z5, z8 = (panel(sweep[(True, r)], "mean of 3, zscores") for r in (0.0, 0.5, 0.8))
    greedy = variety["equal"]["greedy"]
    random_share = data["variety"][0]["random_pick"]["liked_share"]
    nov = variety["equal"]["novelty only"]
    both = variety["equal"]["exploration + novelty"]
    explore = variety["equal"]["exploration only"]
    gains = [rows[f"{k} rounds, variants -0"]["gain_vs_flat"] for k in (1, 2, 3)]
    flat = [rows[f"flat, {n} cards"]["chosen_quality"] for n in (15, 24, 33)]
    late = [rows[f"{k} rounds, variants -1.5"]["vs_control"] for k in (1, 2, 3)]
    early = [rows[f"{k} rounds, variants -0"]["vs_control"] for k in (1, 2, 3)]
    R = "\N{GREEK SMALL LETTER RHO}"

    def pct(x: float) -> str:
        return f"**{x:.1%}**"

    bullets = [
        f"- **A panel of independent judges cuts regret; judges who think alike, by little.** "
        f"At {R} = 0 the median of 3 (shuffled orders) has regret **{med3['mean_regret']:.2f}** "
        f"against **{one['mean_regret']:.2f}** for one judge (paired over the same "
        f"{head['median3_minus_one_judge_regret']['runs']} runs: "
        f"{_bold_ci(head['median3_minus_one_judge_regret'])}, a cut of **{p0['cut']['share']:.0%}**); "
        f"the best card is chosen in {pct(med3['pick_best_rate'])} of runs against "
        f"{pct(one['pick_best_rate'])}. At {R} = 0.5 the cut is {_cut(p5['cut'])}; at {R} = 0.8 "
        f"\N{EM DASH} three rubric prompts on one model \N{EM DASH} {_cut(p8['cut'])}"
        + (", not significant" if not _significant(p8["minus_one_judge"]) else "")
        + f". The mean of 3 cuts **{m0['cut']['share']:.0%}** / **{m5['cut']['share']:.0%}** / "
        f"**{m8['cut']['share']:.0%}** at {R} = 0 / 0.5 / 0.8 when every judge is sound. What "
        "restores the cut is judges whose errors differ (another model or backend), not more "
        "prompts on one model.",
        f"- **Judges on different scales break the median of raw scores; normalising repairs "
        f"it.** When one judge scores higher and wider and another lower and narrower, the "
        f"median of the raw scores cuts **{d0['cut']['share']:.0%}** / **{d5['cut']['share']:.0%}** "
        f"/ **{d8['cut']['share']:.0%}** at {R} = 0 / 0.5 / 0.8, the mean of z-scores "
        f"**{z0['cut']['share']:.0%}** / **{z5['cut']['share']:.0%}** / **{z8['cut']['share']:.0%}** "
        f"(against the median of 3, paired: {_bold_ci(z0['minus_median'])} and "
        f"{_bold_ci(z5['minus_median'])} regret points at {R} = 0 and 0.5). The decision bench "
        "[above](#the-default-aggregation), which adds the bad-judge worlds and 2 to 12 cards, "
        "chose the default.",
        f"- **A broken judge** ({R} = 0, one judge scoring at random): the mean of 3 of raw "
        f"scores has regret **{choose['mean of 3, one broken']['mean_regret']:.2f}**, the median "
        f"of 3 **{choose['median of 3, one broken']['mean_regret']:.2f}**, the median of 5 "
        f"**{choose['median of 5, one broken']['mean_regret']:.2f}**, the mean of 3 after "
        f"z-scores **{choose['mean of 3, zscores, one broken']['mean_regret']:.2f}** (one sound "
        f"judge: {one['mean_regret']:.2f}).",
        f"- **Shuffling removes most of the position bias** (bounded bias, 6 cards): the card "
        f"shown first wins {pct(one['first_shown_win_rate'])} of a single judge's runs (chance "
        f"{one['chance']:.1%}); with the shuffled median of 3 {pct(med3['first_shown_win_rate'])}, "
        f"which removes **{head['share_of_advantage_removed_by_shuffled_median3']:.0%}** of the "
        f"advantage; with one shared order (simulated) "
        f"{pct(choose['median of 3, shared order (sim)']['first_shown_win_rate'])} (shuffled "
        f"\N{MINUS SIGN} shared, paired: {_bold_ci(head['shuffled_minus_shared_first_shown'], 100, 1)} points).",
        f"- **Failed runs.** **{one['failed']}** of {one['runs']} single-judge runs failed (a "
        f"refusal is not re-asked; a bad answer is re-asked once and can recover); "
        f"**{med3['failed']}** with three judges, **{med5['failed']}** with five.",
        "- **Rounds pay against equal calls only late, and only if variants hold their "
        "parents' quality.** With a bounded position bias the chosen card gains "
        + " / ".join(f"**{g:+.2f}**" for g in gains)
        + " over 0 rounds at 1 / 2 / 3 rounds (variants lose 0), but one flat round of as many "
        "calls (15 / 24 / 33 cards: "
        + " / ".join(f"**{q:.2f}**" for q in flat)
        + ") gains most of that too: rounds \N{MINUS SIGN} flat is "
        + " / ".join(_bold_ci(v) for v in early)
        + ". When variants lose 1.5 points on average: "
        + " / ".join(_bold_ci(v) for v in late)
        + ".",
        f"- **Variety.** Greedy picks a card with a liked motif in {pct(greedy['liked_share'])} "
        f"of runs, a random pick would in {pct(random_share)}. Novelty only (window 25) lowers "
        f"the liked share by {_bold_ci(nov['liked_vs_greedy'], 100, 1)} points, removing "
        f"{_cut(nov['excess_removed'])} of that excess, at {_bold_ci(nov['quality_vs_greedy'])} "
        f"true-quality points; with exploration 0.15 too, {_cut(both['excess_removed'])} at "
        f"{_bold_ci(both['quality_vs_greedy'])}; exploration alone "
        f"{_cut(explore['excess_removed'])} at {_bold_ci(explore['quality_vs_greedy'])}. The "
        f"most repeated liked motif is in {pct(greedy['top_liked_share'])} of greedy runs, "
        f"{pct(nov['top_liked_share'])} with novelty.",
    ]
    return (
        "\n".join(lines)
        + "\n\n"
        + "\n".join(bullets)
        + f"\n\nFigures from `{path}`, which does not record the commit it was measured on.\n"
    )


def _quality_sweep(sources: list[tuple[str, Json]]) -> str:
    """bench/quality.py's sweep: per world and correlation, each panel's regret, its cut of
    one judge's regret and its paired difference from the median of 3."""
    path, data = sources[0]
    names = [p["name"] for p in data["judge_corr_sweep"][0]["panels"]]
    heads = [n.replace(" of 3", "") for n in names]
    lines = [
        "| judges | \N{GREEK SMALL LETTER RHO} | one judge | " + " | ".join(heads) + " |",
        "|---" * (3 + len(names)) + "|",
    ]
    for s in data["judge_corr_sweep"]:
        cells = []
        for p in s["panels"]:
            cell = f"{p['mean_regret']:.2f}: {_cut(p['cut'], bold=False)}"
            if p["name"] != "median of 3":
                cell += f"; {_bold_ci(p['minus_median'])}"
            cells.append(cell)
        scales = "different scales" if s["judge_scale_spread"] else "one scale"
        lines.append(
            f"| {scales} | {s['judge_corr']:g} | {s['one_judge_regret']:.2f} | "
            + " | ".join(cells)
            + " |"
        )
    return (
        "\n".join(lines)
        + f"\n\nFigures from `{path}`, which does not record the commit it was measured on.\n"
    )


# --------------------------------------------------------------------------- real model


def _counts(d: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in (d or {}).items()) or "-"


def _real_model(sources: list[tuple[str, Json]]) -> str:
    """scripts/real-model-check's table in short: per run its exit, the ok judges per
    round, the judge and selector statuses, the gates (re-asks by reason), tokens and wall
    time; the servers' measured speeds and threads; the same-seed comparison."""
    import real_model_report

    path, data = sources[0]
    lines = [
        "| model / template | run | exit | ok judges per round | statuses | re-asks by reason "
        "| tokens prompt / completion | wall s | problems |",
        "| --- | --- | --- | --- | --- | --- | --- | ---: | --- |",
    ]
    for r in data["rows"]:
        t = r["transcript"]
        exit_ = "hang" if r["hang"] else "budget" if r.get("over_budget") else str(r["exit"])
        ok = ", ".join(map(str, t.get("ok_judges") or [])) or "-"
        lines.append(
            f"| {r['model']}/{r['template']} | {r['run']} | {exit_} | {ok} "
            f"| {_counts(t.get('statuses'))} | {_counts(t.get('reasks'))} "
            f"| {t.get('prompt_tokens', '-')} / {t.get('completion_tokens', '-')} "
            f"| {r['wall_s']} | {'; '.join(r['problems']) or 'none'} |"
        )
    servers = []
    for key, speed in (data.get("server_speed") or {}).items():
        info = (data.get("servers") or {}).get(key, {})
        if "decode_tok_s" not in speed:
            continue
        servers.append(
            f"{key}: -t {info.get('threads', '?')}, {speed['decode_tok_s']} tokens/s decoding, "
            f"{speed['prompt_tok_s']} tokens/s prompt at load {speed['load_avg_1min']}, timeout "
            f"{info.get('timeout_s', '-')} s per call"
            + (f", too slow: {info['too_slow']}" if info.get("too_slow") else "")
        )
    tail = [f"Servers: {'; '.join(servers)}." if servers else "Servers: none started."]
    tail.append(f"{data.get('wall_s', '?')} s in all, budget {data['settings']['budget_s']:.0f} s.")
    if data.get("skipped"):
        tail.append(f"Not run (over the budget): {', '.join(data['skipped'])}.")
    if data.get("same_seed"):
        tail += real_model_report.comparison_lines(data["same_seed"])
    return "\n".join(lines) + "\n\n" + "\n".join(tail) + f"\n\n{measured_on(path, data)}\n"


BLOCKS: dict[str, Block] = {
    "real-model": Block("bench/results/real_model.json", _real_model),
    "latency": Block("bench/results/latency.json", _latency),
    "latency-summary": Block("bench/results/latency.json", _latency_summary),
    "latency-conversation": Block("bench/results/latency.json", _latency_conversation),
    "latency-quick": Block("bench/results/latency_quick/run*.json", _latency_quick),
    "startup": Block("bench/results/startup.json", _startup),
    "store": Block("bench/results/store.json", _store),
    "batch": Block("bench/results/batch.json", _batch),
    "interrupt": Block("bench/results/interrupt.json", _interrupt),
    "batch-two-machines": Block("bench/results/batch.json", _batch_two_machines),
    "quality": Block("bench/results/quality.json", _quality),
    "judging": Block("bench/results/judging.json", _judging),
    "evidence-decision": Block("bench/results/decision.json", _evidence_decision),
    "evidence-quality": Block("bench/results/quality.json", _evidence_quality),
    "evidence-novelty": Block("bench/results/novelty.json", _evidence_novelty),
    "quality-findings": Block("bench/results/quality.json", _quality_findings),
    "quality-sweep": Block("bench/results/quality.json", _quality_sweep),
}


def render(name: str, root: Path = REPO) -> str:
    """The body of block ``name`` from its JSON under ``root``."""
    if name not in BLOCKS:
        raise KeyError(f"unknown figures block {name!r}; known: {', '.join(sorted(BLOCKS))}")
    block = BLOCKS[name]
    return block.render(_load(block.source, root))


def render_text(text: str, root: Path = REPO) -> str:
    """``text`` with every figures block rendered anew."""
    return MARKER.sub(lambda m: m.group(1) + render(m.group("name"), root) + m.group(4), text)


def documents(root: Path = REPO) -> list[Path]:
    """The Markdown files that may hold figures blocks: README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def stale_blocks(paths: Iterable[Path], root: Path = REPO) -> list[str]:
    """``file: block`` for every block whose text differs from what its JSON renders."""
    out = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for m in MARKER.finditer(text):
            if m.group("body") != render(m.group("name"), root):
                out.append(f"{path.relative_to(root).as_posix()}: {m.group('name')}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale blocks")
    args = parser.parse_args(argv)
    paths = documents()
    if args.check:
        stale = stale_blocks(paths)
        for item in stale:
            print(f"stale figures: {item} (run python scripts/render_figures.py)")
        return 1 if stale else 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        new = render_text(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"rendered: {path.relative_to(REPO).as_posix()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
