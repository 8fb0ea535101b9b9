"""How independent the judges on one model are: the *effective number of judges* of a
same-model group, measured against judges on other models (docs/scoring.md, "Know your
panel").

Model. Judge ``j`` scores card ``c`` as ``s_jc = a_j + q_c + e_jc``: an offset of its own,
the card's quality ``q_c`` (the same for every judge) and an error. The errors of the ``N``
judges of one model share a part: ``e_jc = sqrt(rho) u_c + sqrt(1 - rho) v_jc`` with
``var(e) = sigma^2``, ``u`` common to the group, ``v`` the judge's own; a *reference* judge
(on another model) has an error independent of both. Within one round every judge's scores
are centred on its own mean over the round's cards (that removes ``a_j`` and anything the
run adds to every card), and then, over cards:

* ``cov(s_j, s_k) = var(q) + rho sigma^2`` for two judges of the group,
* ``cov(s_j, s_r) = var(q)`` for a group judge and a reference judge,
* ``var(s_j) = var(q) + sigma^2``,

so ``rho = (C_GG - C_GR) / (V_G - C_GR)`` and the group mean's error variance is that of
``N_eff = N / (1 + (N - 1) rho)`` independent judges. The three moments are pooled over
every round of every run that has at least two ok judges of the group, one ok reference
judge and two cards they all scored (sums of centred cross-products over cards, averaged
over the pairs of judges, summed over rounds, so that every round weighs by its degrees of
freedom). The interval is a percentile bootstrap over runs (a run's rounds stay together),
seeded, so the same records always print the same interval. ``rho`` is clamped to 0..1 for
``N_eff`` (errors that move against each other are outside the model), so ``N_eff`` lies in
``1..N``.

Why a reference is needed: within a one-model panel, judges agree both because the cards
differ (``var(q)``) and because they share errors (``rho sigma^2``), and nothing in their own
scores tells the two apart; taking out each card's panel mean removes both at once. The
estimate therefore needs at least two models, and it assumes that the reference judge
measures the same quality on the same scale (after centring) with an error independent of
the group's. Whatever the group shares that the reference does not — a rubric's taste as
much as a model's blind spot — counts as shared error.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations

from image_project.record import JudgeResult, ScoringRecord
from image_project.seeding import rng_for

__all__ = [
    "BOOTSTRAP_SEED",
    "GroupIndependence",
    "PanelIndependence",
    "RoundScores",
    "effective_judges",
    "estimate_independence",
    "panel_independence",
]

BOOTSTRAP_SEED = 0
"""The seed of the bootstrap (with the label ``panel_independence``): fixed, so the interval
is a function of the records alone."""
_RESAMPLES = 2000
_LEVEL = 0.95
_MIN_RUNS = 5  # fewer runs than this give no interval worth printing

RoundScores = Mapping[str, tuple[str, Mapping[str, int]]]
"""One round: judge id -> (its model, its ok scores by card id; empty when not ok)."""


def effective_judges(n: int, rho: float) -> float:
    """``N / (1 + (N - 1) rho)`` with ``rho`` clamped to 0..1: how many independent judges
    the mean of ``n`` judges whose errors share ``rho`` of their variance is worth."""
    r = min(1.0, max(0.0, rho))
    return n / (1.0 + (n - 1) * r)


@dataclass(frozen=True)
class GroupIndependence:
    """The judges on ``model`` measured against the judges on other models (``reference``).
    ``rho`` is the estimated share of their error variance they have in common and
    ``n_eff`` what the group is worth in independent judges, each with its 95 % bootstrap
    interval (None when it could not be estimated: ``reason`` says why). ``runs`` and
    ``rounds`` count what the estimate is made of, ``cards`` the card scores per judge."""

    model: str
    judges: tuple[str, ...]
    reference: tuple[str, ...]
    runs: int = 0
    rounds: int = 0
    cards: int = 0
    rho: float | None = None
    rho_interval: tuple[float, float] | None = None
    n_eff: float | None = None
    n_eff_interval: tuple[float, float] | None = None
    reason: str | None = None

    @property
    def n(self) -> int:
        return len(self.judges)

    def sentence(self) -> str:
        """The finding in plain words."""
        who = f"Your {self.n} judges on {self.model} ({', '.join(self.judges)})"
        moved = sorted(set(self.judges) & set(self.reference))
        reference = ", ".join(self.reference) + " on other models"
        if moved:
            reference += f" ({', '.join(moved)} also ran on another model in some runs)"
        against = f"measured against {reference} over {self.runs} runs ({self.rounds} rounds)"
        if self.n_eff is None:
            return (
                f"{who} could not be measured against {reference}: "
                f"{self.reason}; they act like somewhere between 1 and {self.n} judges."
            )
        text = f"{who} act like {self.n_eff:.2f} independent judges"
        if self.n_eff_interval is not None:
            low, high = self.n_eff_interval
            text += f" (95% interval {low:.2f} to {high:.2f})"
        rho = f"shared error share rho = {self.rho:.2f}" if self.rho is not None else ""
        if self.rho_interval is not None:
            rho += f" ({self.rho_interval[0]:.2f} to {self.rho_interval[1]:.2f})"
        return f"{text}, {against}; {rho}."


@dataclass(frozen=True)
class PanelIndependence:
    """Every same-model group of the panel (``groups``, one per model with two or more
    judges), or, when every judge used one model, nothing measurable: ``single_model``."""

    models: tuple[str, ...]
    judges: tuple[str, ...]
    groups: tuple[GroupIndependence, ...]

    @property
    def single_model(self) -> str | None:
        return self.models[0] if len(self.models) == 1 and len(self.judges) > 1 else None

    def sentences(self) -> list[str]:
        """Plain sentences: one per group, or the one-model line (nothing for one judge)."""
        if self.single_model is not None:
            n = len(self.judges)
            return [
                f"All {n} judges use one model ({self.single_model}): how much their errors "
                "move together cannot be measured from the panel's own scores, so the panel "
                f"acts like somewhere between 1 and {n} independent judges. Add a judge on "
                "another model to measure it."
            ]
        if self.groups:
            return [g.sentence() for g in self.groups]
        if len(self.judges) > 1:
            return [
                "Every judge uses a different model: no same-model group to measure "
                "(judges on different models are taken to have independent errors)."
            ]
        return []


# --------------------------------------------------------------------------- moments


@dataclass(frozen=True)
class _Moments:
    """Centred cross-product sums of one round (or their total): ``shared`` = mean over
    group pairs minus mean over group-reference pairs (estimates ``(n - 1) rho sigma^2``),
    ``error`` = mean group sum of squares minus the same (estimates ``(n - 1) sigma^2``)."""

    shared: float = 0.0
    error: float = 0.0

    def __add__(self, other: _Moments) -> _Moments:
        return _Moments(self.shared + other.shared, self.error + other.error)

    @property
    def rho(self) -> float | None:
        return self.shared / self.error if self.error > 0 else None


def _centred(scores: Mapping[str, int], cards: Sequence[str]) -> list[float]:
    values = [float(scores[c]) for c in cards]
    mean = sum(values) / len(values)
    return [v - mean for v in values]


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items)


def _round_moments(
    scores: Mapping[str, Mapping[str, int]], group: Iterable[str], reference: Iterable[str]
) -> _Moments | None:
    """The moments of one round from its ok judges' ``{judge: {card: score}}``; None when
    the round has fewer than two group judges, no reference judge, or fewer than two cards
    that all of them scored."""
    g = sorted(j for j in group if j in scores)
    r = sorted(j for j in reference if j in scores)
    if len(g) < 2 or not r:
        return None
    common = set.intersection(*(set(scores[j]) for j in (*g, *r)))
    cards = sorted(common)
    if len(cards) < 2:
        return None
    x = {j: _centred(scores[j], cards) for j in (*g, *r)}
    gg = _mean(_dot(x[a], x[b]) for a, b in combinations(g, 2))
    gr = _mean(_dot(x[a], x[b]) for a in g for b in r)
    vv = _mean(_dot(x[a], x[a]) for a in g)
    return _Moments(gg - gr, vv - gr)


# --------------------------------------------------------------------------- records


def _rounds(scoring: ScoringRecord) -> list[tuple[JudgeResult, ...]]:
    """The judge results of every round of one run (a one-round run: its judges)."""
    if scoring.evolution is not None:
        return [r.judges for r in scoring.evolution.rounds]
    return [scoring.judges]


def _bootstrap(
    runs: Sequence[_Moments], n: int
) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The percentile intervals of ``rho`` and of ``N_eff`` over runs resampled with
    replacement; None when too few resamples give a defined ``rho``."""
    rng = rng_for(BOOTSTRAP_SEED, "panel_independence")
    k = len(runs)
    shared = [m.shared for m in runs]
    error = [m.error for m in runs]
    rhos: list[float] = []
    for _ in range(_RESAMPLES):
        picks = rng.choices(range(k), k=k)
        total = _Moments(sum(shared[i] for i in picks), sum(error[i] for i in picks))
        if total.rho is not None:
            rhos.append(total.rho)
    if len(rhos) < _RESAMPLES // 2:
        return None
    rhos.sort()
    tail = (1.0 - _LEVEL) / 2
    low = rhos[int(tail * (len(rhos) - 1))]
    high = rhos[int((1.0 - tail) * (len(rhos) - 1) + 0.5)]
    return (low, high), (effective_judges(n, high), effective_judges(n, low))


def _group(
    model: str,
    judges: Sequence[str],
    reference: Sequence[str],
    runs: Sequence[Sequence[RoundScores]],
) -> GroupIndependence:
    per_run: list[_Moments] = []
    rounds = cards = 0
    for run in runs:
        total: _Moments | None = None
        for judged in run:
            scores = {j: s for j, (_, s) in judged.items()}
            group = [j for j, (m, _) in judged.items() if m == model]
            others = [j for j, (m, _) in judged.items() if m != model]
            moments = _round_moments(scores, group, others)
            if moments is None:
                continue
            rounds += 1
            cards += min(len(scores[j]) for j in group)
            total = moments if total is None else total + moments
        if total is not None:
            per_run.append(total)
    found = GroupIndependence(
        model=model,
        judges=tuple(judges),
        reference=tuple(reference),
        runs=len(per_run),
        rounds=rounds,
        cards=cards,
    )
    if not per_run:
        return replace(found, reason="no round had two of them and a reference judge answer well")
    rho = sum(per_run, _Moments()).rho
    if rho is None:
        return replace(found, reason="their scores show no error to share")
    n = len(judges)
    found = replace(found, rho=rho, n_eff=effective_judges(n, rho))
    if len(per_run) < _MIN_RUNS:
        return replace(found, reason=f"an interval needs at least {_MIN_RUNS} runs")
    intervals = _bootstrap(per_run, n)
    if intervals is None:
        return replace(found, reason="too few resamples defined the interval")
    return replace(found, rho_interval=intervals[0], n_eff_interval=intervals[1])


def estimate_independence(runs: Iterable[Sequence[RoundScores]]) -> PanelIndependence:
    """The independence figures of ``runs``: per run its rounds, per round every judge that
    took part ``{judge: (model, {card: score})}`` (a judge that did not answer well with no
    scores). See the module docstring."""
    kept: list[list[RoundScores]] = []
    by_model: dict[str, set[str]] = defaultdict(set)
    judges: set[str] = set()
    for run in runs:
        kept.append([])
        for judged in run:
            for j, (m, _) in judged.items():
                by_model[m].add(j)
                judges.add(j)
            kept[-1].append({j: (m, s) for j, (m, s) in judged.items() if s})
    groups = tuple(
        _group(
            model,
            sorted(ids),
            # Every judge id seen on another model, even one also seen on this model in
            # another run: within a round an id has one model, so it is a reference there.
            sorted({j for m, other in by_model.items() if m != model for j in other}),
            kept,
        )
        for model, ids in sorted(by_model.items())
        if len(ids) >= 2 and len(by_model) >= 2
    )
    return PanelIndependence(
        models=tuple(sorted(by_model)), judges=tuple(sorted(judges)), groups=groups
    )


def panel_independence(scorings: Iterable[ScoringRecord]) -> PanelIndependence:
    """The independence figures of the judges in ``scorings``: every round of every run,
    ok judges' scores only."""
    return estimate_independence(
        [
            {r.id: (r.model, dict(r.scores or {}) if r.status == "ok" else {}) for r in results}
            for results in _rounds(scoring)
        ]
        for scoring in scorings
    )
