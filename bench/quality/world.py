"""The simulated world of the selection-quality bench: what a generator and a judge call get.

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
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


from image_project import markers  # noqa: E402
from image_project.backends.base import TextReply, TextRequest  # noqa: E402
from image_project.backends.offline.text import OfflineTextBackend  # noqa: E402
from image_project.seeding import derive_seed  # noqa: E402
from image_project.stages.scoring.evolution import MUTATION_AXES  # noqa: E402
from image_project.stages.scoring.hints import content_tokens  # noqa: E402
from image_project.stages.title import TITLE_SYSTEM_PROMPT  # noqa: E402

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
