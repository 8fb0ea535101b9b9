"""Does black-box scoring choose well, and does it keep variety? Measured in a simulated world
where the truth is known.

    python bench/quality.py                          # the full bench (tens of minutes)
    python bench/quality.py --only sweep --json a.json   # one part (choosing, sweep, ...)
    python bench/quality.py --merge a.json b.json ...     # the report of the parts joined
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
* **Variants.** A generator call that reworks a card (an evolution round's ``variant_*``
  step: the request shows ``The idea card to rework:`` with the parent's ``Hook:`` line and a
  ``Directive:`` line) gets a card whose true quality is the parent's - drift +
  N(0, ``--child-sigma``), clipped to 0..100, for each drift of ``--drifts`` (0 and 1.5):
  drift 0 does not presuppose that mutation improves cards (a variant is as likely worse as
  better than its parent, and only the judging can make rounds pay); 1.5 makes variants
  lose on average. The default sigma 6 (below ``--quality-sd`` 10) makes a
  variant closer to its parent than two unrelated cards are. It keeps the parent's motifs,
  except that a directive naming the ``setting`` replaces one of them (a seeded pick) with a
  fresh draw as above; the options fields the directive names (composition, palette,
  medium, mood) get new filler words, the others keep the parent's, so the product's
  near-duplicate check sees variants that differ from their parents by what they changed.
  The simulated world has no LLM survivor selector: Rounds use ``selector: code``.
* **Judges.** A judge call (``idea_scores``) reads the cards in the order its prompt shows them
  (parsed from the request, one JSON object per line) and scores each card: true quality +
  noise + a position bias + ``--lam`` when the card carries a liked motif, rounded and
  clipped to 0..100. The noise is N(0, ``--sigma``), of which a share ``--judge-corr``
  (of its variance) is the card's own error that every judge shares (three rubric prompts
  on one model make the same mistakes), the rest the judge's; two judges' errors correlate
  by ``--judge-corr``. The position bias (``--position-bias``) is ``bounded`` by default:
  the first card shown gets ``--beta`` x (``--ideas`` - 1) points, the last 0, evenly
  spread whatever the number of cards shown; ``linear`` gives ``--beta`` per place before
  the last, growing without bound with the cards shown (the old world). With probability
  ``--p-refuse`` a call refuses, with ``--p-garbage`` it answers something that is not a
  valid score list (the product re-asks it; a re-ask draws anew, so it can recover). A
  *broken* judge (``--broken random``: valid scores drawn uniformly from 0..100, ignoring
  the cards; ``garbage``: never a valid answer) replaces one panel member in the "broken"
  rows. **Judge scales** (``--judge-scale-spread`` s, ``--judge-offset-spread`` o, both 0
  by default: every judge on one scale): judge k of a panel (its model ``sim-judge-k``)
  takes step 0, +1, -1, +2, -2, ... for k = 1, 2, 3, 4, 5, ... and turns the value above
  into ``--quality-mean`` + step x o + exp(step x s) x (value - ``--quality-mean``) before
  rounding and clipping: the single judge (judge 1) is on the common scale; in a panel of
  3 one judge scores higher and wider, one lower and narrower, as real judges use 0..100
  differently. The steps are fixed, not drawn, so no lucky draw decides a panel. The
  simulated judges ignore the recent-motif line of their prompt: in Variety only
  the code's novelty penalty acts.
* **Motif encoding** (``--motif-encoding``). The likes are four- or five-word phrases;
  ``equal`` (the default) lengthens the other motifs to as many words (from
  :data:`MOTIF_PADDING`), so that a word-counting measure could not treat liked motifs
  differently; ``old`` keeps the two-word ones (the check).
* **Determinism.** Every draw comes from ``random.Random(derive_seed(--seed, ...))`` keyed by
  what the request carries (the API seed the product derived for the call, the attempt
  number for a re-ask, the card's hook for the shared noise), so the same card and the same
  judge noise appear in every configuration of the same run seed (paired comparisons),
  concurrent calls can finish in any order, and the same ``--seed`` gives the same table.

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
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provenance import Provenance  # noqa: E402

from image_project import markers  # noqa: E402
from image_project.app import RunFailed, RunResult, run_generation  # noqa: E402
from image_project.backends.base import TextReply, TextRequest  # noqa: E402
from image_project.backends.factory import Backends  # noqa: E402
from image_project.backends.offline import OfflineTextBackend  # noqa: E402
from image_project.config import AppConfig, load_config  # noqa: E402
from image_project.config.models import Aggregation, Normalise  # noqa: E402
from image_project.errors import ConfigError  # noqa: E402
from image_project.record import ScoreRow, ScoringRecord  # noqa: E402
from image_project.seeding import derive_seed  # noqa: E402
from image_project.stages.profile import load_profile  # noqa: E402
from image_project.stages.scoring.evolution import MUTATION_AXES, ranked  # noqa: E402
from image_project.stages.scoring.hints import content_tokens  # noqa: E402
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

_PADDING_TEXT = """
    quartz nimble velvet timber hollow whistle lattice meadowsweet pebble thistle saddle
    gravel juniper anchor bellows cobble parchment spindle walnut trellis ember harness
    acorn quiver satchel turnip marble oyster ledger pewter rafter sorrel tassel wicker
    barley chisel dormer flagon gusset hawser inkwell jigsaw kestrel lintel mortar nutmeg
    oxbow paddock quince rudder sextant tinder umbrella vellum wagon yarrow zither almond
    bramble cistern dappled eddying fennel gable heron iris jasmine kelp loom mallow nettle
    obelisk pulley quill rivet sluice turret urchin valve wren yew zinnia abacus bobbin
    cairn dinghy easel ferrule gimbal hopper ingot jetty keel lever mitre nozzle outrigger
    pinion ratchet shuttle tiller
    """
MOTIF_PADDING: tuple[str, ...] = tuple(_PADDING_TEXT.split())
"""Words that lengthen the other motifs in the ``equal`` encoding: each motif of
:data:`NEUTRAL_MOTIFS` gets the next words of this list until it has as many words as the
liked motif of the same place (cycling), so liked and other motifs are phrases of equal
length. No word is shared with a motif, a like or another padding (a test checks it)."""

_HOOK_NUMBER = re.compile(r"No\. (\d+): ")
_DIRECTIVE = re.compile(rf"^{re.escape(markers.DIRECTIVE)}(.+)$", re.MULTILINE)
_OPTION_AXES: dict[str, tuple[str, str, int]] = {
    "composition": ("layout", "c", 2),
    "palette": ("scheme", "p", 2),
    "medium": ("technique", "m", 1),
    "mood": ("tone", "t", 1),
}
"""A card's options field: (its filler word, the tag letter a variant that reworks it adds,
how many entries). The tags keep a reworked field's words apart from its parent's."""
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
    child_sigma: float = 6.0
    child_drift: float = 0.0
    judge_corr: float = 0.0
    position_bias: str = "bounded"
    bias_cards: int = 6
    motif_encoding: str = "equal"
    judge_scale_spread: float = 0.0
    judge_offset_spread: float = 0.0


@dataclass(frozen=True)
class TrueCard:
    """A card as the world knows it."""

    hook: str
    quality: float
    motifs: tuple[str, ...]
    liked: bool
    parent: TrueCard | None = None
    """The card it is a variant of (None for a round-0 card)."""
    reworked: frozenset[str] = frozenset()
    """The options fields its mutation directive reworked (a variant's)."""

    @property
    def number(self) -> str:
        """The API seed of the call that wrote it, as its hook shows it (``No. 123: ...``)."""
        return self.hook.removeprefix("No. ").split(":", 1)[0]


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
        self.neutral = neutral_motifs(params, self.likes)
        self.shared_order = shared_order
        self.cards: dict[str, TrueCard] = {}
        self._attempts: dict[tuple[str, int | None], int] = {}
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
        quality = _clip(rng.gauss(p.quality_mean, p.quality_sd))
        motifs: list[str] = []
        for _ in range(p.motifs_per_card):
            motifs.append(self._motif(rng, motifs))
        return self._keep(request, quality, motifs, reworked=())

    def variant(self, request: TextRequest) -> str:
        """A variant of the card the request reworks (an evolution round's generator call):
        the parent's true quality + the world's child drift + N(0, ``--child-sigma``), clipped to
        0..100; the parent's motifs, one of them (a seeded pick) replaced by a fresh draw when
        the mutation directive names the setting; the options fields the directive names
        reworked (new filler words), the others the parent's."""
        user = _user_text(request)
        parent = self._parent_of(user)
        directive = _DIRECTIVE.search(user)
        if directive is None:
            raise ValueError(f"the variant request carries no {markers.DIRECTIVE!r} line")
        axes = {a for a in MUTATION_AXES if re.search(rf"\b{a}\b", directive.group(1))}
        if not axes:
            raise ValueError(f"the variant directive names no axis: {directive.group(1)!r}")
        rng = self.rng("variant", request.seed)
        p = self.params
        quality = _clip(parent.quality + p.child_drift + rng.gauss(0.0, p.child_sigma))
        motifs = list(parent.motifs)
        if "setting" in axes:
            place = rng.randrange(len(motifs))
            motifs[place] = self._motif(rng, parent.motifs)
        reworked = tuple(a for a in _OPTION_AXES if a in axes)
        return self._keep(request, quality, motifs, reworked, parent=parent)

    def _parent_of(self, user: str) -> TrueCard:
        hook = next((line for line in user.splitlines() if line.startswith(markers.HOOK)), "")
        number = _HOOK_NUMBER.search(hook)
        if number is None or number.group(1) not in self._by_number:
            raise ValueError(f"the variant request reworks no card of this world: {hook!r}")
        return self._by_number[number.group(1)]

    def _keep(
        self,
        request: TextRequest,
        quality: float,
        motifs: Sequence[str],
        reworked: Sequence[str],
        parent: TrueCard | None = None,
    ) -> str:
        """Record the card's truth under its hook and number, and answer the card: the hook
        carries the motifs, the rest is filler (a variant keeps its parent's filler for the
        options its directive leaves alone)."""
        number = str(request.seed)
        hook = f"No. {number}: {'; '.join(motifs)}"
        liked = any(m in self.likes for m in motifs)
        truth = TrueCard(hook, quality, tuple(motifs), liked, parent, frozenset(reworked))
        self.cards[hook] = truth
        self._by_number[number] = truth
        return json.dumps(
            {
                "hook": hook,
                "narrative": f"Narrative of pitch {number}.",
                "options": {axis: _filler(truth, axis) for axis in _OPTION_AXES},
                "avoid": [],
            }
        )

    # -- judges

    def judge(self, request: TextRequest) -> str:
        shown = _shown_cards(request)
        model = request.model or ""
        # The attempts of one judge call follow each other (a re-ask waits for the answer it
        # re-asks), so counting them per (model, API seed) is deterministic: a re-asked judge
        # draws anew and can answer validly.
        key = (model, request.seed)
        attempt = self._attempts.get(key, 0)
        self._attempts[key] = attempt + 1
        rng = self.rng("judge", model, request.seed, attempt)
        if model == judge_model(0, broken=True):
            if self.params.broken == "garbage":
                return rng.choice(_GARBAGE)
            return _scores_json({card_id: rng.randint(0, 100) for card_id, _ in shown})
        roll = rng.random()
        if roll < self.params.p_refuse:
            return _REFUSAL
        if roll < self.params.p_refuse + self.params.p_garbage:
            return rng.choice(_GARBAGE)
        return _scores_json(self._scores(shown, rng, self.judge_scale(model)))

    def position_bias(self, place: int, n: int) -> float:
        """Points a judge adds to the card it saw at ``place`` (0 first) of ``n``: ``linear``
        gives ``beta`` per place before the last (growing with ``n``); ``bounded`` spreads
        ``beta x (bias_cards - 1)`` (the linear bias of a ``bias_cards``-card round) evenly
        from the first card to the last, whatever ``n``."""
        p = self.params
        if p.position_bias == "linear":
            return p.beta * (n - 1 - place)
        return p.beta * (p.bias_cards - 1) * (n - 1 - place) / (n - 1) if n > 1 else 0.0

    def judge_scale(self, model: str) -> tuple[float, float]:
        """(scale, offset) of the judge configured with ``model``: judge k of the panel
        (``sim-judge-k``) takes step 0, +1, -1, +2, -2, ... for k = 1, 2, 3, 4, 5, ..., and
        its scale is ``exp(step x --judge-scale-spread)`` and its offset ``step x
        --judge-offset-spread`` points. Judge 1 (the single judge) is on the common scale,
        a panel of 3 has one judge above it and one below; both spreads 0 (the default)
        put every judge on one scale."""
        number = model.removeprefix("sim-judge-")
        if not number.isdigit():
            return 1.0, 0.0
        k = int(number)
        step = (k // 2) * (1 if k % 2 == 0 else -1)
        p = self.params
        return math.exp(step * p.judge_scale_spread), step * p.judge_offset_spread

    def shared_noise(self, hook: str) -> float:
        """The part of every judge's error on a card that all judges share (N(0, sigma), the
        same for every judge and attempt: it is the card's, keyed by its hook)."""
        return self.rng("shared-noise", hook).gauss(0.0, self.params.sigma)

    def _scores(
        self,
        shown: Sequence[tuple[str, str]],
        rng: random.Random,
        scale: tuple[float, float] = (1.0, 0.0),
    ) -> dict[str, int]:
        p = self.params
        n = len(shown)
        # Noise is drawn in the ids' order, so a judge adds the same noise to a card wherever
        # it was shown; only the position term depends on the order. A share judge_corr of
        # its variance is the card's shared noise (the correlation of two judges' errors).
        ids = sorted((card_id for card_id, _ in shown), key=lambda i: (len(i), i))
        own = {card_id: rng.gauss(0.0, p.sigma) for card_id in ids}
        hooks = dict(shown)
        a, b = math.sqrt(p.judge_corr), math.sqrt(1.0 - p.judge_corr)
        noise = {i: a * self.shared_noise(hooks[i]) + b * own[i] for i in ids}
        scores: dict[str, int] = {}
        for place, (card_id, hook) in enumerate(shown):
            truth = self.cards[hook]
            where = ids.index(card_id) if self.shared_order else place
            value = truth.quality + noise[card_id] + self.position_bias(where, n)
            value += p.lam if truth.liked else 0.0
            if scale != (1.0, 0.0):  # this judge's own scale around the world's mean quality
                value = p.quality_mean + scale[1] + scale[0] * (value - p.quality_mean)
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
            reworks = markers.REWORK in _user_text(request)
            return self.variant(request) if reworks else self.card(request)
        if kind == "idea_scores":
            return self.judge(request)
        system = next((m.content for m in request.messages if m.role == "system"), "")
        truth = None if kind or system == TITLE_SYSTEM_PROMPT else self.card_in(request)
        if truth is not None:
            return f"{truth.hook}."
        return await self._offline.complete(request)


def _clip(quality: float) -> float:
    return min(100.0, max(0.0, quality))


def motif_words(motif: str) -> list[str]:
    """The words of a motif that novelty counts (content words of 3 letters or more)."""
    return [w for w in content_tokens(motif) if len(w) >= 3]


def neutral_motifs(params: WorldParams, likes: Sequence[str]) -> tuple[str, ...]:
    """The world's other motifs: the first ``neutral_motifs`` of :data:`NEUTRAL_MOTIFS`, as
    they are (``old`` encoding: two words against the likes' four or five) or lengthened from
    :data:`MOTIF_PADDING` to the word count of the liked motif of the same place, cycling
    (``equal``)."""
    base = NEUTRAL_MOTIFS[: params.neutral_motifs]
    if params.motif_encoding == "old":
        return base
    lengths = [len(motif_words(like)) for like in likes]
    padding = iter(MOTIF_PADDING)
    out = []
    for k, motif in enumerate(base):
        extra = max(0, lengths[k % len(lengths)] - len(motif_words(motif)))
        out.append(" ".join([motif, *(next(padding) for _ in range(extra))]))
    return tuple(out)


def _filler(card: TrueCard, axis: str) -> list[str]:
    """The entries of one options field: the filler of round 0's cards (``layout one``, ...),
    with the tag of the nearest ancestor (the card itself included) that reworked the field,
    e.g. ``layout c123 one``."""
    word, tag, count = _OPTION_AXES[axis]
    owner: TrueCard | None = card
    while owner is not None and axis not in owner.reworked:
        owner = owner.parent
    mark = f" {tag}{owner.number}" if owner is not None else ""
    return [f"{word}{mark} {n}" for n in ("one", "two")[:count]]


def _user_text(request: TextRequest) -> str:
    return next((m.content for m in reversed(request.messages) if m.role == "user"), "")


def _shown_cards(request: TextRequest) -> list[tuple[str, str]]:
    """(id, hook) of each card in the judge prompt, in the order shown: the prompt holds one
    JSON object per line."""
    user = _user_text(request)
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
            # The median of the judges' own scores, as Variety's and Rounds' headers say (the
            # product's default became the mean of z-scores after the sweep); the judging
            # configurations of Choosing well and the sweep set their own below.
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
        _progress(args, f"choosing well: {panel.name} done")
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


def _by_spread(
    sweep: Sequence[Mapping[str, Any]],
) -> list[tuple[tuple[float, float], list[Mapping[str, Any]]]]:
    """The sweep's rows grouped by judge-scale world, in the order they come."""
    groups: dict[tuple[float, float], list[Mapping[str, Any]]] = {}
    for row in sweep:
        key = (row.get("judge_scale_spread", 0.0), row.get("judge_offset_spread", 0.0))
        groups.setdefault(key, []).append(row)
    return list(groups.items())


def _spread_label(scale: float, offset: float) -> str:
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
            _progress(args, f"{_spread_label(scale, offset)}, judge correlation {rho:g} done")
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
            _progress(args, f"variety ({encoding} motifs): {strategy.name} done")
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
    _progress(args, f"rounds: {row.name} done")
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
        child_sigma=args.child_sigma,
        child_drift=0.0,
        judge_corr=args.judge_corr,
        position_bias=args.position_bias,
        bias_cards=args.ideas,
        motif_encoding=args.motif_encoding,
        judge_scale_spread=args.judge_scale_spread,
        judge_offset_spread=args.judge_offset_spread,
    )


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
        for (scale, offset), rows in _by_spread(sweep):
            names = list(dict.fromkeys(p["name"] for row in rows for p in row["panels"]))
            lines += [
                _spread_label(scale, offset),
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
    groups = _by_spread(sweep)
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


# --------------------------------------------------------------------------- main


def _progress(args: argparse.Namespace, line: str) -> None:
    if not args.silent:
        print(f"[{time.perf_counter() - args.started:6.1f}s] {line}", file=sys.stderr)


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
    _progress(args, f"done in {time.perf_counter() - args.started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
