"""Which aggregation should be the default? A decision over every world a user can be in.

``python bench/decision.py --json bench/results/decision.json`` scores simulated rounds with the
product's own aggregation and selection code (:func:`image_project.stages.scoring.selection.
aggregate` and :func:`~image_project.stages.scoring.selection.select`, the judges' answers
passed through the product's degeneracy gate :func:`~image_project.stages.scoring.judges.
degeneracy` first, as a run does), for every candidate aggregation in every world, and prints
the decision table and the rule's choice. It is an aggregation-level simulation: the judges'
scores are drawn directly (numpy), not through the real pipeline as bench/quality.py does,
because the decision needs tens of thousands of rounds per world; its judge model is
bench/quality.py's (true quality N(60, 10); each judge adds noise sigma 8, of which a share
rho is the card's own error shared by every judge; a bounded position bias, 10 points for the
card it was shown first down to 0 for the last, each judge shown its own shuffled order; 8
points for a card with a liked motif, present with probability 1 - 0.75^2; scores rounded
and clipped to 0..100). Judge failures (refusals, unparsable answers) are left out: every
judge answers.

Worlds (judge 1 is always sound and on the common scale: it is the "one judge" baseline):

* ``sound, one scale, rho r``: three sound judges on one scale, r = 0, 0.5, 0.8;
* ``sound, different scales, rho r``: judges 2 and 3 stretch their scores by e^(+-0.3)
  around 60 and shift them by +-8 points (bench/quality.py's different-scales world);
* ``one random judge``: judge 3 answers uniform integers 0..100 (rho 0, one scale);
* ``one near-constant judge``: judge 3 answers 80 + one of -1, 0, +1 at random (the 80 / 79 /
  81 judge; when all its answers are equal the gate drops it, as in a run);
* ``one position judge``: judge 3 scores the cards by the place it was shown them, 90 for
  the first down to 50 for the last, +-1 at random (not the exact positions the gate
  catches);

each with N = 2, 3, 6 and 12 cards.

Measure: regret = the best card's true quality - the chosen card's (exploration 0, no
novelty), per round; every candidate sees the same rounds, so differences are paired.

Power (a sequential rule): rounds come in batches of ``--batch`` (each batch's draws derive
from the seed, the world, N and the batch number alone); a cell (world x N) stops when every
candidate's paired difference against the median and against one judge either excludes 0
at 95% or has a half-width at most ``--resolution`` regret points (the smallest difference a
claim names), or at ``--max-rounds``. Stopping on the interval this way makes the intervals
slightly optimistic; the resolution is the guard.

The decision rule (stated before the table was run, printed with it):

1. Admissible: a candidate is admissible when in no world x N is it worse than one sound
   judge (paired 95% interval wholly above 0): a panel must never cost the user more than
   asking one good judge.
2. Among admissible candidates, the default is the one whose worst excess regret over the
   best candidate of the same cell is smallest (minimax regret over the worlds); ties within
   0.02 points go to the lower mean regret over all cells.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from image_project.stages.scoring.aggregation import (  # noqa: E402
    Method,
    Normalisation,
    aggregate_panel,
)
from image_project.stages.scoring.judges import degeneracy  # noqa: E402
from image_project.stages.scoring.selection import aggregate, select  # noqa: E402

SEED = 2026
QUALITY_MEAN, QUALITY_SD, SIGMA, LIKE_BIAS, POSITION_SPAN = 60.0, 10.0, 8.0, 8.0, 10.0
P_LIKED = 1.0 - 0.75**2
SCALE_SPREAD, OFFSET_SPREAD = 0.3, 8.0
SIZES = (2, 3, 6, 12)


@dataclass(frozen=True)
class World:
    name: str
    rho: float = 0.0
    scales: bool = False
    bad: str | None = None  # "random", "constant", "position": judge 3's behaviour


WORLDS: tuple[World, ...] = (
    World("sound, one scale, rho 0", 0.0),
    World("sound, one scale, rho 0.5", 0.5),
    World("sound, one scale, rho 0.8", 0.8),
    World("sound, different scales, rho 0", 0.0, scales=True),
    World("sound, different scales, rho 0.5", 0.5, scales=True),
    World("sound, different scales, rho 0.8", 0.8, scales=True),
    World("one random judge", bad="random"),
    World("one near-constant judge", bad="constant"),
    World("one position judge", bad="position"),
)


@dataclass(frozen=True)
class Candidate:
    name: str
    method: Method
    normalise: Normalisation


CANDIDATES: tuple[Candidate, ...] = (
    Candidate("median", "median", "none"),
    Candidate("mean", "mean", "none"),
    Candidate("mean, zscores", "mean", "zscores"),
    Candidate("median, zscores", "median", "zscores"),
    Candidate("mean, robust", "mean", "robust"),
    Candidate("median, robust", "median", "robust"),
)
"""With three judges the trimmed mean (trim 1) is the median, and the weighted median with
equal weights too, so they are not listed apart."""
ONE_JUDGE = "one judge"


def judge_scores(
    world: World, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, list[dict[str, int]], list[list[int]]]:
    """One round: the cards' true qualities, each judge's ``{card: score}`` and each judge's
    scores in the order it was shown the cards (for the gate)."""
    quality = rng.normal(QUALITY_MEAN, QUALITY_SD, n)
    liked = rng.random(n) < P_LIKED
    shared = rng.normal(0.0, SIGMA, n)
    ids = [chr(ord("A") + i) for i in range(n)]
    panel: list[dict[str, int]] = []
    shown: list[list[int]] = []
    for k in range(3):
        order = rng.permutation(n)  # order[place] = card
        place = np.empty(n)
        place[order] = np.arange(n)
        bias = POSITION_SPAN * (n - 1 - place) / (n - 1)
        own = rng.normal(0.0, SIGMA, n)
        value = quality + math.sqrt(world.rho) * shared + math.sqrt(1 - world.rho) * own
        value = value + bias + LIKE_BIAS * liked
        if world.scales and k > 0:
            step = 1 if k == 1 else -1
            value = (
                QUALITY_MEAN
                + step * OFFSET_SPREAD
                + math.exp(step * SCALE_SPREAD) * (value - QUALITY_MEAN)
            )
        jitter = rng.integers(-1, 2, n)
        if k == 2 and world.bad == "random":
            value = rng.integers(0, 101, n).astype(float)
        elif k == 2 and world.bad == "constant":
            value = (80 + jitter).astype(float)
        elif k == 2 and world.bad == "position":
            value = 90.0 - 40.0 * place / (n - 1) + jitter
        scores = np.clip(np.rint(value), 0, 100).astype(int)
        panel.append({ids[c]: int(scores[c]) for c in range(n)})
        shown.append([int(scores[c]) for c in order])
    return quality, panel, shown


def _chosen(ids: Sequence[str], aggregates: Sequence[float]) -> str:
    """The selector's exploit pick with no novelty penalty: the highest aggregate, ties by
    id (:func:`~image_project.stages.scoring.selection.select`'s order; the aggregates here
    are all above 0, so ``effective`` = ``aggregate``)."""
    return min(zip(ids, aggregates, strict=True), key=lambda p: (-p[1], p[0]))[0]


def round_regrets(
    world: World, n: int, rng: np.random.Generator, seed: int, *, verify: bool = False
) -> dict[str, float]:
    """Every candidate's regret, and one judge's, on one simulated round: the product's
    :func:`aggregate_panel` (the score table's aggregates) and the selector's order
    (:func:`_chosen`). ``verify`` also runs the full
    :func:`aggregate` and :func:`select` path and raises if it chose another card (the
    tests do; the bench skips it for speed)."""
    quality, panel, shown = judge_scores(world, n, rng)
    ids = list(panel[0])
    best = float(quality.max())
    truth = dict(zip(ids, (float(q) for q in quality), strict=True))
    ok = {f"j{k + 1}": panel[k] for k in range(3) if degeneracy(shown[k]) is None}
    judges: Mapping[str, Mapping[str, int]] = ok or {"j1": panel[0]}
    out = {ONE_JUDGE: best - truth[_chosen(ids, [panel[0][i] for i in ids])]}
    for c in CANDIDATES:
        _, aggregates = aggregate_panel(ids, judges, method=c.method, normalise=c.normalise)
        chosen = _chosen(ids, [float(aggregates[i]) for i in ids])
        if verify:
            rows = aggregate(ids, judges, method=c.method, normalise=c.normalise)
            full = select(rows, exploration_rate=0.0, run_seed=seed).selected_id
            if full != chosen:
                raise AssertionError(f"{c.name}: bench chose {chosen}, the product {full}")
        out[c.name] = best - truth[chosen]
    return out


def _interval(d: np.ndarray) -> tuple[float, float, float]:
    mean = float(d.mean())
    half = 1.96 * float(d.std(ddof=1)) / math.sqrt(len(d)) if len(d) > 1 else math.inf
    return mean, mean - half, mean + half


def _settled(d: np.ndarray, resolution: float) -> bool:
    _, low, high = _interval(d)
    return low > 0 or high < 0 or (high - low) / 2 <= resolution


def run_cell(
    world: World, n: int, args: argparse.Namespace, progress: Callable[[str], None]
) -> dict[str, Any]:
    names = [ONE_JUDGE, *(c.name for c in CANDIDATES)]
    rows: list[list[float]] = []
    batch = 0
    wi = WORLDS.index(world)
    while True:
        rng = np.random.default_rng([args.seed, wi, n, batch])
        for i in range(args.batch):
            r = round_regrets(world, n, rng, seed=args.seed + i)
            rows.append([r[x] for x in names])
        batch += 1
        data = np.array(rows)
        settled = all(
            _settled(data[:, names.index(c.name)] - data[:, ref], args.resolution)
            for c in CANDIDATES
            for ref in (0, 1)
            if c.name != "median" or ref == 0
        )
        if settled or len(rows) >= args.max_rounds:
            break
    data = np.array(rows)
    progress(f"  {world.name}, N {n}: {len(rows)} rounds ({'settled' if settled else 'cap'})")
    cell: dict[str, Any] = {
        "world": world.name,
        "n": n,
        "rounds": len(rows),
        "settled": settled,
        "regret": {x: float(data[:, i].mean()) for i, x in enumerate(names)},
        "vs_median": {},
        "vs_one_judge": {},
    }
    for c in CANDIDATES:
        i = names.index(c.name)
        cell["vs_median"][c.name] = _interval(data[:, i] - data[:, 1])
        cell["vs_one_judge"][c.name] = _interval(data[:, i] - data[:, 0])
    return cell


def default_candidate() -> str:
    """The candidate that is the product's default (read from the config model)."""
    from image_project.config.models import ScoringConfig

    d = ScoringConfig()
    return next(
        (c.name for c in CANDIDATES if (c.method, c.normalise) == (d.aggregation, d.normalise)),
        f"{d.aggregation}, {d.normalise} (not a candidate)",
    )


def decide(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The stated rule (module docstring) applied to the table."""
    names = [c.name for c in CANDIDATES]
    worse_than_one = {
        name: [f"{c['world']}, N {c['n']}" for c in cells if c["vs_one_judge"][name][1] > 0]
        for name in names
    }
    admissible = [n for n in names if not worse_than_one[n]]
    excess = {
        name: max(c["regret"][name] - min(c["regret"][x] for x in names) for c in cells)
        for name in names
    }
    mean = {name: sum(c["regret"][name] for c in cells) / len(cells) for name in names}
    pool = admissible or names
    best = min(excess[x] for x in pool)
    tied = [x for x in pool if excess[x] <= best + 0.02]
    choice = min(tied, key=lambda x: mean[x])
    return {
        "admissible": admissible,
        "worse_than_one_judge_in": worse_than_one,
        "worst_excess": excess,
        "mean_regret": mean,
        "choice": choice,
    }


def _fmt(d: Sequence[float]) -> str:
    return f"{d[0]:+.2f} [{d[1]:+.2f}, {d[2]:+.2f}]"


def format_report(report: Mapping[str, Any]) -> str:
    names = [c.name for c in CANDIDATES]
    lines = [
        f"decision bench: seed {report['seed']}, batches of {report['batch']}, resolution "
        f"{report['resolution']}, at most {report['max_rounds']} rounds per cell; commit "
        f"{report['commit']}, {report['machine']}",
        "cell: regret; then candidate - median and candidate - one judge, paired [95% t]",
    ]
    for c in report["cells"]:
        lines.append(
            f"{c['world']}, N {c['n']} ({c['rounds']} rounds"
            f"{'' if c['settled'] else ', cap reached'}): one judge {c['regret'][ONE_JUDGE]:.2f}"
        )
        for name in names:
            vm = "" if name == "median" else _fmt(c["vs_median"][name])
            lines.append(
                f"  {name:16} {c['regret'][name]:5.2f}  vs median {vm:26}"
                f" vs one judge {_fmt(c['vs_one_judge'][name])}"
            )
    d = report["decision"]
    lines.append("decision rule: 1. admissible = never worse than one judge (interval above 0);")
    lines.append("  2. the smallest worst excess over the cell's best; ties within 0.02 by mean")
    for name in names:
        worse = d["worse_than_one_judge_in"][name]
        lines.append(
            f"  {name:16} worst excess {d['worst_excess'][name]:.2f}  mean regret "
            f"{d['mean_regret'][name]:.3f}  "
            + (f"worse than one judge in: {'; '.join(worse)}" if worse else "admissible")
        )
    lines.append(f"choice: {d['choice']}; the product's default: {report['default']}")
    return "\n".join(lines)


def _ci(d: Sequence[float]) -> str:
    text = f"{d[0]:+.2f} [{d[1]:+.2f}, {d[2]:+.2f}]"
    bold = d[1] > 0 or d[2] < 0
    return f"**{text}**" if bold else text


def markdown(report: Mapping[str, Any]) -> str:
    """The decision table for docs/evidence.md (generated from the JSON, checked by
    tests/test_bench_decision.py): per world, a row per candidate and a column per N, each
    cell the regret, then paired [95% t] against the median and against one judge, bold
    where the interval excludes 0."""
    names = [c.name for c in CANDIDATES]
    sizes = sorted({c["n"] for c in report["cells"]})
    worlds = list(dict.fromkeys(c["world"] for c in report["cells"]))
    cell = {(c["world"], c["n"]): c for c in report["cells"]}
    lines = [
        f"`python bench/decision.py --json bench/results/decision.json`: seed {report['seed']}, batches "
        f"of {report['batch']} rounds, a cell stops when every paired interval excludes 0 or "
        f"is at most ±{report['resolution']} wide, or at {report['max_rounds']} rounds; commit "
        f"{report['commit']}, {report['machine']}, {report['seconds']:.0f} s.",
        "",
    ]
    for world in worlds:
        lines.append(f"**{world}**")
        lines.append("")
        lines.append("| candidate | " + " | ".join(f"N = {n}" for n in sizes) + " |")
        lines.append("|---|" + "---|" * len(sizes))
        rounds = " | ".join(
            f"{cell[world, n]['rounds']} rounds{'' if cell[world, n]['settled'] else ' (cap)'}"
            for n in sizes
        )
        lines.append(f"| rounds | {rounds} |")
        one = " | ".join(f"{cell[world, n]['regret'][ONE_JUDGE]:.2f}" for n in sizes)
        lines.append(f"| one judge | {one} |")
        for name in names:
            cells = []
            for n in sizes:
                c = cell[world, n]
                vm = "" if name == "median" else f"; vs median {_ci(c['vs_median'][name])}"
                cells.append(
                    f"{c['regret'][name]:.2f}{vm}; vs one judge {_ci(c['vs_one_judge'][name])}"
                )
            mark = " (default)" if name == report.get("default") else ""
            lines.append(f"| {name}{mark} | " + " | ".join(cells) + " |")
        lines.append("")
    d = report["decision"]
    lines.append(
        "| candidate | worse than one judge in | worst excess over the cell's best | mean regret |"
    )
    lines.append("|---|---|---|---|")
    for name in names:
        worse = "; ".join(d["worse_than_one_judge_in"][name]) or "none (admissible)"
        lines.append(
            f"| {name} | {worse} | {d['worst_excess'][name]:.2f} | {d['mean_regret'][name]:.3f} |"
        )
    lines.append("")
    lines.append(
        f"The rule chooses **{d['choice']}**; the product's default is **{report.get('default', 'not recorded')}**."
    )
    return "\n".join(lines)


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except OSError:
        return "unknown"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--batch", type=int, default=500, help="rounds per batch")
    parser.add_argument("--resolution", type=float, default=0.15, help="regret points")
    parser.add_argument("--max-rounds", type=int, default=6000, help="per cell")
    parser.add_argument("--sizes", type=lambda s: tuple(int(x) for x in s.split(",")))
    parser.add_argument("--worlds", type=lambda s: tuple(s.split(";")), help="names, ';'")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--quick", action="store_true", help="one batch of 40 per cell")
    parser.add_argument(
        "--markdown", type=Path, help="print the docs table of this saved report and stop"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.max_rounds = 40, 40
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    sizes = args.sizes or SIZES
    worlds = [w for w in WORLDS if args.worlds is None or w.name in args.worlds]
    started = time.monotonic()
    commit = _commit()  # before the run: the code measured
    cells = []
    for world in worlds:
        for n in sizes:
            cells.append(run_cell(world, n, args, lambda s: print(s, file=sys.stderr)))
    report = {
        "seed": args.seed,
        "batch": args.batch,
        "resolution": args.resolution,
        "max_rounds": args.max_rounds,
        "commit": commit,
        "default": default_candidate(),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "seconds": round(time.monotonic() - started, 1),
        "cells": cells,
        "decision": decide(cells),
    }
    print(format_report(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
