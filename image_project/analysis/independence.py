"""How independent the judges on one model are: the *effective number of judges* of a
same-model group, measured against judges on other models (docs/panel.md, "Know your
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
estimate therefore needs at least two models, and with one reference judge it assumes that
the reference measures the same quality on the same scale (after centring) with an error
independent of the group's. Whatever the group shares that the reference does not — a
rubric's taste as much as a model's blind spot — counts as shared error.

Scale-free form (two or more reference judges). A reference that scores ``b_r q + e_r`` (its
own scale ``b_r``) breaks ``cov(s_j, s_r) = var(q)``, and with it the estimate. Two
references ``r`` and ``s`` with errors independent of each other and of the group's give the
group's own quality variance whatever their scales: ``cov(s_j, s_r) cov(s_j, s_s) / cov(s_r,
s_s) = var(q)`` (the ``b_r b_s`` cancel), so ``rho = (C_GG - Q) / (V_G - Q)`` with ``Q`` that
ratio averaged over the pairs of references (sums pooled over all runs before dividing). It
assumes the references' errors are independent of each other's, not only of the group's.

What the figures are worth. The interval is printed only from :data:`MIN_RUNS` runs on: a
planted-world check (tests/analysis/test_independence_coverage.py) covers the truth about
95 % of the time from there on, and too rarely below it. An interval that collapses to one
value (every resample at the clamp) is never printed as an interval.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations

from image_project.record.scoring import JudgeResult, ScoringRecord
from image_project.seeding import rng_for

BOOTSTRAP_SEED = 0
"""The seed of the bootstrap (with the label ``panel_independence``): fixed, so the interval
is a function of the records alone."""
_RESAMPLES = 2000
_LEVEL = 0.95
MIN_RUNS = 30
"""Fewer runs than this give no interval: below it the bootstrap interval covers the
truth too rarely (tests/analysis/test_independence_coverage.py)."""

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
    scale_free: bool = False
    """True when two or more reference judges gave the scale-free estimate."""

    @property
    def n(self) -> int:
        return len(self.judges)

    def assumptions(self) -> str:
        """What the estimate takes for granted, in words."""
        refs = ", ".join(self.reference)
        if self.scale_free:
            return (
                f"Scale-free estimate from {len(self.reference)} reference judges ({refs}): "
                "it assumes they are on other models and measure the same quality, on any "
                "scale, with errors independent of each other's and of these judges'."
            )
        return (
            f"It assumes the reference judge{'s' if len(self.reference) > 1 else ''} ({refs}) "
            "on other models score the same quality on the same scale as these judges, with "
            "errors independent of theirs; a reference on another scale or sharing their "
            "errors makes it wrong (two references on other models give a scale-free "
            "estimate)."
        )

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
        interval = self.n_eff_interval
        if interval is not None and f"{interval[0]:.2f}" != f"{interval[1]:.2f}":
            text += f" (95% interval {interval[0]:.2f} to {interval[1]:.2f})"
        elif interval is not None:
            text += (
                " (no interval: every resample put the shared error share at its bound, so "
                "the interval would be one value)"
            )
        elif self.reason is not None:
            text += f" (no interval: {self.reason})"
        rho = f"shared error share rho = {self.rho:.2f}" if self.rho is not None else ""
        if self.rho_interval is not None:
            rho += f" ({self.rho_interval[0]:.2f} to {self.rho_interval[1]:.2f})"
        return f"{text}, {against}; {rho}. {self.assumptions()}"


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

_Pair = tuple[str, str]
"""Two judge ids in sorted order (a judge with itself for its sum of squares)."""


def _centred(scores: Mapping[str, int], cards: Sequence[str]) -> list[float]:
    values = [float(scores[c]) for c in cards]
    mean = sum(values) / len(values)
    return [v - mean for v in values]


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def _pair(a: str, b: str) -> _Pair:
    return (a, b) if a <= b else (b, a)


def _round_sums(
    scores: Mapping[str, Mapping[str, int]],
    group: Iterable[str],
    reference: Iterable[str],
    min_references: int,
) -> dict[_Pair, float] | None:
    """The centred cross-product sums over the cards of one round, for every pair of its
    ok group and reference judges; None when the round has fewer than two group judges,
    fewer than ``min_references`` reference judges, or fewer than two cards all of them
    scored."""
    g = sorted(j for j in group if j in scores)
    r = sorted(j for j in reference if j in scores)
    if len(g) < 2 or len(r) < min_references:
        return None
    judges = (*g, *r)
    cards = sorted(set.intersection(*(set(scores[j]) for j in judges)))
    if len(cards) < 2:
        return None
    x = {j: _centred(scores[j], cards) for j in judges}
    return {_pair(a, b): _dot(x[a], x[b]) for i, a in enumerate(judges) for b in judges[i:]}


def _rho(
    sums: Mapping[_Pair, float], group: Sequence[str], reference: Sequence[str], scale_free: bool
) -> float | None:
    """The shared error share from pooled cross-product sums (module docstring): ``(C_GG -
    Q) / (V_G - Q)`` with ``Q`` = ``C_GR`` (one reference scale) or the scale-free ratio;
    None when it is not defined (no error left, or no positive reference covariance)."""

    def c(a: str, b: str) -> float:
        return sums.get(_pair(a, b), 0.0)

    if scale_free:
        ref_pairs = [(r, t) for r in reference for t in reference if r != t and c(r, t) > 0]
        if not ref_pairs:
            return None

        def q(a: str, b: str) -> float:
            return _mean(c(a, r) * c(b, t) / c(r, t) for r, t in ref_pairs)
    else:

        def q(a: str, b: str) -> float:
            return _mean(c(a, r) for r in reference) / 2 + _mean(c(b, r) for r in reference) / 2

    shared = _mean(c(a, b) - q(a, b) for a, b in combinations(group, 2))
    error = _mean(c(a, a) - q(a, a) for a in group)
    return shared / error if error > 0 else None


# --------------------------------------------------------------------------- records


def _rounds(scoring: ScoringRecord) -> list[tuple[JudgeResult, ...]]:
    """The judge results of every round of one run (a one-round run: its judges)."""
    if scoring.evolution is not None:
        return [r.judges for r in scoring.evolution.rounds]
    return [scoring.judges]


def _bootstrap(
    runs: Sequence[Mapping[_Pair, float]], rho_of: Callable[[Mapping[_Pair, float]], float | None]
) -> tuple[float, float] | None:
    """The percentile interval of ``rho`` over runs resampled with replacement; None when
    too few resamples give a defined ``rho``."""
    rng = rng_for(BOOTSTRAP_SEED, "panel_independence")
    k = len(runs)
    keys = sorted({key for run in runs for key in run})
    table = [[run.get(key, 0.0) for key in keys] for run in runs]
    rhos: list[float] = []
    for _ in range(_RESAMPLES):
        picks = rng.choices(range(k), k=k)
        total = [sum(col) for col in zip(*(table[i] for i in picks), strict=True)]
        rho = rho_of(dict(zip(keys, total, strict=True)))
        if rho is not None:
            rhos.append(rho)
    if len(rhos) < _RESAMPLES // 2:
        return None
    rhos.sort()
    tail = (1.0 - _LEVEL) / 2
    return rhos[int(tail * (len(rhos) - 1))], rhos[int((1.0 - tail) * (len(rhos) - 1) + 0.5)]


def _add(total: dict[_Pair, float], more: Mapping[_Pair, float]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0.0) + value


def _run_sums(
    model: str, runs: Sequence[Sequence[RoundScores]], min_references: int
) -> tuple[list[dict[_Pair, float]], int, int]:
    """Per run (that has a usable round) its rounds' cross-product sums added up; the
    number of usable rounds, and of card scores per group judge in them."""
    per_run: list[dict[_Pair, float]] = []
    rounds = cards = 0
    for run in runs:
        total: dict[_Pair, float] = {}
        for judged in run:
            scores = {j: s for j, (_, s) in judged.items()}
            group = [j for j, (m, _) in judged.items() if m == model]
            others = [j for j, (m, _) in judged.items() if m != model]
            sums = _round_sums(scores, group, others, min_references)
            if sums is None:
                continue
            rounds += 1
            cards += min(len(scores[j]) for j in group)
            _add(total, sums)
        if total:
            per_run.append(total)
    return per_run, rounds, cards


def _group(
    model: str,
    judges: Sequence[str],
    reference: Sequence[str],
    runs: Sequence[Sequence[RoundScores]],
) -> GroupIndependence:
    scale_free = len(reference) >= 2
    per_run, rounds, cards = _run_sums(model, runs, 2 if scale_free else 1)
    found = GroupIndependence(
        model=model,
        judges=tuple(judges),
        reference=tuple(reference),
        runs=len(per_run),
        rounds=rounds,
        cards=cards,
        scale_free=scale_free,
    )
    if not per_run:
        needs = "two reference judges" if scale_free else "a reference judge"
        return replace(found, reason=f"no round had two of them and {needs} answer well")

    def rho_of(sums: Mapping[_Pair, float]) -> float | None:
        return _rho(sums, judges, reference, scale_free)

    pooled: dict[_Pair, float] = {}
    for run_sums in per_run:
        _add(pooled, run_sums)
    rho = rho_of(pooled)
    if rho is None:
        return replace(found, reason="their scores show no error to share")
    n = len(judges)
    found = replace(found, rho=rho, n_eff=effective_judges(n, rho))
    if len(per_run) < MIN_RUNS:
        more = MIN_RUNS - len(per_run)
        return replace(
            found,
            reason=f"an interval needs at least {MIN_RUNS} runs, {more} more than these "
            f"{len(per_run)}",
        )
    interval = _bootstrap(per_run, rho_of)
    if interval is None:
        return replace(found, reason="too few resamples defined the interval")
    low, high = interval
    return replace(
        found,
        rho_interval=interval,
        n_eff_interval=(effective_judges(n, high), effective_judges(n, low)),
    )


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
