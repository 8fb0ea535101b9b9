"""The selection-quality bench's report: the parts run and joined, its table and its
figure.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from image_project.config.loading import load_config
from image_project.stages.profile import load_profile

from .runs import (
    REFERENCE_PANEL,
    by_spread,
    choosing_well,
    headline,
    judge_corr_sweep,
    rounds_part,
    spread_label,
    sweep_panels,
    variety,
)
from .world import REPO, WorldParams, world_params

# --------------------------------------------------------------------------- output


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    """``value * scale`` in ``spec`` (a trailing ``%`` is appended literally), or ``n/a`` for
    a figure with no data (NaN, or null once read back from ``--json``)."""
    if value is None or math.isnan(value):
        return "n/a"
    suffix = "%" if spec.endswith("%") else ""
    return format(value * scale, spec.removesuffix("%")) + suffix


def _interval(d: Mapping[str, Any] | None, spec: str, scale: float = 1.0) -> str:
    """``mean [lo, hi]`` of a paired figure."""
    if d is None:
        return "n/a"
    return (
        f"{_fmt(d['mean'], spec, scale)} [{_fmt(d['lo'], spec, scale)}, "
        f"{_fmt(d['hi'], spec, scale)}]"
    )


def _share(d: Mapping[str, Any], spec: str = ".0f%") -> str:
    return f"{_fmt(d['share'], spec, 100)} [{_fmt(d['lo'], spec, 100)}, {_fmt(d['hi'], spec, 100)}]"


def format_table(report: Mapping[str, Any]) -> str:
    """The report as the text table printed on stdout (deterministic for a seed)."""
    world = report["world"]
    lines = [
        f"world: seed {report['seed']}, {report['ideas']} ideas, "
        + ", ".join(f"{k}={v}" for k, v in world.items()),
        "",
        f"choosing well ({report['seeds']} run seeds each; prompt only, exploration 0, "
        f"novelty off; judge correlation {world['judge_corr']:g})",
        f"{'configuration':<34}{'best%':>7}{'regret':>8}{'+-95%':>7}{'failed':>8}"
        f"{'first-shown%':>14}{'chance%':>9}",
    ]
    for r in report["choosing_well"]:
        lines.append(
            f"{r['name']:<34}{_fmt(r['pick_best_rate'], '.1f', 100):>7}"
            f"{_fmt(r['mean_regret'], '.2f'):>8}{_fmt(r['regret_ci95'], '.2f'):>7}"
            f"{r['failed']:>8}"
            f"{_fmt(r['first_shown_win_rate'], '.1f', 100):>14}{100 * r['chance']:>9.1f}"
        )
    h = report["headline"]
    if h is not None:
        d = h["median3_minus_one_judge_regret"]
        adv = h["first_position_advantage"]
        lines += [
            f"median of 3 - one judge, regret (paired over {d['runs']} runs): "
            f"{_interval(d, '+.2f')} (p {_fmt(d['p'], '.2g')})",
            "first-position advantage (first-shown win rate - chance): "
            + ", ".join(f"{k} {_fmt(v, '+.1f', 100)} pts" for k, v in adv.items())
            + "; share of the single judge's removed by the shuffled median of 3: "
            + _fmt(h["share_of_advantage_removed_by_shuffled_median3"], ".0f%", 100),
            "first-shown win rate, shuffled - shared order (median of 3, paired): "
            + _interval(h["shuffled_minus_shared_first_shown"], "+.1f", 100)
            + f" pts (p {_fmt(h['shuffled_minus_shared_first_shown']['p'], '.2g')})",
        ]
    sweep = report.get("judge_corr_sweep") or []
    if sweep:
        lines += [
            "",
            "judge correlation sweep (the same run seeds; panels of 3; regret, and the panel's "
            "paired cut of one judge's regret [95% bootstrap interval])",
        ]
        for (scale, offset), rows in by_spread(sweep):
            names = list(dict.fromkeys(p["name"] for row in rows for p in row["panels"]))
            lines += [
                spread_label(scale, offset),
                f"{'corr':<30}" + "".join(f"{row['judge_corr']:>24.1f}" for row in rows),
                f"{'one judge':<30}"
                + "".join(f"{_fmt(row['one_judge_regret'], '.2f'):>24}" for row in rows),
            ]
            for name in names:
                cells = []
                for row in rows:
                    p = next((p for p in row["panels"] if p["name"] == name), None)
                    if p is None or "error" in p:
                        text = "not run" if p is None else "not run (config)"
                    else:
                        text = f"{_fmt(p['mean_regret'], '.2f')} ({_share(p['cut'])})"
                    cells.append(f"{text:>24}")
                lines.append(f"{name:<30}" + "".join(cells))
            lines.append(
                f"  panel - {REFERENCE_PANEL.name} (normalise none), regret paired [95% t]"
            )
            for name in names:
                cells = []
                for row in rows:
                    p = next((p for p in row["panels"] if p["name"] == name), None)
                    vs = None if p is None else p.get("minus_median")
                    cells.append(f"{_interval(vs, '+.2f') if vs else 'n/a':>24}")
                if name != REFERENCE_PANEL.name:
                    lines.append(f"  {name:<28}" + "".join(cells))
    for v in report["variety"]:
        rnd = v["random_pick"]
        lines += [
            "",
            f"variety, {v['encoding']} motifs ({v['runs_per_history']} consecutive runs sharing "
            f"one history, x{v['histories']} histories; {report['variety_judges']} judges, "
            "median; paired with greedy over the histories, 95% intervals)",
            f"{'strategy':<24}{'rate':>5}{'window':>7}{'liked%':>8}{'vs greedy (pts)':>24}"
            f"{'excess removed':>20}{'top-liked%':>11}{'distinct':>9}{'quality':>8}"
            f"{'vs greedy':>22}{'failed':>7}",
            f"{'random pick (expected)':<24}{'':>5}{'':>7}{_fmt(rnd['liked_share'], '.1f', 100):>8}"
            f"{'':>24}{'':>20}{'':>11}{'':>9}{_fmt(rnd['mean_quality'], '.2f'):>8}",
        ]
        for r in v["rows"]:
            greedy = r["name"] == "greedy"
            lines.append(
                f"{r['name']:<24}{r['exploration_rate']:>5.2f}{r['novelty_window']:>7}"
                f"{_fmt(r['liked_share'], '.1f', 100):>8}"
                f"{'' if greedy else _interval(r['liked_vs_greedy'], '+.1f', 100):>24}"
                f"{'' if greedy else _share(r['excess_removed']):>20}"
                f"{_fmt(r['top_liked_share'], '.1f', 100):>11}"
                f"{_fmt(r['distinct_motifs'], '.1f'):>9}{_fmt(r['mean_quality'], '.2f'):>8}"
                f"{'' if greedy else _interval(r['quality_vs_greedy'], '+.2f'):>22}"
                f"{r['failed']:>7}"
            )
    return "\n".join([*lines, "", *_rounds_lines(report["rounds"])])


def _rounds_lines(rounds: Mapping[str, Any] | None) -> list[str]:
    if rounds is None:
        return ["rounds: not measured (--rounds-seeds 0)"]
    lines = [
        f"rounds ({rounds['seeds']} run seeds each; median of {rounds['judges']} judges, "
        f"exploration 0, novelty off; {rounds['survivors']} survivors x {rounds['variants']} "
        f"variants, parents kept, code selector; variant quality = parent - drift + N(0, "
        f"{rounds['child_sigma']:g}); {rounds['position_bias']} position bias; flat controls: "
        "one round of as many generator + judge calls; paired, 95% intervals)",
        f"{'rows':<26}{'chosen':>8}{'vs 0 rounds':>22}{'vs equal-calls flat':>22}"
        f"{'best-seen':>10}{'regret':>8}{'best%':>7}{'failed':>7}"
        f"{'gen':>6}{'judge':>6}{'calls':>6}{'dropped':>8}",
    ]
    for r in rounds["rows"]:
        gain = {"mean": r["gain_vs_flat"], "lo": r["gain_vs_flat"] - r["gain_ci95"],
                "hi": r["gain_vs_flat"] + r["gain_ci95"]}  # fmt: skip
        first = r["rounds"] == 0 and not r["control"]
        lines.append(
            f"{r['name']:<26}{_fmt(r['chosen_quality'], '.2f'):>8}"
            f"{'' if first else _interval(gain, '+.2f'):>22}"
            f"{_interval(r['vs_control'], '+.2f') if r['vs_control'] else '':>22}"
            f"{_fmt(r['best_seen'], '.2f'):>10}"
            f"{_fmt(r['mean_regret'], '.2f'):>8}"
            f"{_fmt(r['pick_best_rate'], '.1f', 100):>7}{r['failed']:>7}"
            f"{_fmt(r['generator_calls'], '.1f'):>6}{_fmt(r['judge_calls'], '.1f'):>6}"
            f"{_fmt(r['calls'], '.1f'):>6}{_fmt(r['dropped'], '.2f'):>8}"
        )
    lines.append(
        "per round (round 0 first): true quality of the top-ranked card / of the best card"
    )
    for r in (r for r in rounds["rows"] if not r["control"] and r["rounds"]):
        tops = " > ".join(_fmt(q, ".2f") for q in r["top_per_round"])
        bests = " > ".join(_fmt(q, ".2f") for q in r["best_per_round"])
        lines.append(f"  {r['name']}: top {tops}; best {bests}")
    return lines


def plot(report: Mapping[str, Any], path: Path) -> None:
    """One PNG, four panels: regret and pick-the-best rate per judging configuration, the
    first-shown win rate against chance, variety against quality per strategy, and the
    chosen card's true quality against the calls spent per number of rounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["choosing_well"] or [{"name": "(not run)", "mean_regret": 0.0,
        "regret_ci95": 0.0, "pick_best_rate": 0.0, "first_shown_win_rate": 0.0,
        "chance": 0.0, "broken": False, "shuffled": True}]  # fmt: skip
    names = [r["name"] for r in rows]
    fig, grid = plt.subplots(2, 2, figsize=(16, 12), gridspec_kw={"width_ratios": [1.3, 1]})
    axes = grid.flatten()
    ax = axes[0]
    ys = range(len(rows))
    colours = [
        "#d62728" if r["broken"] else "#7f7f7f" if not r["shuffled"] else "#1f77b4" for r in rows
    ]
    ax.barh(
        list(ys),
        [r["mean_regret"] for r in rows],
        xerr=[0 if math.isnan(r["regret_ci95"]) else r["regret_ci95"] for r in rows],
        color=colours,
        error_kw={"elinewidth": 1, "capsize": 3},
    )
    for y, r in zip(ys, rows, strict=True):
        ax.text(0.05, y, f"{100 * r['pick_best_rate']:.0f}% best", va="center", fontsize=8,
                color="white")  # fmt: skip
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean regret (true-quality points; lower is better)")
    ax.set_title("Choosing well: regret, and how often the best card wins")

    ax = axes[1]
    ax.barh(list(ys), [100 * r["first_shown_win_rate"] for r in rows], color=colours)
    ax.axvline(100 * rows[0]["chance"], color="black", linestyle="--", linewidth=1)
    ax.text(100 * rows[0]["chance"], len(rows) - 0.4, " chance", fontsize=8)
    ax.set_yticks(list(ys), [""] * len(rows))
    ax.invert_yaxis()
    ax.set_xlabel("% of runs won by the card a judge saw first")
    ax.set_title("Position bias: first-shown win rate")

    ax = axes[2]
    sweep = report.get("judge_corr_sweep") or []
    if sweep:
        _plot_sweep(ax, sweep)
    else:
        ax.set_axis_off()
    _plot_rounds(axes[3], report["rounds"])
    fig.suptitle(
        f"bench/quality.py: simulated world, seed {report['seed']} "
        "(top left: blue shuffled panels, red one broken judge, grey shared order, simulated)",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_sweep(ax: Any, sweep: Sequence[Mapping[str, Any]]) -> None:
    """The sweep panel: the cut of one judge's regret against judge correlation, one colour
    per panel, solid for judges on one scale and dashed for judges on different scales (a
    panel whose figures repeat an earlier panel's, as ``weighted_median`` with equal weights
    repeats the median, is left out)."""
    colours: dict[str, str] = {}
    styles = ("-", "--", ":")
    groups = by_spread(sweep)
    for g, ((scale, offset), rows) in enumerate(groups):
        seen: list[list[float]] = []
        names = list(dict.fromkeys(p["name"] for row in rows for p in row["panels"]))
        for k, name in enumerate(names):
            xs, ys, lo, hi = [], [], [], []
            for row in rows:
                cell = next((p for p in row["panels"] if p["name"] == name), None)
                if cell is None or "error" in cell:
                    continue
                cut = cell["cut"]
                if cut["share"] is None or math.isnan(cut["share"]):
                    continue
                xs.append(row["judge_corr"] + 0.008 * (k - len(names) / 2) + 0.004 * g)
                ys.append(100 * cut["share"])
                lo.append(100 * (cut["share"] - cut["lo"]))
                hi.append(100 * (cut["hi"] - cut["share"]))
            if not ys or ys in seen:
                continue
            seen.append(ys)
            colour = colours.setdefault(name, f"C{len(colours) % 10}")
            world = "one scale" if scale == 0 and offset == 0 else "different scales"
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=2, color=colour,
                        linestyle=styles[g % len(styles)], label=f"{name} ({world})")  # fmt: skip
    ax.axhline(0, color="black", linewidth=1)
    ax.set_xlabel("judge correlation (share of each judge's noise in common)")
    ax.set_ylabel("% of one judge's regret removed by a panel of 3 (95% interval)")
    ax.set_title("Panels when judges think alike (solid: one scale; dashed: different scales)")
    ax.legend(fontsize=6, ncol=2)


def _ci(value: float | None) -> float:
    return 0.0 if value is None or math.isnan(value) else value


def _plot_rounds(ax: Any, rounds: Mapping[str, Any] | None) -> None:
    """The Rounds panel: per variant drift, the chosen card's mean true quality against the
    mean generator + judge calls spent per number of rounds, and the equal-calls flat
    controls."""
    if rounds is None:
        ax.set_axis_off()
        return
    flat = next(r for r in rounds["rows"] if r["rounds"] == 0 and not r["control"])
    controls = [r for r in rounds["rows"] if r["control"]]
    for drift in rounds["drifts"]:
        rows = [flat, *(r for r in rounds["rows"] if r["drift"] == drift)]
        xs = [r["calls"] for r in rows]
        ax.errorbar(xs, [r["chosen_quality"] for r in rows],
                    yerr=[_ci(r["chosen_ci95"]) for r in rows], marker="o", capsize=3,
                    label=f"rounds, variants lose {drift:g} on average")  # fmt: skip
    if controls:
        ax.errorbar([flat["calls"], *(r["calls"] for r in controls)],
                    [flat["chosen_quality"], *(r["chosen_quality"] for r in controls)],
                    yerr=[_ci(flat["chosen_ci95"]), *(_ci(r["chosen_ci95"]) for r in controls)],
                    marker="^", linestyle=":", color="#2ca02c", capsize=3,
                    label="one flat round of as many calls")  # fmt: skip
        for r in controls:
            ax.annotate(f"{r['ideas']} cards", (r["calls"], r["chosen_quality"]),
                        textcoords="offset points", xytext=(6, 4), fontsize=8)  # fmt: skip
    ax.set_xlabel("generator + judge calls per run (mean)")
    ax.set_ylabel("mean true quality of the chosen card")
    ax.set_title(
        f"Rounds: {rounds['survivors']} survivors x {rounds['variants']} variants, "
        f"{rounds['position_bias']} position bias"
    )
    ax.legend(fontsize=8, loc="lower right")


PARTS = ("choosing", "sweep", "variety", "variety-check", "rounds")
"""The parts ``--only`` can pick (``variety-check``: Variety in the ``old`` encoding)."""


async def build_report(args: argparse.Namespace) -> dict[str, Any]:
    """Run every part (or those of ``--only``) and return the report (what ``--json``
    writes). The parts are independent (each derives its draws from ``--seed``), so parts
    run apart and joined with ``--merge`` give the report of one full run."""
    cfg = load_config(root=REPO, env={})
    likes = load_profile(cfg.prompt.profile_path).likes
    only = set(args.only or PARTS)
    choosing = await choosing_well(args, likes) if "choosing" in only else []
    sweep = await judge_corr_sweep(args, likes) if args.corr_sweep and "sweep" in only else []
    varied = []
    if args.variety_runs > 0:
        encodings = [args.motif_encoding] if "variety" in only else []
        if "variety-check" in only and args.motif_encoding != "old" and not args.quick:
            encodings.append("old")
        varied = await variety(args, likes, encodings)
    exclude = {"regrets", "firsts"}
    rounds = await rounds_part(args, likes) if "rounds" in only else None
    return {
        "seed": args.seed,
        "ideas": args.ideas,
        "seeds": args.seeds,
        "variety_judges": args.variety_judges,
        "world": asdict(world_params(args)),
        "liked_motifs": list(likes[: args.liked_motifs]),
        "choosing_well": [
            {k: v for k, v in asdict(r).items() if k not in exclude} for r in choosing
        ],
        "headline": headline(choosing) if choosing else None,
        "judge_corr_sweep": sweep,
        "variety": varied,
        "rounds": rounds,
    }


def merge_reports(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One report from part reports of the same world (``--only`` runs): each part's
    figures from the report that has them, sweep rows in correlation order, variety in the
    order given."""
    keys = ("seed", "ideas", "seeds", "variety_judges", "world", "liked_motifs")
    # A report written before a world parameter existed was run at its default (every new
    # parameter's default reproduces the world before it).
    defaults = asdict(WorldParams())
    parts = [{**r, "world": {**defaults, **r["world"]}} for r in parts]
    for other in parts[1:]:
        for key in keys:
            if other[key] != parts[0][key]:
                raise ValueError(f"--merge: the reports differ in {key!r}")
    merged = {key: parts[0][key] for key in keys}
    with_choosing = [r for r in parts if r["choosing_well"]]
    merged["choosing_well"] = with_choosing[0]["choosing_well"] if with_choosing else []
    merged["headline"] = with_choosing[0]["headline"] if with_choosing else None
    merged["judge_corr_sweep"] = merge_sweep([row for r in parts for row in r["judge_corr_sweep"]])
    merged["variety"] = [v for r in parts for v in r["variety"]]
    merged["rounds"] = next((r["rounds"] for r in parts if r["rounds"]), None)
    measured = [r["measured"] for r in parts if "measured" in r]
    if measured:  # each part's commit, machine and date
        merged["measured"] = {**measured[0], "parts": measured}
    return merged


def merge_sweep(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Sweep rows of parts joined: one row per judge-scale world and correlation (worlds
    in spread order, then correlation order), its panels from every part that measured
    that world in :func:`sweep_panels` order (a row written before the scale worlds and
    normalisations existed is the one-scale world, its panels normalise ``none``)."""
    order = {p.name: k for k, p in enumerate(sweep_panels())}
    joined: dict[tuple[float, float, float], dict[str, Any]] = {}
    for row in rows:
        key = (
            float(row.get("judge_scale_spread", 0.0)),
            float(row.get("judge_offset_spread", 0.0)),
            float(row["judge_corr"]),
        )
        panels = [{"normalise": "none", **p} for p in row["panels"]]
        if key not in joined:
            joined[key] = {
                "judge_scale_spread": key[0],
                "judge_offset_spread": key[1],
                **{k: v for k, v in row.items() if k != "panels"},
                "panels": panels,
            }
            continue
        into = joined[key]
        if into["one_judge_regret"] != row["one_judge_regret"]:
            raise ValueError(f"--merge: the sweep parts' one judge differs at {key}")
        seen = {p["name"] for p in into["panels"]}
        into["panels"] += [p for p in panels if p["name"] not in seen]
    for row in joined.values():
        row["panels"].sort(key=lambda p: order.get(p["name"], len(order)))
    return [joined[key] for key in sorted(joined)]
