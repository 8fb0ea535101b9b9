"""How strong should the novelty penalty be? A sweep in bench/quality.py's world.

``python bench/novelty.py --json bench/results/novelty.json`` runs bench/quality.py's Variety
part (the real pipeline in its simulated world: histories of consecutive full runs sharing one
generations history) with the product's default judging (``aggregation`` and ``normalise``
read from the config model) and no exploration, greedy against novelty only, for every
penalty scale ``novelty.penalty_per_share`` (the cap ``novelty.max_penalty`` kept at 2.5
times it, the shipped ratio 25 / 10) and motif threshold ``novelty.min_share`` of the grid,
in both motif encodings (``equal`` and ``old``), over the same histories (paired with
greedy).

Target: remove at least 50 % of greedy's excess liked-motif tilt (greedy's liked share - a
random pick's) at a true-quality cost of at most 0.3 points, in both encodings. The choice
rule: among the settings meeting the target on their point estimates in both encodings, the
weakest (smallest scale, then largest threshold); when none does, the setting with the
largest removed share in the worse encoding among those within the cost, and the report
says the target was not met.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import quality  # noqa: E402

from image_project.config.loading import load_config  # noqa: E402
from image_project.config.models import NoveltyConfig, ScoringConfig  # noqa: E402
from image_project.stages.profile import load_profile  # noqa: E402

TARGET_REMOVED = 0.5
MAX_COST = 0.3
CAP_RATIO = 2.5


def judging_overrides() -> list[str]:
    """The product's default judging, read from the config model."""
    d = ScoringConfig()
    return [
        f"prompt.scoring.aggregation={d.aggregation}",
        f"prompt.scoring.normalise={d.normalise}",
    ]


def novelty_overrides(scale: float, min_share: float) -> list[str]:
    return [
        f"prompt.scoring.novelty.penalty_per_share={scale:g}",
        f"prompt.scoring.novelty.max_penalty={CAP_RATIO * scale:g}",
        f"prompt.scoring.novelty.min_share={min_share:g}",
    ]


async def sweep(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_config(root=REPO, env={})
    likes = load_profile(cfg.prompt.profile_path).likes
    greedy_s, novelty_s = quality.STRATEGIES[0], quality.STRATEGIES[2]
    judging = judging_overrides()
    out: dict[str, Any] = {"encodings": []}
    for encoding in args.encodings:
        params = replace(quality.world_params(args), motif_encoding=encoding)

        async def histories(
            strategy: quality.Strategy, extra: Sequence[str], params: Any = params
        ) -> list[Any]:
            return [
                await quality._history(args, params, likes, strategy, h, extra)
                for h in range(args.variety_seeds)
            ]

        greedy = await histories(greedy_s, judging)
        rows = []
        for scale in args.scales:
            for min_share in args.min_shares:
                stats = await histories(novelty_s, [*judging, *novelty_overrides(scale, min_share)])
                row = quality._strategy_row(
                    f"novelty {scale:g}/share, min share {min_share:g}",
                    0.0,
                    args.novelty_window,
                    stats,
                    greedy,
                    args.seed,
                )
                row.update(scale=scale, cap=CAP_RATIO * scale, min_share=min_share)
                rows.append(row)
                print(
                    f"{encoding}: {row['name']}: removed {row['excess_removed']['share']:.0%}, "
                    f"quality {row['quality_vs_greedy']['mean']:+.2f}",
                    file=sys.stderr,
                )
        out["encodings"].append(
            {
                "encoding": encoding,
                "greedy_liked_share": quality._mean([g.liked for g in greedy]),
                "random_liked_share": quality._mean([g.random_liked for g in greedy]),
                "greedy_quality": quality._mean([g.quality for g in greedy]),
                "rows": rows,
            }
        )
    out["decision"] = decide(out["encodings"])
    return out


def decide(encodings: Sequence[dict[str, Any]]) -> dict[str, Any]:
    keys = [(r["scale"], r["min_share"]) for r in encodings[0]["rows"]]

    def worst(key: tuple[float, float]) -> tuple[float, float]:
        rows = [
            next(r for r in e["rows"] if (r["scale"], r["min_share"]) == key) for e in encodings
        ]
        removed = min(r["excess_removed"]["share"] for r in rows)
        cost = max(-r["quality_vs_greedy"]["mean"] for r in rows)
        return removed, cost

    meeting = [k for k in keys if worst(k)[0] >= TARGET_REMOVED and worst(k)[1] <= MAX_COST]
    if meeting:
        choice = min(meeting, key=lambda k: (k[0], -k[1]))
    else:
        within = [k for k in keys if worst(k)[1] <= MAX_COST] or keys
        choice = max(within, key=lambda k: worst(k)[0])
    removed, cost = worst(choice)
    return {
        "target_met": bool(meeting),
        "scale": choice[0],
        "cap": CAP_RATIO * choice[0],
        "min_share": choice[1],
        "worst_removed": removed,
        "worst_cost": cost,
    }


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"novelty sweep: seed {report['seed']}, {report['histories']} histories of "
        f"{report['runs']} runs, judging {' '.join(report['judging'])}, exploration 0; "
        f"commit {report['commit']}, {report['machine']}, {report['seconds']} s",
    ]
    for e in report["encodings"]:
        lines.append(
            f"{e['encoding']} motifs: greedy liked {e['greedy_liked_share']:.1%}, random pick "
            f"{e['random_liked_share']:.1%}, greedy quality {e['greedy_quality']:.2f}"
        )
        lines.append(
            f"  {'scale':>5} {'cap':>5} {'min share':>9}  {'liked':>6}  "
            f"{'excess removed [95%]':>22}  {'quality vs greedy [95%]':>24}"
        )
        for r in e["rows"]:
            x, q = r["excess_removed"], r["quality_vs_greedy"]
            lines.append(
                f"  {r['scale']:>5g} {r['cap']:>5g} {r['min_share']:>9g}  {r['liked_share']:>6.1%}"
                f"  {x['share']:>7.0%} [{x['lo']:>4.0%}, {x['hi']:>4.0%}]      "
                f"  {q['mean']:>+6.2f} [{q['lo']:+.2f}, {q['hi']:+.2f}]"
            )
    d = report["decision"]
    lines.append(
        f"choice: penalty_per_share {d['scale']:g}, max_penalty {d['cap']:g}, min_share "
        f"{d['min_share']:g} (worst encoding: removes {d['worst_removed']:.0%}, costs "
        f"{d['worst_cost']:.2f} points); target >= {TARGET_REMOVED:.0%} at <= {MAX_COST} "
        f"points {'met' if d['target_met'] else 'NOT met'}"
    )
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    """The novelty table for docs/evidence.md (generated from the JSON; checked by
    tests/test_bench_decision.py)."""
    lines = [
        f"`python bench/novelty.py --json bench/results/novelty.json`: seed {report['seed']}, "
        f"{report['histories']} histories of {report['runs']} consecutive runs per row (the same "
        f"histories in every row), judging {', '.join(report['judging'])}, exploration 0; commit "
        f"{report['commit']}, {report['machine']}, {report['seconds']} s.",
        "",
    ]
    for e in report["encodings"]:
        lines.append(
            f"**{e['encoding']} motifs**: greedy (no novelty) picks a liked motif in "
            f"{e['greedy_liked_share']:.1%} of runs, a random pick would in "
            f"{e['random_liked_share']:.1%}."
        )
        lines.append("")
        lines.append(
            "| penalty_per_share | max_penalty | min_share | liked | excess tilt removed [95%] "
            "| true quality vs greedy [95%] |"
        )
        lines.append("|---|---|---|---|---|---|")
        for r in e["rows"]:
            x, q = r["excess_removed"], r["quality_vs_greedy"]
            lines.append(
                f"| {r['scale']:g} | {r['cap']:g} | {r['min_share']:g} | {r['liked_share']:.1%} | "
                f"{x['share']:.0%} [{x['lo']:.0%}, {x['hi']:.0%}] | "
                f"{q['mean']:+.2f} [{q['lo']:+.2f}, {q['hi']:+.2f}] |"
            )
        lines.append("")
    d = report["decision"]
    lines.append(
        f"Choice: `penalty_per_share: {d['scale']:g}`, `max_penalty: {d['cap']:g}`, `min_share: "
        f"{d['min_share']:g}`; in the worse encoding it removes {d['worst_removed']:.0%} of the "
        f"excess at a cost of {d['worst_cost']:.2f} true-quality points. Target (at least "
        f"{TARGET_REMOVED:.0%} at most {MAX_COST} points in both encodings): "
        f"{'met' if d['target_met'] else 'not met'}."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument(
        "--scales", type=lambda s: [float(x) for x in s.split(",")], default=[10, 30, 50]
    )
    p.add_argument(
        "--min-shares", type=lambda s: [float(x) for x in s.split(",")], default=[0.2, 0.1]
    )
    p.add_argument("--encodings", type=lambda s: s.split(","), default=["equal", "old"])
    p.add_argument("--histories", type=int, default=12, help="per row (CPU: ~4.6 s each)")
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path, help="print the docs table of this saved report")
    own, rest = p.parse_known_args(argv)
    if own.markdown is not None:
        print(markdown(json.loads(own.markdown.read_text())))
        return 0
    args = quality.parse_args(["--silent", "--variety-seeds", str(own.histories), *rest])
    args.scales, args.min_shares, args.encodings = own.scales, own.min_shares, own.encodings
    started = time.monotonic()
    commit = subprocess.run(  # before the run: the code measured
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    report = anyio.run(sweep, args)
    report.update(
        seed=args.seed,
        histories=args.variety_seeds,
        runs=args.variety_runs,
        judging=judging_overrides(),
        defaults={k: v for k, v in NoveltyConfig().model_dump().items()},
        commit=commit,
        machine=f"{platform.node()} {platform.machine()}, {os.cpu_count()} cores",
        seconds=round(time.monotonic() - started),
    )
    print(format_report(report))
    if own.json is not None:
        own.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
