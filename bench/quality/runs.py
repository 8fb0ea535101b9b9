"""The parts of the selection-quality bench: real runs in the simulated world, and what
each part measures.

Parts:

* **Choosing well** (``--seeds`` runs per configuration, prompt only, exploration 0 and
  novelty off so that only the judging differs): the rate of picking the truly best card,
  the mean regret (best true quality - chosen), failed runs (too few usable judges), and the
  first-shown win rate (how often the card a judge was shown first wins, averaged over the
  panel's ok judges, as their orders are recorded in the transcript; chance is 1/N; card A
  for the shared-order rows). Failed runs count only in ``failed``. Configurations: one judge, mean of 3, median of 3, median
  of 5; the same panels with one broken judge, and mean and median of 3 after ``zscores``
  with one broken judge (does normalising make the mean robust? a broken judge's random
  scores z-score like any other's). The product always shows each judge its own
  seeded order (there is no setting to turn that off), so "one shared order" is simulated:
  those rows, marked ``(sim)``, give every judge its position bias by the card ids' order
  A, B, C... instead of the order it was shown, which is what judges shown one unshuffled
  order would do. They are the simulation's counterfactual, not a product setting.
* **Judges who think alike** (``--corr-sweep``, default 0, 0.5, 0.8): at each judge
  correlation, over the same ``--seeds`` run seeds, one judge against a panel of 3 for every
  aggregation ``prompt.scoring.aggregation`` accepts (read from the config's Literal, so a
  new one is measured as soon as the product has it; ``trimmed_mean`` with trim 1, which
  needs all 3 judges ok), and for ``median`` and ``mean`` (:data:`NORMALISED_AGGREGATIONS`)
  again after every normalisation ``prompt.scoring.normalise`` accepts (its Literal too):
  the panel's regret, the share of one judge's regret it cuts, paired, with a bootstrap
  interval, and its regret minus the median of 3's (normalise ``none``: the product's default
  before this sweep, :data:`REFERENCE_PANEL`), paired, with a t interval. The sweep runs in each
  judge-scale world of ``--scale-sweep`` (default ``0:0,0.3:8``: judges on one scale, and
  judges whose scales differ by e^0.3 and offsets by 8 points; ``--quick``: ``0:0``);
  ``--sweep-normalise`` runs only some normalisations (for parts run apart).
* **Variety** (``--variety-runs`` consecutive full runs sharing one generations history,
  repeated for ``--variety-seeds`` histories, the same histories for every strategy): the
  share of runs whose chosen card carries a liked motif, against greedy (paired by
  history, t interval) and against a random pick among the same cards (its expectation);
  the share of greedy's excess liked tilt (greedy - random pick) a strategy removes, with a
  bootstrap interval over the histories; the share of runs carrying the most repeated liked
  motif; distinct motifs; true quality against greedy (paired). Strategies: greedy
  (exploration 0, novelty off), exploration only (``--exploration-rate``), novelty only
  (window ``--novelty-window``), and both (the product's defaults); then greedy, novelty
  only and both again in the ``old`` motif encoding as a check (not with ``--quick``).
* **Rounds** (``--rounds-seeds`` run seeds per row, prompt only, a median panel of
  ``--rounds-judges`` judges, exploration 0 and novelty off): 0 rounds (evolution off),
  flat controls, and for each variant drift of ``--drifts`` (points a variant loses on
  average: its true quality is its parent's - drift + N(0, ``--child-sigma``)) 1 ..
  ``--rounds-max`` rounds with ``--survivors`` survivors x ``--variants`` variants (parents
  kept, code selector). The controls are one flat round of as many generator + judge calls
  as each number of rounds spends (``--ideas`` + rounds x (survivors x variants + judges)
  cards). Per row: the chosen card's true quality, its paired gain over 0 rounds and (rounds
  rows) over the equal-calls control with 95% t intervals, the best card any round's judges
  saw and the regret against it, failed runs, the generator and judge calls spent (counted
  from the record's chat steps by role, re-asks included), the variants dropped as
  near-duplicates, and per round the true quality of the card the round ranked first and of
  its best card.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from image_project.backends.factory import Backends
from image_project.config.loading import load_config
from image_project.config.models import Aggregation, AppConfig, Normalise
from image_project.errors import ConfigError
from image_project.record.scoring import ScoreRow, ScoringRecord
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed, RunResult
from image_project.seeding import derive_seed
from image_project.stages.scoring.evolution import ranked
from image_project.testing import FakeImageBackend, FunctionTextBackend

from .world import REPO, TrueCard, World, WorldParams, judge_model, world_params


def progress(args: argparse.Namespace, line: str) -> None:
    if not args.silent:
        print(f"[{time.perf_counter() - args.started:6.1f}s] {line}", file=sys.stderr)


# --------------------------------------------------------------------------- running


def make_config(tmp: Path, *overrides: str, prompt_only: bool) -> AppConfig:
    """The real configuration, as ``--set`` would build it, writing under ``tmp``."""
    return load_config(
        root=REPO,
        env={},
        overrides=[
            f"image.generation_path={tmp / 'images'}",
            f"image.log_path={tmp / 'logs'}",
            f"prompt.generations_path={tmp / 'generations.csv'}",
            "image.model=sim-image",
            "image.size=64x64",
            "prompt.refinement=none",
            f"run.mode={'prompt_only' if prompt_only else 'full'}",
            "prompt.scoring.enabled=true",
            # The median of the judges' own scores, as Variety's and Rounds' headers say (not
            # the product's default, the median after `robust`); the judging configurations of
            # Choosing well and the sweep set their own below.
            "prompt.scoring.aggregation=median",
            "prompt.scoring.normalise=none",
            *overrides,
        ],
    )


def panel_override(size: int, *, broken: bool = False) -> str:
    judges = [
        f"{{id: j{i}, model: {judge_model(i, broken and i == size)}}}" for i in range(1, size + 1)
    ]
    return f"prompt.scoring.judges=[{', '.join(judges)}]"


def _backends(world: World) -> Backends:
    return Backends(
        text=FunctionTextBackend(world.answer, label="quality-sim", default_model="sim-text"),
        image=FakeImageBackend(default_model="sim-image"),
        provider="offline",
        description="bench/quality.py simulated world",
    )


@dataclass(frozen=True)
class Chosen:
    """What one run chose, scored against the truth."""

    quality: float
    best: float
    motifs: tuple[str, ...]
    first_shown_wins: float
    final_prompt: str
    liked: bool = False
    """Whether the chosen card carries a liked motif."""
    liked_candidates: float = 0.0
    """The share of the run's cards that carry one (a random pick's chance of a liked card)."""
    mean_candidate: float = 0.0
    """The mean true quality of the run's cards (a random pick's expected quality)."""


def chosen_of(result: RunResult, world: World) -> Chosen:
    """Score a finished run: the chosen card's true quality against the best of its cards,
    and how often the card each judge saw first won (the shared-order counterfactual's
    "first" is card A, the one its position bias favours)."""
    record = result.record.blackbox_scoring
    assert isinstance(record, ScoringRecord) and record.selected_id is not None
    truths = {}
    for candidate in record.candidates:
        assert candidate.card is not None
        truths[candidate.id] = world.cards[candidate.card.hook]
    selected = record.selected_id
    ok = [j for j in record.judges if j.status == "ok"] or list(record.judges)
    firsts = [("A" if world.shared_order else j.order[0]) for j in ok]
    return Chosen(
        quality=truths[selected].quality,
        best=max(t.quality for t in truths.values()),
        motifs=truths[selected].motifs,
        first_shown_wins=sum(f == selected for f in firsts) / len(firsts),
        final_prompt=result.record.final_image_prompt or "",
        liked=truths[selected].liked,
        liked_candidates=_mean([float(t.liked) for t in truths.values()]),
        mean_candidate=_mean([t.quality for t in truths.values()]),
    )


async def run_once(
    world: World, cfg: AppConfig, run_seed: int, generation_id: str
) -> Chosen | None:
    """One real run; None when it failed (too few usable judges)."""
    try:
        result = await run_generation(
            cfg, _backends(world), seed=run_seed, generation_id=generation_id
        )
    except RunFailed as exc:
        if exc.error.reason != "invalid_judge_output":
            raise
        return None
    return chosen_of(result, world)


# --------------------------------------------------------------------------- choosing well


@dataclass(frozen=True)
class Panel:
    """One judging configuration of "Choosing well"."""

    name: str
    judges: int
    aggregation: str
    broken: bool = False
    shared_order: bool = False
    trim: int = 0
    normalise: str = "none"


PANELS: tuple[Panel, ...] = (
    Panel("one judge", 1, "median"),
    Panel("mean of 3", 3, "mean"),
    Panel("median of 3", 3, "median"),
    Panel("median of 5", 5, "median"),
    Panel("mean of 3, one broken", 3, "mean", broken=True),
    Panel("median of 3, one broken", 3, "median", broken=True),
    Panel("median of 5, one broken", 5, "median", broken=True),
    Panel("mean of 3, zscores, one broken", 3, "mean", broken=True, normalise="zscores"),
    Panel("median of 3, zscores, one broken", 3, "median", broken=True, normalise="zscores"),
    Panel("mean of 3, shared order (sim)", 3, "mean", shared_order=True),
    Panel("median of 3, shared order (sim)", 3, "median", shared_order=True),
    Panel("median of 5, shared order (sim)", 5, "median", shared_order=True),
)


@dataclass
class PanelResult:
    name: str
    judges: int
    aggregation: str
    broken: bool
    shuffled: bool
    runs: int
    failed: int
    pick_best_rate: float
    mean_regret: float
    regret_ci95: float
    first_shown_win_rate: float
    chance: float
    regrets: list[float | None] = field(default_factory=list, repr=False)
    """Per run seed, in order (None for a failed run): kept for paired comparisons."""
    firsts: list[float | None] = field(default_factory=list, repr=False)
    """Per run seed, the first-shown win share (None for a failed run), likewise."""


def _summarise_panel(panel: Panel, chosen: Sequence[Chosen | None], n_ideas: int) -> PanelResult:
    done = [c for c in chosen if c is not None]
    regrets = [c.best - c.quality for c in done]
    return PanelResult(
        name=panel.name,
        judges=panel.judges,
        aggregation=panel.aggregation,
        broken=panel.broken,
        shuffled=not panel.shared_order,
        runs=len(chosen),
        failed=len(chosen) - len(done),
        pick_best_rate=_mean([float(c.quality == c.best) for c in done]),
        mean_regret=_mean(regrets),
        regret_ci95=_ci95(regrets),
        first_shown_win_rate=_mean([c.first_shown_wins for c in done]),
        chance=1.0 / n_ideas,
        regrets=[None if c is None else c.best - c.quality for c in chosen],
        firsts=[None if c is None else c.first_shown_wins for c in chosen],
    )


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def _ci95(values: Sequence[float]) -> float:
    """Half-width of the normal-approximation 95% confidence interval of the mean."""
    if len(values) < 2:
        return math.nan
    return 1.96 * statistics.stdev(values) / math.sqrt(len(values))


def paired(diffs: Sequence[float], level: float = 0.95) -> dict[str, float]:
    """Mean of paired differences, its two-sided ``level`` t interval (lo, hi), and the
    two-sided p value of a paired t test (scipy.stats)."""
    from scipy import stats

    n = len(diffs)
    if n < 2:
        return {"runs": n, "mean": _mean(diffs), "lo": math.nan, "hi": math.nan, "p": math.nan}
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    if sd == 0:
        return {"runs": n, "mean": mean, "lo": mean, "hi": mean, "p": 0.0 if mean else 1.0}
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    p = float(stats.ttest_1samp(diffs, 0.0).pvalue)
    return {"runs": n, "mean": mean, "lo": mean - half, "hi": mean + half, "p": p}


def ratio_interval(
    num: Sequence[float], den: Sequence[float], seed: int, level: float = 0.95
) -> tuple[float, float, float]:
    """sum(num) / sum(den) over paired units, with a percentile bootstrap interval
    (resampling the units, seeded): the share of a paired quantity."""
    import numpy as np

    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(a) < 2 or b.sum() == 0:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(a), size=(4000, len(a)))
    sums = b[picks].sum(axis=1)
    ratios = a[picks].sum(axis=1)[sums != 0] / sums[sums != 0]
    lo, hi = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    return float(a.sum() / b.sum()), float(lo), float(hi)


def paired_regret(a: PanelResult, b: PanelResult, level: float = 0.95) -> dict[str, float]:
    """Mean regret of ``a`` minus ``b`` over the run seeds both completed (the same cards
    and the same judge noise for the shared judges), with its t interval and p value."""
    return paired(
        [
            x - y
            for x, y in zip(a.regrets, b.regrets, strict=True)
            if x is not None and y is not None
        ],
        level,
    )


def paired_first_shown(a: PanelResult, b: PanelResult, level: float = 0.95) -> dict[str, float]:
    """First-shown win share of ``a`` minus ``b``, paired over the run seeds both completed."""
    return paired(
        [x - y for x, y in zip(a.firsts, b.firsts, strict=True) if x is not None and y is not None],
        level,
    )


def headline(results: Sequence[PanelResult]) -> dict[str, Any]:
    """The figures docs/evidence.md quotes: median of 3 (shuffled) against one judge, and how
    much of the single judge's first-position advantage (first-shown win rate - chance) is
    left with a shuffled panel and with the simulated shared order (n/a when the single
    judge shows no advantage clear of two standard errors)."""
    by = {r.name: r for r in results}
    one, med3 = by["one judge"], by["median of 3"]
    shared = by["median of 3, shared order (sim)"]

    def advantage(r: PanelResult) -> float:
        return r.first_shown_win_rate - r.chance

    # The share removed is only a number when the single judge's advantage is clear of its
    # sampling noise (two standard errors of its win rate); else it is reported as n/a.
    n_one = one.runs - one.failed
    p_one = one.first_shown_win_rate
    se = math.sqrt(p_one * (1 - p_one) / n_one) if n_one else math.inf

    return {
        "median3_minus_one_judge_regret": paired_regret(med3, one),
        "shuffled_minus_shared_first_shown": paired_first_shown(med3, shared),
        "first_position_advantage": {
            "one judge": advantage(one),
            "median of 3": advantage(med3),
            "median of 3, shared order (sim)": advantage(shared),
        },
        "share_of_advantage_removed_by_shuffled_median3": (
            1 - advantage(med3) / advantage(one) if advantage(one) > 2 * se else math.nan
        ),
    }


async def panel_runs(
    args: argparse.Namespace, likes: Sequence[str], panel: Panel, params: WorldParams
) -> PanelResult:
    """One judging configuration over the ``--seeds`` run seeds (the same seeds, so the same
    cards and judge noise, in every configuration)."""
    world = World(args.seed, params, likes, shared_order=panel.shared_order)
    chosen: list[Chosen | None] = []
    # A trimmed mean must keep a score: trim t needs 2t + 1 ok judges (a run fails below).
    quorum = [f"prompt.scoring.min_ok_judges={2 * panel.trim + 1}"] if panel.trim else []
    with tempfile.TemporaryDirectory(prefix="quality-choose-") as tmp:
        cfg = make_config(
            Path(tmp),
            panel_override(panel.judges, broken=panel.broken),
            f"prompt.scoring.aggregation={panel.aggregation}",
            f"prompt.scoring.trim={panel.trim}",
            f"prompt.scoring.normalise={panel.normalise}",
            *quorum,
            f"prompt.scoring.num_ideas={args.ideas}",
            "prompt.scoring.exploration_rate=0",
            "prompt.scoring.novelty.enabled=false",
            prompt_only=True,
        )
        for i in range(args.seeds):
            run_seed = derive_seed(args.seed, "choose", i)
            chosen.append(await run_once(world, cfg, run_seed, f"choose_{i:05d}"))
    return _summarise_panel(panel, chosen, args.ideas)


async def choosing_well(args: argparse.Namespace, likes: Sequence[str]) -> list[PanelResult]:
    """Every configuration of :data:`PANELS` over the same ``--seeds`` run seeds."""
    results = []
    params = world_params(args)
    for panel in PANELS:
        results.append(await panel_runs(args, likes, panel, params))
        progress(args, f"choosing well: {panel.name} done")
    return results


def aggregation_names() -> tuple[str, ...]:
    """The values ``prompt.scoring.aggregation`` accepts (the config's Literal), so that a
    new aggregation is measured as soon as the product has it."""
    return tuple(str(a) for a in typing.get_args(Aggregation))


def normalise_names() -> tuple[str, ...]:
    """The values ``prompt.scoring.normalise`` accepts (the config's Literal), likewise."""
    return tuple(str(n) for n in typing.get_args(Normalise))


NORMALISED_AGGREGATIONS: tuple[str, ...] = ("median", "mean")
"""The aggregations the sweep measures after each normalisation other than ``none`` (every
aggregation is measured with ``none``): the full cross would double the sweep's runs."""


def sweep_panel(aggregation: str, judges: int = 3, normalise: str = "none") -> Panel:
    """The panel of the judge-correlation sweep for one aggregation: ``judges`` judges, and for
    ``trimmed_mean`` trim 1 (which needs every one of 3 judges ok: trim 0 would be the mean),
    after the normalisation ``normalise``."""
    trim = 1 if aggregation == "trimmed_mean" else 0
    label = f"{aggregation} of {judges}" + (f" (trim {trim})" if trim else "")
    label += f", {normalise}" if normalise != "none" else ""
    return Panel(label, judges, aggregation, trim=trim, normalise=normalise)


def sweep_panels(normalisations: Sequence[str] | None = None) -> list[Panel]:
    """The sweep's panels: every aggregation with normalise ``none``, then each of
    :data:`NORMALISED_AGGREGATIONS` after each other normalisation, in the Literals' orders
    (only the normalisations of ``normalisations`` when given)."""
    panels = []
    for normalise in normalise_names():
        if normalisations is not None and normalise not in normalisations:
            continue
        for aggregation in aggregation_names():
            if normalise == "none" or aggregation in NORMALISED_AGGREGATIONS:
                panels.append(sweep_panel(aggregation, normalise=normalise))
    return panels


REFERENCE_PANEL = sweep_panel("median")
"""The panel every sweep panel is paired with: the median of 3 judges' own scores (SPEC's
median), fixed so that the paired figures mean the same whatever the default becomes."""


def by_spread(
    sweep: Sequence[Mapping[str, Any]],
) -> list[tuple[tuple[float, float], list[Mapping[str, Any]]]]:
    """The sweep's rows grouped by judge-scale world, in the order they come."""
    groups: dict[tuple[float, float], list[Mapping[str, Any]]] = {}
    for row in sweep:
        key = (row.get("judge_scale_spread", 0.0), row.get("judge_offset_spread", 0.0))
        groups.setdefault(key, []).append(row)
    return list(groups.items())


def spread_label(scale: float, offset: float) -> str:
    if scale == 0 and offset == 0:
        return "judges on one scale"
    return (
        f"judges on different scales (scale x e^(+-{scale:g}), offset +-{offset:g} points "
        "for judges 2 and 3; judge 1 as one scale)"
    )


async def judge_corr_sweep(args: argparse.Namespace, likes: Sequence[str]) -> list[dict[str, Any]]:
    """Regret of one judge against a panel of 3 for every panel of :func:`sweep_panels`, at
    each judge correlation of ``--corr-sweep`` and each judge-scale world of
    ``--scale-sweep``: the paired difference (panel - one judge) with its 95% t interval,
    and the cut (share of the one judge's regret removed) with a bootstrap interval, over
    the same run seeds."""
    rows = []
    for scale, offset in args.scale_sweep:
        for rho in args.corr_sweep:
            params = replace(
                world_params(args),
                judge_corr=rho,
                judge_scale_spread=scale,
                judge_offset_spread=offset,
            )
            one = await panel_runs(args, likes, Panel("one judge", 1, "median"), params)
            # The reference every panel is paired with.
            reference = await panel_runs(args, likes, REFERENCE_PANEL, params)
            panels: list[dict[str, Any]] = []
            for panel in sweep_panels(args.sweep_normalise):
                try:
                    result = (
                        reference
                        if panel == REFERENCE_PANEL
                        else (await panel_runs(args, likes, panel, params))
                    )
                except ConfigError as exc:  # an aggregation that needs settings the bench lacks
                    panels.append({"name": panel.name, "aggregation": panel.aggregation,
                                   "normalise": panel.normalise, "error": str(exc)})  # fmt: skip
                    continue
                pairs = [
                    (x, y)
                    for x, y in zip(result.regrets, one.regrets, strict=True)
                    if x is not None and y is not None
                ]
                d = paired([x - y for x, y in pairs])
                cut = ratio_interval([y - x for x, y in pairs], [y for _, y in pairs], args.seed)
                panels.append(
                    {
                        "name": panel.name,
                        "aggregation": panel.aggregation,
                        "normalise": panel.normalise,
                        "mean_regret": result.mean_regret,
                        "failed": result.failed,
                        "minus_one_judge": d,
                        "cut": {"share": cut[0], "lo": cut[1], "hi": cut[2]},
                        "minus_median": paired_regret(result, reference),
                    }
                )
            rows.append(
                {
                    "judge_scale_spread": scale,
                    "judge_offset_spread": offset,
                    "judge_corr": rho,
                    "one_judge_regret": one.mean_regret,
                    "one_judge_failed": one.failed,
                    "panels": panels,
                }
            )
            progress(args, f"{spread_label(scale, offset)}, judge correlation {rho:g} done")
    return rows


# --------------------------------------------------------------------------- variety


@dataclass(frozen=True)
class Strategy:
    name: str
    exploration: bool
    novelty: bool


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("greedy", False, False),
    Strategy("exploration only", True, False),
    Strategy("novelty only", False, True),
    Strategy("exploration + novelty", True, True),
)
"""The last is the product's default (exploration_rate 0.15, novelty on, window 25)."""

CHECK_STRATEGIES = ("greedy", "novelty only", "exploration + novelty")
"""The strategies run again in the ``old`` motif encoding (the check)."""


@dataclass(frozen=True)
class HistoryStats:
    """One history of consecutive runs under one strategy."""

    liked: float
    """Share of runs whose chosen card carries a liked motif."""
    random_liked: float
    """The same for a uniformly random pick among each run's cards (its expectation)."""
    top_liked: float
    """Share of runs whose final prompt carries the most repeated liked motif."""
    distinct: int
    quality: float
    random_quality: float
    failed: int
    top_motif: str


def _history_stats(chosen: Sequence[Chosen], world: World, failed: int) -> HistoryStats:
    likes = world.likes
    every = (*likes, *world.neutral)
    carried = [{m for m in every if m in c.final_prompt} for c in chosen]
    liked_counts = {like: sum(like in c for c in carried) for like in likes}
    top = max(likes, key=lambda like: (liked_counts[like], -likes.index(like)))
    return HistoryStats(
        liked=_mean([float(c.liked) for c in chosen]),
        random_liked=_mean([c.liked_candidates for c in chosen]),
        top_liked=liked_counts[top] / max(1, len(chosen)),
        distinct=len(set().union(*carried)) if carried else 0,
        quality=_mean([c.quality for c in chosen]),
        random_quality=_mean([c.mean_candidate for c in chosen]),
        failed=failed,
        top_motif=top,
    )


async def _history(
    args: argparse.Namespace,
    params: WorldParams,
    likes: Sequence[str],
    strategy: Strategy,
    h: int,
    extra: Sequence[str] = (),
) -> HistoryStats:
    """One history of ``--variety-runs`` consecutive runs sharing a generations history;
    ``extra`` overrides go after the strategy's (a judging or novelty setting)."""
    world = World(args.seed, params, likes)
    rate = args.exploration_rate if strategy.exploration else 0.0
    chosen: list[Chosen] = []
    failed = 0
    with tempfile.TemporaryDirectory(prefix="quality-variety-") as tmp:
        cfg = make_config(
            Path(tmp),
            panel_override(args.variety_judges),
            f"prompt.scoring.num_ideas={args.ideas}",
            f"prompt.scoring.exploration_rate={rate}",
            f"prompt.scoring.novelty.enabled={'true' if strategy.novelty else 'false'}",
            f"prompt.scoring.novelty.window={args.novelty_window}",
            *extra,
            prompt_only=False,
        )
        for i in range(args.variety_runs):
            run_seed = derive_seed(args.seed, "variety", h, i)
            one = await run_once(world, cfg, run_seed, f"variety_{h:03d}_{i:03d}")
            if one is None:
                failed += 1
            else:
                chosen.append(one)
    return _history_stats(chosen, world, failed)


def _strategy_row(
    name: str,
    rate: float,
    window: int,
    stats: Sequence[HistoryStats],
    greedy: Sequence[HistoryStats],
    seed: int,
) -> dict[str, Any]:
    """A strategy's figures over the histories, paired with greedy's (the same run seeds):
    liked share and quality differences with 95% t intervals, and the share of greedy's
    excess liked tilt (greedy's liked share - a random pick's) the strategy removes, with a
    bootstrap interval over the histories."""
    pairs = list(zip(greedy, stats, strict=True))
    removed = ratio_interval(
        [g.liked - x.liked for g, x in pairs], [g.liked - g.random_liked for g in greedy], seed
    )
    return {
        "name": name,
        "exploration_rate": rate,
        "novelty_window": window,
        "histories": len(stats),
        "failed": sum(x.failed for x in stats),
        "liked_share": _mean([x.liked for x in stats]),
        "liked_vs_greedy": paired([x.liked - g.liked for g, x in pairs]),
        "excess_removed": {"share": removed[0], "lo": removed[1], "hi": removed[2]},
        "top_liked_share": _mean([x.top_liked for x in stats]),
        "distinct_motifs": _mean([float(x.distinct) for x in stats]),
        "mean_quality": _mean([x.quality for x in stats]),
        "quality_vs_greedy": paired([x.quality - g.quality for g, x in pairs]),
        "top_liked_motifs": sorted({x.top_motif for x in stats}),
    }


async def variety(
    args: argparse.Namespace, likes: Sequence[str], encodings: Sequence[str]
) -> list[dict[str, Any]]:
    """Per motif encoding of ``encodings`` (``--motif-encoding``, then ``old`` as a check
    with the strategies of :data:`CHECK_STRATEGIES`): every strategy over the same
    ``--variety-seeds`` histories of ``--variety-runs`` consecutive runs, paired with greedy,
    and a random pick's expectation (the floor of the liked tilt)."""
    out = []
    for encoding in encodings:
        params = replace(world_params(args), motif_encoding=encoding)
        strategies = [
            s for s in STRATEGIES if encoding == args.motif_encoding or s.name in CHECK_STRATEGIES
        ]
        stats: dict[str, list[HistoryStats]] = {}
        for strategy in strategies:
            stats[strategy.name] = [
                await _history(args, params, likes, strategy, h) for h in range(args.variety_seeds)
            ]
            progress(args, f"variety ({encoding} motifs): {strategy.name} done")
        greedy = stats["greedy"]
        rows = [
            _strategy_row(
                s.name,
                args.exploration_rate if s.exploration else 0.0,
                args.novelty_window if s.novelty else 0,
                stats[s.name],
                greedy,
                args.seed,
            )
            for s in strategies
        ]
        out.append(
            {
                "encoding": encoding,
                "runs_per_history": args.variety_runs,
                "histories": args.variety_seeds,
                "random_pick": {
                    "liked_share": _mean([g.random_liked for g in greedy]),
                    "mean_quality": _mean([g.random_quality for g in greedy]),
                },
                "rows": rows,
            }
        )
    return out


# --------------------------------------------------------------------------- rounds


@dataclass(frozen=True)
class RoundsRun:
    """One run of Rounds, scored against the truth. ``top`` and ``best`` are per round (0
    first): the true quality of the card the round ranked first (what the run would choose if
    it stopped there, exploration being 0) and of the best card the round's judges saw."""

    chosen: float
    best_seen: float
    top: tuple[float, ...]
    best: tuple[float, ...]
    generator_calls: int
    judge_calls: int
    dropped: int


def calls_of(result: RunResult) -> tuple[int, int]:
    """(generator calls, judge calls) of a run, counted from its recorded chat steps by their
    role: an answer is one call, so re-asks count; a step that received no answer counts
    once."""
    counts = {"generator": 0, "judge": 0}
    kinds = {"idea": "generator", "variant": "generator", "judge": "judge"}
    for step in result.record.chat_steps:
        kind = kinds.get(str(step.meta.get("role")))
        if kind is not None:
            counts[kind] += max(1, step.answers)
    return counts["generator"], counts["judge"]


def rounds_of(result: RunResult, world: World) -> RoundsRun:
    """Score a finished run, rounds or not: the chosen card, and per round the top-ranked
    and best judged card (a run without rounds has one: its card set)."""
    record = result.record.blackbox_scoring
    assert isinstance(record, ScoringRecord) and record.selected_id is not None
    cards: dict[str, TrueCard] = {}
    tables: list[tuple[ScoreRow, ...]] = [record.score_table]
    dropped = 0
    for c in record.candidates:
        assert c.card is not None
        cards[c.id] = world.cards[c.card.hook]
    if record.evolution is not None:
        tables = [r.score_table for r in record.evolution.rounds]
        for r in record.evolution.rounds:
            for rc in r.candidates:
                if rc.card is not None:
                    cards[rc.id] = world.cards[rc.card.hook]
                dropped += rc.dropped is not None
    top = tuple(cards[ranked(t)[0].id].quality for t in tables)
    best = tuple(max(cards[row.id].quality for row in t) for t in tables)
    generator, judge = calls_of(result)
    return RoundsRun(
        chosen=cards[record.selected_id].quality,
        best_seen=max(best),
        top=top,
        best=best,
        generator_calls=generator,
        judge_calls=judge,
        dropped=dropped,
    )


@dataclass
class RoundsResult:
    """One row of Rounds over the same run seeds: ``rounds`` rounds after round 0 (0:
    evolution off, today's flat pick), or (``control``) a flat pick from one round of
    ``ideas`` cards, as many cards as that many rounds write."""

    name: str
    rounds: int
    ideas: int
    control: bool
    runs: int
    failed: int
    chosen_quality: float
    chosen_ci95: float
    gain_vs_flat: float
    gain_ci95: float
    mean_regret: float
    regret_ci95: float
    pick_best_rate: float
    best_seen: float
    top_per_round: list[float]
    best_per_round: list[float]
    generator_calls: float
    judge_calls: float
    calls: float
    dropped: float
    chosen: list[float | None] = field(default_factory=list, repr=False)
    """Per run seed, in order (None for a failed run): kept for the paired gain."""
    drift: float | None = None
    """The points a variant loses on average (rounds rows; None for 0 rounds and controls)."""


def _summarise_rounds(
    rounds: int, ideas: int, control: bool, runs: Sequence[RoundsRun | None]
) -> RoundsResult:
    done = [r for r in runs if r is not None]
    played = 1 if control else rounds + 1
    regrets = [r.best_seen - r.chosen for r in done]
    gen = [float(r.generator_calls) for r in done]
    judge = [float(r.judge_calls) for r in done]
    return RoundsResult(
        name=f"flat, {ideas} cards" if control else f"{rounds} rounds",
        rounds=rounds,
        ideas=ideas,
        control=control,
        runs=len(runs),
        failed=len(runs) - len(done),
        chosen_quality=_mean([r.chosen for r in done]),
        chosen_ci95=_ci95([r.chosen for r in done]),
        gain_vs_flat=math.nan,
        gain_ci95=math.nan,
        mean_regret=_mean(regrets),
        regret_ci95=_ci95(regrets),
        pick_best_rate=_mean([float(r.chosen == r.best_seen) for r in done]),
        best_seen=_mean([r.best_seen for r in done]),
        top_per_round=[_mean([r.top[k] for r in done]) for k in range(played)],
        best_per_round=[_mean([r.best[k] for r in done]) for k in range(played)],
        generator_calls=_mean(gen),
        judge_calls=_mean(judge),
        calls=_mean([g + j for g, j in zip(gen, judge, strict=True)]),
        dropped=_mean([float(r.dropped) for r in done]),
        chosen=[None if r is None else r.chosen for r in runs],
    )


def rounds_config(args: argparse.Namespace, tmp: Path, rounds: int, ideas: int) -> AppConfig:
    """Rounds' configuration: ``ideas`` cards, a median panel of ``--rounds-judges``,
    exploration 0 and novelty off (only the rounds differ), and for ``rounds`` >= 1 evolution
    with the code selector and ``--survivors`` x ``--variants`` (parents kept, the product
    default)."""
    evolution = [
        "prompt.scoring.evolution.enabled=true",
        f"prompt.scoring.evolution.generations={rounds}",
        f"prompt.scoring.evolution.survivors={args.survivors}",
        f"prompt.scoring.evolution.variants_per_survivor={args.variants}",
        "prompt.scoring.evolution.selector=code",
    ]
    return make_config(
        tmp,
        panel_override(args.rounds_judges),
        "prompt.scoring.aggregation=median",
        f"prompt.scoring.num_ideas={ideas}",
        "prompt.scoring.exploration_rate=0",
        "prompt.scoring.novelty.enabled=false",
        *(evolution if rounds else ["prompt.scoring.evolution.enabled=false"]),
        prompt_only=True,
    )


async def _rounds_row(
    args: argparse.Namespace,
    likes: Sequence[str],
    rounds: int,
    ideas: int,
    control: bool,
    drift: float = 0.0,
) -> RoundsResult:
    """One row over the ``--rounds-seeds`` run seeds; ``drift``: the points a variant loses
    on average (the world's child drift is its negative)."""
    world = World(args.seed, replace(world_params(args), child_drift=-drift), likes)
    runs: list[RoundsRun | None] = []
    with tempfile.TemporaryDirectory(prefix="quality-rounds-") as tmp:
        cfg = rounds_config(args, Path(tmp), 0 if control else rounds, ideas)
        for i in range(args.rounds_seeds):
            run_seed = derive_seed(args.seed, "rounds", i)
            try:
                result = await run_generation(
                    cfg, _backends(world), seed=run_seed, generation_id=f"rounds_{i:05d}"
                )
            except RunFailed as exc:
                if exc.error.reason != "invalid_judge_output":
                    raise
                runs.append(None)
                continue
            runs.append(rounds_of(result, world))
    row = _summarise_rounds(rounds, ideas, control, runs)
    if rounds and not control:
        row.name += f", variants -{drift:g}"
    row.drift = None if control or not rounds else drift
    progress(args, f"rounds: {row.name} done")
    return row


def control_ideas(args: argparse.Namespace, rounds: int) -> int:
    """The cards of the flat control for ``rounds`` rounds: as many generator + judge calls
    as the rounds spend without re-asks (``--ideas`` + rounds x (survivors x variants +
    judges) cards and one panel call per judge)."""
    return int(args.ideas + rounds * (args.survivors * args.variants + args.rounds_judges))


def _paired_chosen(a: RoundsResult, b: RoundsResult) -> dict[str, float]:
    return paired(
        [x - y for x, y in zip(a.chosen, b.chosen, strict=True) if x is not None and y is not None]
    )


async def rounds_part(args: argparse.Namespace, likes: Sequence[str]) -> dict[str, Any] | None:
    """Rounds (multi-round selection) over the same ``--rounds-seeds`` run seeds (round 0
    is the same card set and the same judging in every row, so gains are paired): 0 rounds
    (evolution off), the flat controls (one round of as many cards as makes the same total
    generator + judge calls as 1, 2, ... ``--rounds-max`` rounds, at most 52 cards), and for
    each variant drift of ``--drifts`` 1 .. ``--rounds-max`` rounds. Per row the true quality
    of the chosen card, its paired gain over 0 rounds and (rounds rows) over the equal-calls
    control with 95% t intervals, its regret against the best card any round's judges saw,
    the top-ranked and best card per round, and the calls spent. None when
    ``--rounds-seeds`` is 0."""
    if args.rounds_seeds == 0:
        return None
    flat = await _rounds_row(args, likes, 0, args.ideas, False)
    controls: dict[int, RoundsResult] = {}
    for g in range(1, args.rounds_max + 1):
        if control_ideas(args, g) <= 52:
            controls[g] = await _rounds_row(args, likes, g, control_ideas(args, g), True)
    rows = [flat, *controls.values()]
    vs_control: dict[int, dict[str, float]] = {}
    for drift in args.drifts:
        for g in range(1, args.rounds_max + 1):
            row = await _rounds_row(args, likes, g, args.ideas, False, drift)
            if g in controls:
                vs_control[len(rows)] = _paired_chosen(row, controls[g])
            rows.append(row)
    for r in rows:
        d = _paired_chosen(r, flat)
        r.gain_vs_flat, r.gain_ci95 = d["mean"], (d["hi"] - d["lo"]) / 2
    out = []
    for index, r in enumerate(rows):
        data = {k: v for k, v in asdict(r).items() if k != "chosen"}
        data["vs_control"] = vs_control.get(index)
        out.append(data)
    return {
        "seeds": args.rounds_seeds,
        "judges": args.rounds_judges,
        "survivors": args.survivors,
        "variants": args.variants,
        "child_sigma": args.child_sigma,
        "drifts": list(args.drifts),
        "position_bias": args.position_bias,
        "rows": out,
    }
