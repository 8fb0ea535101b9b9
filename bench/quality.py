"""Does black-box scoring choose well, and does it keep variety? Measured in a simulated world
where the truth is known.

    python bench/quality.py                          # the full bench (a few minutes)
    python bench/quality.py --quick                  # a small configuration (scripts/check)
    python bench/quality.py --json out.json --plot quality.png
    python bench/quality.py --sigma 12 --beta 4      # another world (every parameter a flag)

Every run is the real :func:`image_project.app.run_generation` with the scoring stage enabled,
configured through the real config (``load_config`` with ``--set``-style overrides), talking
to a :class:`~image_project.testing.FunctionTextBackend` whose answers come from the simulated
world below (and to :class:`~image_project.testing.FakeImageBackend` for the image). No model,
no network. Steps the world has no opinion on (the concept filter, the profile hints, the
title) are answered by the built-in offline backend.

The world (every parameter a flag; the defaults are the documented default world):

* **Cards.** A generator call (``idea_card``) gets a card whose latent *true quality* is drawn
  from N(``--quality-mean``, ``--quality-sd``) clipped to 0..100, and ``--motifs-per-card``
  distinct motifs. Each motif is, with probability ``--p-liked``, one of the first
  ``--liked-motifs`` likes of the profile (``config/profile.csv``), copied exactly (weights
  1, 1/2, 1/3, ...: the first like is the generators' favourite), else one of
  :data:`NEUTRAL_MOTIFS`. True quality is independent of the motifs. The card's hook, the
  final prompt written from it, and nothing else carry the motif words (the other fields are
  filler that no motif shares), so novelty statistics see exactly the motifs.
* **Judges.** A judge call (``idea_scores``) reads the cards in the order its prompt shows them
  (parsed from the request, one JSON object per line) and scores each card: true quality +
  N(0, ``--sigma``) + ``--beta`` x (places before the last: the first shown gets
  beta x (N - 1), the last 0) + ``--lam`` when the card carries a liked motif, rounded and
  clipped to 0..100. With probability ``--p-refuse`` it refuses, with ``--p-garbage`` it
  answers something that is not a valid score list (the product re-asks it). A *broken*
  judge (``--broken random``: valid scores drawn uniformly from 0..100, ignoring the cards;
  ``garbage``: never a valid answer) replaces one panel member in the "broken" rows. The
  simulated judges ignore the recent-motif line of their prompt: in Variety only the code's
  novelty penalty acts.
* **Determinism.** Every draw comes from ``random.Random(derive_seed(--seed, ...))`` keyed by
  what the request carries (the API seed the product derived for the call, the number of
  messages for a re-ask), so the same card and the same judge noise appear in every
  configuration of the same run seed (paired comparisons), concurrent calls can finish in
  any order, and the same ``--seed`` gives the same table.

Parts:

* **Choosing well** (``--seeds`` runs per configuration, prompt only, exploration 0 and
  novelty off so that only the judging differs): the rate of picking the truly best card,
  the mean regret (best true quality - chosen), failed runs (too few usable judges), and the
  first-shown win rate (how often the card a judge was shown first wins, averaged over the
  panel's ok judges, as their orders are recorded in the transcript; chance is 1/N; card A
  for the shared-order rows). Failed runs count only in ``failed``. Configurations: one judge, mean of 3, median of 3, median
  of 5; the same panels with one broken judge. The product always shows each judge its own
  seeded order (there is no setting to turn that off), so "one shared order" is simulated:
  those rows, marked ``(sim)``, give every judge its position bias by the card ids' order
  A, B, C... instead of the order it was shown, which is what judges shown one unshuffled
  order would do. They are the simulation's counterfactual, not a product setting.
* **Variety** (``--variety-runs`` consecutive full runs sharing one generations history,
  repeated for ``--variety-seeds`` histories): the share of runs whose final prompt carries
  the most repeated liked motif, the number of distinct motifs across the final prompts,
  and the mean true quality of the chosen cards relative to greedy (a panel of
  ``--variety-judges`` judges, median), for greedy (exploration
  0, novelty off), exploration only (``--exploration-rate``), novelty only (window
  ``--novelty-window``), and both.
* **Rounds**: not measured yet (see :func:`rounds_part`).

The bench reports what happens; the product is never tuned to the simulation.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from image_project.app import RunFailed, RunResult, run_generation  # noqa: E402
from image_project.backends.base import TextReply, TextRequest  # noqa: E402
from image_project.backends.factory import Backends  # noqa: E402
from image_project.backends.offline import OfflineTextBackend  # noqa: E402
from image_project.config import AppConfig, load_config  # noqa: E402
from image_project.record import ScoringRecord  # noqa: E402
from image_project.seeding import derive_seed  # noqa: E402
from image_project.stages.profile import load_profile  # noqa: E402
from image_project.stages.title import TITLE_SYSTEM_PROMPT  # noqa: E402
from image_project.testing import FakeImageBackend, FunctionTextBackend  # noqa: E402

NEUTRAL_MOTIFS: tuple[str, ...] = (
    "brass orrery",
    "paper kites",
    "marsh herons",
    "copper kettles",
    "circus tent",
    "glacier caves",
    "desert caravan",
    "chess players",
    "greenhouse ferns",
    "harbour cranes",
    "violin workshop",
    "snowbound railway",
    "market stalls",
    "beekeeper hives",
    "lighthouse stairs",
    "origami birds",
    "clockwork toys",
    "bamboo scaffolding",
    "tidal pools",
    "carnival masks",
    "mountain monastery",
    "river ferry",
    "bicycle messengers",
    "ice skaters",
    "pottery kiln",
    "windmill fields",
    "whale skeleton",
    "silk weavers",
    "observatory dome",
    "fishing nets",
    "stone bridge",
    "tram depot",
    "orchard ladders",
    "puppet theatre",
    "cactus garden",
    "sailing regatta",
    "lantern parade",
    "hot springs",
    "candle makers",
    "glass blowers",
)
"""The motifs that are not likes (the world uses the first ``--neutral-motifs``). No two share
a word, and none shares a word with a like of ``config/profile.csv`` (a test checks it), so a
card's liked motifs are exactly the likes it carries and novelty's word statistics see
whole motifs."""

_HOOK_NUMBER = re.compile(r"No\. (\d+): ")
_REFUSAL = "I'm sorry, but I can't rate these pitches."
_GARBAGE: tuple[str, ...] = (
    "Card B is clearly the strongest, then A; the rest are weaker.",
    '{"scores": "B is best"}',
    '{"scores": [{"id": "A", "score": "high"}]}',
)


# --------------------------------------------------------------------------- the world


@dataclass(frozen=True)
class WorldParams:
    """The simulated world (the CLI flags of the same names; see the module docstring)."""

    quality_mean: float = 60.0
    quality_sd: float = 10.0
    motifs_per_card: int = 2
    p_liked: float = 0.25
    liked_motifs: int = 4
    neutral_motifs: int = 40
    sigma: float = 8.0
    beta: float = 2.0
    lam: float = 8.0
    p_refuse: float = 0.02
    p_garbage: float = 0.03
    broken: str = "random"


@dataclass(frozen=True)
class TrueCard:
    """A card as the world knows it."""

    hook: str
    quality: float
    motifs: tuple[str, ...]
    liked: bool


@dataclass(frozen=True)
class JudgeRole:
    """How a simulated judge behaves: broken or not, and whether its position bias follows
    the order it was shown (the product) or the ids' order A, B, C... (the shared-order
    counterfactual)."""

    broken: bool = False
    shared_order: bool = False


def judge_model(index: int, broken: bool = False) -> str:
    """The model name a simulated judge is configured with; the world tells judges apart by
    the ``model`` of the request, as a real backend would."""
    return "sim-judge-broken" if broken else f"sim-judge-{index}"


class World:
    """Answers the scoring stage's calls from a seeded simulated truth, and keeps that truth
    (by card hook) so that the bench can score what the product chose."""

    def __init__(
        self, seed: int, params: WorldParams, likes: Sequence[str], shared_order: bool = False
    ) -> None:
        if len(likes) < params.liked_motifs:
            raise ValueError(
                f"--liked-motifs {params.liked_motifs}: the profile has only {len(likes)} likes"
            )
        self.seed = seed
        self.params = params
        self.likes = tuple(likes[: params.liked_motifs])
        self.neutral = NEUTRAL_MOTIFS[: params.neutral_motifs]
        self.shared_order = shared_order
        self.cards: dict[str, TrueCard] = {}
        self._by_number: dict[str, TrueCard] = {}
        self._offline = OfflineTextBackend()

    def rng(self, *labels: object) -> random.Random:
        return random.Random(derive_seed(self.seed, *(str(x) for x in labels)))

    # -- cards

    def _motif(self, rng: random.Random, taken: Sequence[str]) -> str:
        while True:
            if rng.random() < self.params.p_liked:
                weights = [1.0 / (k + 1) for k in range(len(self.likes))]
                motif = rng.choices(self.likes, weights=weights)[0]
            else:
                motif = rng.choice(self.neutral)
            if motif not in taken:
                return motif

    def card(self, request: TextRequest) -> str:
        rng = self.rng("card", request.seed)
        p = self.params
        quality = min(100.0, max(0.0, rng.gauss(p.quality_mean, p.quality_sd)))
        motifs: list[str] = []
        for _ in range(p.motifs_per_card):
            motifs.append(self._motif(rng, motifs))
        hook = f"No. {request.seed}: {'; '.join(motifs)}"
        truth = TrueCard(hook, quality, tuple(motifs), any(m in self.likes for m in motifs))
        self.cards[hook] = truth
        self._by_number[str(request.seed)] = truth
        return json.dumps(
            {
                "hook": hook,
                "narrative": f"Narrative of pitch {request.seed}.",
                "options": {
                    "composition": ["layout one", "layout two"],
                    "palette": ["scheme one", "scheme two"],
                    "medium": ["technique one"],
                    "mood": ["tone one"],
                },
                "avoid": [],
            }
        )

    # -- judges

    def judge(self, request: TextRequest) -> str:
        shown = _shown_cards(request)
        model = request.model or ""
        rng = self.rng("judge", model, request.seed, len(request.messages))
        if model == judge_model(0, broken=True):
            if self.params.broken == "garbage":
                return rng.choice(_GARBAGE)
            return _scores_json({card_id: rng.randint(0, 100) for card_id, _ in shown})
        roll = rng.random()
        if roll < self.params.p_refuse:
            return _REFUSAL
        if roll < self.params.p_refuse + self.params.p_garbage:
            return rng.choice(_GARBAGE)
        return _scores_json(self._scores(shown, rng))

    def _scores(self, shown: Sequence[tuple[str, str]], rng: random.Random) -> dict[str, int]:
        p = self.params
        n = len(shown)
        # Noise is drawn in the ids' order, so a judge adds the same noise to a card wherever
        # it was shown; only the position term depends on the order.
        ids = sorted((card_id for card_id, _ in shown), key=lambda i: (len(i), i))
        noise = {card_id: rng.gauss(0.0, p.sigma) for card_id in ids}
        scores: dict[str, int] = {}
        for place, (card_id, hook) in enumerate(shown):
            truth = self.cards[hook]
            where = ids.index(card_id) if self.shared_order else place
            value = truth.quality + noise[card_id] + p.beta * (n - 1 - where)
            value += p.lam if truth.liked else 0.0
            scores[card_id] = min(100, max(0, round(value)))
        return dict(sorted(scores.items()))

    # -- prose

    def card_in(self, request: TextRequest) -> TrueCard | None:
        """The card a free-text request is about (the selected card, shown to the final
        prompt stages), found by its hook in the conversation."""
        for message in request.messages:
            for number in _HOOK_NUMBER.findall(message.content):
                if number in self._by_number:
                    return self._by_number[number]
        return None

    async def answer(self, request: TextRequest) -> str | TextReply:
        kind = request.json_schema.name if request.json_schema is not None else None
        if kind == "idea_card":
            return self.card(request)
        if kind == "idea_scores":
            return self.judge(request)
        system = next((m.content for m in request.messages if m.role == "system"), "")
        truth = None if kind or system == TITLE_SYSTEM_PROMPT else self.card_in(request)
        if truth is not None:
            return f"{truth.hook}."
        return await self._offline.complete(request)


def _shown_cards(request: TextRequest) -> list[tuple[str, str]]:
    """(id, hook) of each card in the judge prompt, in the order shown: the prompt holds one
    JSON object per line."""
    user = next(m.content for m in reversed(request.messages) if m.role == "user")
    shown = []
    for line in user.splitlines():
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and "id" in data and "hook" in data:
                shown.append((str(data["id"]), str(data["hook"])))
    if not shown:
        raise ValueError("the judge request shows no idea cards")
    return shown


def _scores_json(scores: Mapping[str, int]) -> str:
    return json.dumps({"scores": [{"id": i, "score": s} for i, s in scores.items()]})


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


PANELS: tuple[Panel, ...] = (
    Panel("one judge", 1, "median"),
    Panel("mean of 3", 3, "mean"),
    Panel("median of 3", 3, "median"),
    Panel("median of 5", 5, "median"),
    Panel("mean of 3, one broken", 3, "mean", broken=True),
    Panel("median of 3, one broken", 3, "median", broken=True),
    Panel("median of 5, one broken", 5, "median", broken=True),
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
    )


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def _ci95(values: Sequence[float]) -> float:
    """Half-width of the normal-approximation 95% confidence interval of the mean."""
    if len(values) < 2:
        return math.nan
    return 1.96 * statistics.stdev(values) / math.sqrt(len(values))


def paired_regret(a: PanelResult, b: PanelResult) -> dict[str, float]:
    """Mean regret of ``a`` minus ``b`` over the run seeds both completed (the same cards
    and the same judge noise for the shared judges), with its 95% interval."""
    diffs = [
        x - y for x, y in zip(a.regrets, b.regrets, strict=True) if x is not None and y is not None
    ]
    return {"runs": len(diffs), "mean": _mean(diffs), "ci95": _ci95(diffs)}


def headline(results: Sequence[PanelResult]) -> dict[str, Any]:
    """The figures the README quotes: median of 3 (shuffled) against one judge, and how
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
        "first_position_advantage": {
            "one judge": advantage(one),
            "median of 3": advantage(med3),
            "median of 3, shared order (sim)": advantage(shared),
        },
        "share_of_advantage_removed_by_shuffled_median3": (
            1 - advantage(med3) / advantage(one) if advantage(one) > 2 * se else math.nan
        ),
    }


async def choosing_well(args: argparse.Namespace, likes: Sequence[str]) -> list[PanelResult]:
    """Every configuration of :data:`PANELS` over the same ``--seeds`` run seeds."""
    results = []
    params = world_params(args)
    for panel in PANELS:
        world = World(args.seed, params, likes, shared_order=panel.shared_order)
        chosen: list[Chosen | None] = []
        with tempfile.TemporaryDirectory(prefix="quality-choose-") as tmp:
            cfg = make_config(
                Path(tmp),
                panel_override(panel.judges, broken=panel.broken),
                f"prompt.scoring.aggregation={panel.aggregation}",
                f"prompt.scoring.num_ideas={args.ideas}",
                "prompt.scoring.exploration_rate=0",
                "prompt.scoring.novelty.enabled=false",
                prompt_only=True,
            )
            for i in range(args.seeds):
                run_seed = derive_seed(args.seed, "choose", i)
                chosen.append(await run_once(world, cfg, run_seed, f"choose_{i:05d}"))
        results.append(_summarise_panel(panel, chosen, args.ideas))
        _progress(args, f"choosing well: {panel.name} done")
    return results


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


@dataclass
class StrategyResult:
    name: str
    exploration_rate: float
    novelty_window: int
    histories: int
    runs_per_history: int
    failed: int
    top_liked_share: float
    distinct_motifs: float
    mean_quality: float
    quality_vs_greedy: float = math.nan
    top_liked_motifs: list[str] = field(default_factory=list)


def _history_stats(chosen: Sequence[Chosen], world: World) -> tuple[float, int, str]:
    """Share of runs whose final prompt carries the most repeated liked motif, the number of
    distinct motifs in the final prompts, and that liked motif."""
    likes = world.likes
    every = (*likes, *world.neutral)
    carried = [{m for m in every if m in c.final_prompt} for c in chosen]
    liked_counts = {like: sum(like in c for c in carried) for like in likes}
    top = max(likes, key=lambda like: (liked_counts[like], -likes.index(like)))
    distinct = len(set().union(*carried)) if carried else 0
    return liked_counts[top] / max(1, len(chosen)), distinct, top


async def variety(args: argparse.Namespace, likes: Sequence[str]) -> list[StrategyResult]:
    """Every strategy of :data:`STRATEGIES` over the same histories (the same run seeds)."""
    params = world_params(args)
    results = []
    for strategy in STRATEGIES:
        rate = args.exploration_rate if strategy.exploration else 0.0
        shares: list[float] = []
        distincts: list[float] = []
        qualities: list[float] = []
        tops: list[str] = []
        failed = 0
        for h in range(args.variety_seeds):
            world = World(args.seed, params, likes)
            chosen: list[Chosen] = []
            with tempfile.TemporaryDirectory(prefix="quality-variety-") as tmp:
                cfg = make_config(
                    Path(tmp),
                    panel_override(args.variety_judges),
                    f"prompt.scoring.num_ideas={args.ideas}",
                    f"prompt.scoring.exploration_rate={rate}",
                    f"prompt.scoring.novelty.enabled={'true' if strategy.novelty else 'false'}",
                    f"prompt.scoring.novelty.window={args.novelty_window}",
                    prompt_only=False,
                )
                for i in range(args.variety_runs):
                    run_seed = derive_seed(args.seed, "variety", h, i)
                    one = await run_once(world, cfg, run_seed, f"variety_{h:03d}_{i:03d}")
                    if one is None:
                        failed += 1
                    else:
                        chosen.append(one)
            share, distinct, top = _history_stats(chosen, world)
            shares.append(share)
            distincts.append(float(distinct))
            qualities.extend(c.quality for c in chosen)
            tops.append(top)
        results.append(
            StrategyResult(
                name=strategy.name,
                exploration_rate=rate,
                novelty_window=args.novelty_window if strategy.novelty else 0,
                histories=args.variety_seeds,
                runs_per_history=args.variety_runs,
                failed=failed,
                top_liked_share=_mean(shares),
                distinct_motifs=_mean(distincts),
                mean_quality=_mean(qualities),
                top_liked_motifs=tops,
            )
        )
        _progress(args, f"variety: {strategy.name} done")
    greedy = results[0].mean_quality
    for r in results:
        r.quality_vs_greedy = r.mean_quality - greedy
    return results


# --------------------------------------------------------------------------- rounds


async def rounds_part(args: argparse.Namespace, likes: Sequence[str]) -> dict[str, Any] | None:
    """Rounds (multi-round selection, issue 17): not measured yet, because the product has
    no multi-round selection. When it exists this part will run the same world through the
    rounds configuration and report, per round, the mean true quality of the chosen card
    (and its regret against the best card ever generated in the run) and the model calls
    spent (``result.record.usage.model_calls``, split by round from the record's
    ``evolution``). Returns None (reported as "not measured") until then."""
    return None


# --------------------------------------------------------------------------- output


def world_params(args: argparse.Namespace) -> WorldParams:
    return WorldParams(
        quality_mean=args.quality_mean,
        quality_sd=args.quality_sd,
        motifs_per_card=args.motifs_per_card,
        p_liked=args.p_liked,
        liked_motifs=args.liked_motifs,
        neutral_motifs=args.neutral_motifs,
        sigma=args.sigma,
        beta=args.beta,
        lam=args.lam,
        p_refuse=args.p_refuse,
        p_garbage=args.p_garbage,
        broken=args.broken,
    )


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    """``value * scale`` in ``spec`` (a trailing ``%`` is appended literally), or ``n/a`` for
    a figure with no data (NaN, or null once read back from ``--json``)."""
    if value is None or math.isnan(value):
        return "n/a"
    suffix = "%" if spec.endswith("%") else ""
    return format(value * scale, spec.removesuffix("%")) + suffix


def format_table(report: Mapping[str, Any]) -> str:
    """The report as the text table printed on stdout (deterministic for a seed)."""
    world = report["world"]
    lines = [
        f"world: seed {report['seed']}, {report['ideas']} ideas, "
        + ", ".join(f"{k}={v}" for k, v in world.items()),
        "",
        f"choosing well ({report['seeds']} run seeds each; prompt only, exploration 0, "
        "novelty off)",
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
    d = h["median3_minus_one_judge_regret"]
    adv = h["first_position_advantage"]
    lines += [
        f"median of 3 - one judge, regret (paired over {d['runs']} runs): "
        f"{_fmt(d['mean'], '+.2f')} +- {_fmt(d['ci95'], '.2f')}",
        "first-position advantage (first-shown win rate - chance): "
        + ", ".join(f"{k} {_fmt(v, '+.1f', 100)} pts" for k, v in adv.items())
        + "; share of the single judge's removed by the shuffled median of 3: "
        + _fmt(h["share_of_advantage_removed_by_shuffled_median3"], ".0f%", 100),
    ]
    v = report["variety"]
    if v:
        lines += [
            "",
            f"variety ({v[0]['runs_per_history']} consecutive runs sharing one history, "
            f"x{v[0]['histories']} histories; {report['variety_judges']} judge(s), median)",
            f"{'strategy':<24}{'rate':>6}{'window':>8}{'top-liked%':>12}{'distinct':>10}"
            f"{'quality':>9}{'vs greedy':>11}{'failed':>8}",
        ]
        for r in v:
            lines.append(
                f"{r['name']:<24}{r['exploration_rate']:>6.2f}{r['novelty_window']:>8}"
                f"{_fmt(r['top_liked_share'], '.1f', 100):>12}"
                f"{_fmt(r['distinct_motifs'], '.1f'):>10}{_fmt(r['mean_quality'], '.2f'):>9}"
                f"{_fmt(r['quality_vs_greedy'], '+.2f'):>11}{r['failed']:>8}"
            )
    lines += ["", "rounds: " + ("not measured (no multi-round selection yet)")]
    if report["rounds"] is not None:
        lines[-1] = "rounds: " + json.dumps(report["rounds"])
    return "\n".join(lines)


def plot(report: Mapping[str, Any], path: Path) -> None:
    """One PNG, three panels: regret and pick-the-best rate per judging configuration, the
    first-shown win rate against chance, and variety against quality per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["choosing_well"]
    names = [r["name"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(17, 6.2), gridspec_kw={"width_ratios": [1.3, 1, 1]})
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
    v = report["variety"]
    if v:
        xs = [100 * r["top_liked_share"] for r in v]
        ys2 = [r["distinct_motifs"] for r in v]
        ax.scatter(xs, ys2, s=80, color="#2ca02c")
        for r, x, y in zip(v, xs, ys2, strict=True):
            ax.annotate(
                f"{r['name']}\nquality {r['quality_vs_greedy']:+.1f} vs greedy",
                (x, y),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=8,
            )
        ax.set_xlabel("% of runs carrying the most repeated liked motif (lower = more varied)")
        ax.set_ylabel("distinct motifs across the runs (higher = more varied)")
        ax.set_title(f"Variety over {v[0]['runs_per_history']} consecutive runs")
        ax.margins(0.35)
    fig.suptitle(
        f"bench/quality.py: simulated world, seed {report['seed']} "
        "(blue: shuffled panels; red: one broken judge; grey: shared order, simulated)",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def _progress(args: argparse.Namespace, line: str) -> None:
    if not args.silent:
        print(f"[{time.perf_counter() - args.started:6.1f}s] {line}", file=sys.stderr)


async def build_report(args: argparse.Namespace) -> dict[str, Any]:
    """Run every part and return the report (what ``--json`` writes)."""
    cfg = load_config(root=REPO, env={})
    likes = load_profile(cfg.prompt.profile_path).likes
    choosing = await choosing_well(args, likes)
    varied = await variety(args, likes) if args.variety_runs > 0 else []
    exclude = {"regrets"}
    rounds = await rounds_part(args, likes)
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
        "headline": headline(choosing),
        "variety": [asdict(r) for r in varied],
        "rounds": rounds,
    }


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
                   "None = 1000, or 40 with --quick")  # fmt: skip
    p.add_argument("--ideas", type=int, default=6, help="idea cards per run (num_ideas)")
    p.add_argument("--variety-runs", type=int, default=30, help="consecutive runs per history")
    p.add_argument("--variety-seeds", type=int, default=None, help="histories per strategy; "
                   "None = 5, or 1 with --quick")  # fmt: skip
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
    p.add_argument("--json", type=Path, default=None, help="write the report as JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write the figure (PNG) here")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    if args.seeds is None:
        args.seeds = 40 if args.quick else 1000
    if args.variety_seeds is None:
        args.variety_seeds = 1 if args.quick else 5
    names = (
        "seeds",
        "ideas",
        "variety_judges",
        "motifs_per_card",
        "liked_motifs",
        "neutral_motifs",
    )
    for name in names:
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: got {getattr(args, name)}, must be >= 1")
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
    # The runs' own logs go to their run log files; the first variety run's "no history
    # yet" warning is expected and would only clutter the terminal.
    log = logging.getLogger("image_project")
    quiet, propagate = logging.NullHandler(), log.propagate
    log.addHandler(quiet)
    log.propagate = False
    try:
        report = anyio.run(build_report, args)
    finally:
        log.removeHandler(quiet)
        log.propagate = propagate
    print(format_table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(_json_safe(report), indent=2, allow_nan=False)
        args.json.write_text(text + "\n", encoding="utf-8")
    if args.plot:
        plot(report, args.plot)
    _progress(args, f"done in {time.perf_counter() - args.started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
