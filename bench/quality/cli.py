"""Does black-box scoring choose well, and does it keep variety? Measured in a simulated world
where the truth is known.

    python bench/quality.py                          # the full bench (tens of minutes)
    python bench/quality.py --only sweep --json a.json   # one part (choosing, sweep, ...)
    python bench/quality.py --merge a.json b.json ...     # the report of the parts joined
    python bench/quality.py --quick                  # a small configuration (scripts/check)
    python bench/quality.py --json out.json --plot quality.png
    python bench/quality.py --sigma 12 --beta 4      # another world (every parameter a flag)

Every run is the real :func:`image_project.run.driver.run_generation` with the scoring stage enabled,
configured through the real config (``load_config`` with ``--set``-style overrides), talking
to a :class:`~image_project.testing.FunctionTextBackend` whose answers come from the simulated
world of :mod:`.world` (and to :class:`~image_project.testing.FakeImageBackend` for the image). No model,
no network. Steps the world has no opinion on (the concept filter, the profile hints, the
title) are answered by the built-in offline backend.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from provenance import Provenance

from .report import PARTS, build_report, format_table, merge_reports, plot
from .runs import normalise_names, progress
from .world import NEUTRAL_MOTIFS, WorldParams


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"got {text!r}, want numbers like 0,0.5") from exc


def _spreads(text: str) -> tuple[tuple[float, float], ...]:
    try:
        pairs = [part.split(":") for part in text.split(",") if part.strip()]
        return tuple((float(a), float(b)) for a, b in pairs)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"got {text!r}, want SCALE:OFFSET pairs like 0:0,0.3:8"
        ) from exc


def _names(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        wrong = [n for n in names if n not in allowed]
        if wrong or not names:
            raise argparse.ArgumentTypeError(f"got {text!r}, want some of {', '.join(allowed)}")
        return names

    return parse


def _unit(lo: float, hi: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"got {text}, must be in {lo}..{hi}")
        return value

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--seed", type=int, default=2026, help="bench seed; every draw derives from it")
    p.add_argument("--quick", action="store_true", help="a small configuration (under a minute)")
    p.add_argument("--seeds", type=int, default=None, help="runs per judging configuration; "
                   "None = 600, or 40 with --quick")  # fmt: skip
    p.add_argument("--ideas", type=int, default=6, help="idea cards per run (num_ideas)")
    p.add_argument("--variety-runs", type=int, default=30, help="consecutive runs per history")
    p.add_argument("--variety-seeds", type=int, default=None, help="histories per strategy; "
                   "None = 20, or 2 with --quick")  # fmt: skip
    p.add_argument("--variety-judges", type=int, default=3, help="judges (median) in Variety")
    p.add_argument("--exploration-rate", type=_unit(0, 0.5), default=0.15,
                   help="exploration_rate of the exploring strategies (product default)")  # fmt: skip
    p.add_argument("--novelty-window", type=int, default=25,
                   help="novelty.window of the novelty strategies (product default)")  # fmt: skip
    w = WorldParams()
    p.add_argument("--quality-mean", type=float, default=w.quality_mean,
                   help="mean of a card's true quality (0..100)")  # fmt: skip
    p.add_argument("--quality-sd", type=float, default=w.quality_sd,
                   help="standard deviation of true quality across cards")  # fmt: skip
    p.add_argument("--motifs-per-card", type=int, default=w.motifs_per_card,
                   help="distinct motifs per card")  # fmt: skip
    p.add_argument("--p-liked", type=_unit(0, 1), default=w.p_liked,
                   help="chance that a motif of a card is one of the profile's likes")  # fmt: skip
    p.add_argument("--liked-motifs", type=int, default=w.liked_motifs,
                   help="how many of the profile's likes (the first ones) are motifs")  # fmt: skip
    p.add_argument("--neutral-motifs", type=int, default=w.neutral_motifs,
                   help=f"how many of the {len(NEUTRAL_MOTIFS)} built-in other motifs exist")  # fmt: skip
    p.add_argument("--sigma", type=float, default=w.sigma, help="judge noise (score points)")
    p.add_argument("--beta", type=float, default=w.beta,
                   help="position bias: points per place earlier in the shown order")  # fmt: skip
    p.add_argument("--lam", type=float, default=w.lam,
                   help="like bias: points for a card that carries a liked motif")  # fmt: skip
    p.add_argument("--p-refuse", type=_unit(0, 1), default=w.p_refuse,
                   help="chance that a judge call refuses")  # fmt: skip
    p.add_argument("--p-garbage", type=_unit(0, 1), default=w.p_garbage,
                   help="chance that a judge call answers an invalid score list")  # fmt: skip
    p.add_argument("--broken", choices=("random", "garbage"), default=w.broken,
                   help="the broken judge: random valid scores, or never a valid answer")  # fmt: skip
    p.add_argument("--child-sigma", type=float, default=w.child_sigma,
                   help="a variant's true quality: its parent's + drift + N(0, this)")  # fmt: skip
    p.add_argument("--judge-corr", type=_unit(0, 1), default=w.judge_corr,
                   help="share of each judge's noise (variance) that all judges share: the "
                   "correlation of two judges' errors")  # fmt: skip
    p.add_argument("--corr-sweep", type=_floats, default=None, help="judge correlations of "
                   "the aggregation sweep; None = 0,0.5,0.8, or 0,0.8 with --quick")  # fmt: skip
    p.add_argument("--judge-scale-spread", type=float, default=w.judge_scale_spread,
                   help="judge k's scores are stretched by exp(step x this) around "
                   "--quality-mean, step 0, +1, -1, +2, ... for judges 1, 2, 3, 4, ...")  # fmt: skip
    p.add_argument("--judge-offset-spread", type=float, default=w.judge_offset_spread,
                   help="judge k's scores are shifted by step x this many points (steps as "
                   "for --judge-scale-spread)")  # fmt: skip
    p.add_argument("--scale-sweep", type=_spreads, default=None, help="judge-scale worlds of "
                   "the aggregation sweep, SCALE:OFFSET spreads; None = 0:0,0.3:8, or 0:0 "
                   "with --quick")  # fmt: skip
    p.add_argument("--sweep-normalise", type=_names(normalise_names()), default=None,
                   help="the normalisations the sweep measures; None = every one the config "
                   "accepts")  # fmt: skip
    p.add_argument("--position-bias", choices=("bounded", "linear"), default=w.position_bias,
                   help="linear: --beta per place, growing with the cards shown; bounded: "
                   "the first shown gets --beta x (--ideas - 1) whatever the number of "
                   "cards, the last 0")  # fmt: skip
    p.add_argument("--motif-encoding", choices=("equal", "old"), default=w.motif_encoding,
                   help="equal: the other motifs have as many words as the liked ones; "
                   "old: two words against the likes' four or five")  # fmt: skip
    p.add_argument("--drifts", type=_floats, default=None, help="Rounds: points a variant "
                   "loses on average, one set of rows each; None = 0,1.5")  # fmt: skip
    p.add_argument("--rounds-seeds", type=int, default=None, help="run seeds per Rounds row; "
                   "None = 200, or 20 with --quick; 0 skips Rounds")  # fmt: skip
    p.add_argument("--rounds-max", type=int, default=3, help="Rounds rows: 0 (evolution off) "
                   "to this many rounds after round 0")  # fmt: skip
    p.add_argument("--rounds-judges", type=int, default=3, help="judges (median) in Rounds")
    p.add_argument("--survivors", type=int, default=3, help="survivors per round in Rounds")
    p.add_argument("--variants", type=int, default=2, help="variants per survivor in Rounds")
    p.add_argument("--only", choices=PARTS, action="append", default=None,
                   help="run only this part (repeatable); join the parts' --json with "
                   "--merge")  # fmt: skip
    p.add_argument("--merge", type=Path, nargs="+", default=None,
                   help="print (and --json / --plot) the report joined from these part "
                   "reports instead of running")  # fmt: skip
    p.add_argument("--json", type=Path, default=None, help="write the report as JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write the figure (PNG) here")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    if args.seeds is None:
        args.seeds = 40 if args.quick else 600
    if args.variety_seeds is None:
        args.variety_seeds = 2 if args.quick else 20
    if args.rounds_seeds is None:
        args.rounds_seeds = 20 if args.quick else 200
    if args.corr_sweep is None:
        args.corr_sweep = (0.0, 0.8) if args.quick else (0.0, 0.5, 0.8)
    if args.drifts is None:
        args.drifts = (0.0, 1.5)
    if args.scale_sweep is None:
        args.scale_sweep = ((0.0, 0.0),) if args.quick else ((0.0, 0.0), (0.3, 8.0))
    if any(not 0 <= rho <= 1 for rho in args.corr_sweep):
        p.error(f"--corr-sweep: got {args.corr_sweep}, each must be in 0..1")

    names = (
        "seeds",
        "ideas",
        "variety_judges",
        "motifs_per_card",
        "liked_motifs",
        "neutral_motifs",
        "rounds_judges",
        "survivors",
        "variants",
    )
    for name in names:
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: got {getattr(args, name)}, must be >= 1")
    if args.rounds_seeds < 0 or not 1 <= args.rounds_max <= 10:
        p.error(
            f"--rounds-seeds {args.rounds_seeds} must be >= 0 and --rounds-max "
            f"{args.rounds_max} in 1..10 (prompt.scoring.evolution.generations)"
        )
    if args.survivors > args.ideas:
        p.error(f"--survivors: got {args.survivors}, must be <= --ideas ({args.ideas})")
    if args.child_sigma < 0:
        p.error(f"--child-sigma: got {args.child_sigma}, must be >= 0")
    if args.p_refuse + args.p_garbage > 1:
        p.error("--p-refuse + --p-garbage must be at most 1")
    if not args.motifs_per_card < args.neutral_motifs <= len(NEUTRAL_MOTIFS):
        p.error(
            f"--neutral-motifs: got {args.neutral_motifs}, must be in "
            f"{args.motifs_per_card + 1}..{len(NEUTRAL_MOTIFS)} (more than --motifs-per-card)"
        )
    args.started = time.perf_counter()
    return args


def _json_safe(value: Any) -> Any:
    """``value`` with every NaN (a figure with no data) as null, so the file is strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.merge:
        parts = [json.loads(path.read_text(encoding="utf-8")) for path in args.merge]
        return _emit(args, merge_reports(parts))
    # The runs' own logs go to their run log files; the first variety run's "no history
    # yet" warning is expected and would only clutter the terminal.
    log = logging.getLogger("image_project")
    quiet, propagate = logging.NullHandler(), log.propagate
    log.addHandler(quiet)
    log.propagate = False
    provenance = Provenance.start()
    try:
        report = anyio.run(build_report, args)
    finally:
        log.removeHandler(quiet)
        log.propagate = propagate
    return _emit(args, {**report, "measured": provenance.finish()})


def _emit(args: argparse.Namespace, report: Mapping[str, Any]) -> int:
    print(format_table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(_json_safe(report), indent=2, allow_nan=False)
        args.json.write_text(text + "\n", encoding="utf-8")
    if args.plot:
        plot(report, args.plot)
    progress(args, f"done in {time.perf_counter() - args.started:.1f} s")
    return 0
