"""The judge-panel figures over many runs: per judge the status counts, the score
distribution, the mean score by presented position; per pair of judges their rank agreement
(Kendall's tau); for the whole panel Krippendorff's alpha (interval) and, per same-model
group of judges, its effective number of independent judges (:mod:`.independence`).

Everything is a pure function of a sequence of :class:`~image_project.record.RunRecord`;
runs without scoring (or that failed before any judge answered) add nothing but their count.
Judges are identified across runs by their ``id`` (the models each id ran on are listed).
Scores are the ``ok`` results only: a refusal, a parse error or a transport error has no
scores and is counted, never averaged in as a zero.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations, pairwise

from image_project.analysis.alpha import krippendorff_alpha
from image_project.analysis.independence import PanelIndependence, panel_independence
from image_project.analysis.tau import kendall_tau_b
from image_project.record.run import RunRecord, run_status
from image_project.record.scoring import JUDGE_STATUSES, JudgeResult, JudgeStatus, ScoringRecord


@dataclass(frozen=True)
class StatusCounts:
    """How many times a judge ended in each status (``attempts`` are not counted here: one
    result per judge per run)."""

    ok: int = 0
    parse_error: int = 0
    refused: int = 0
    error: int = 0
    degenerate: int = 0

    @property
    def total(self) -> int:
        return self.ok + self.parse_error + self.refused + self.error + self.degenerate

    def get(self, status: JudgeStatus) -> int:
        value: int = getattr(self, status)
        return value


@dataclass(frozen=True)
class ScoreSummary:
    """The distribution of a judge's ``ok`` scores: every score kept (for plots) and its
    summary numbers; ``stdev`` is the sample standard deviation (0 for one score)."""

    scores: tuple[int, ...]
    mean: float
    median: float
    stdev: float
    minimum: int
    maximum: int

    @property
    def n(self) -> int:
        return len(self.scores)


@dataclass(frozen=True)
class PositionMean:
    """A judge's mean score for the cards it was shown at ``position`` (1 = shown first),
    over ``n`` scores. ``offset`` is the mean of (its score - the mean score the *other* ok
    judges of the run gave the same card) over the ``n_offset`` of those cards that another
    judge scored: it takes the cards' own quality out of the comparison (None when no other
    judge scored any of them)."""

    position: int
    n: int
    mean: float
    offset: float | None = None
    n_offset: int = 0


@dataclass(frozen=True)
class Monotone:
    """How many of a judge's ``ok`` answers with :data:`MONOTONE_MIN_CARDS` or more cards
    rise or fall strictly with the order the cards were shown (``75, 85, 90``;
    ``75, 60, 50``), of ``answers`` such answers. With three cards one ordering in three
    does so by chance (2 of the 6 orders of distinct scores); far more than that says the
    judge scores the order, not the cards. A signal, not a gate."""

    rising: int = 0
    falling: int = 0
    answers: int = 0

    @property
    def count(self) -> int:
        return self.rising + self.falling

    def cell(self) -> str:
        return f"{self.count}/{self.answers}" if self.answers else "-"


MONOTONE_MIN_CARDS = 3


def monotone_direction(scores_in_order: Sequence[int]) -> str | None:
    """``"rising"`` or ``"falling"`` when ``scores_in_order`` (one answer's scores in the
    order its cards were shown, 3 or more) move strictly one way; else None."""
    values = list(scores_in_order)
    if len(values) < MONOTONE_MIN_CARDS:
        return None
    steps = [b - a for a, b in pairwise(values)]
    if all(d > 0 for d in steps):
        return "rising"
    if all(d < 0 for d in steps):
        return "falling"
    return None


@dataclass(frozen=True)
class JudgeStats:
    judge: str
    models: tuple[str, ...]
    counts: StatusCounts
    scores: ScoreSummary | None
    positions: tuple[PositionMean, ...]
    monotone: Monotone = field(default_factory=Monotone)

    @property
    def position_bias(self) -> float | None:
        """Mean score of the first-shown card minus the mean over every position (None with
        fewer than two positions): > 0 means the judge favours what it sees first."""
        if len(self.positions) < 2 or self.scores is None:
            return None
        return self.positions[0].mean - self.scores.mean


@dataclass(frozen=True)
class PairAgreement:
    """Kendall's tau-b between two judges' scores, per run on the cards both scored, then
    averaged over the runs where it is defined (``runs``). ``undefined`` counts the runs
    both judged but where tau is not defined (fewer than two common cards, or one judge gave
    every card the same score)."""

    judge_a: str
    judge_b: str
    tau: float | None
    runs: int
    undefined: int
    per_run: tuple[float, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class PanelAgreement:
    """Krippendorff's alpha (interval) over the panel: a unit is one card of one run, the
    observers the judges, the values their ``ok`` scores. ``units`` counts the pairable
    units (scored by at least two judges), ``values`` the scores in them."""

    alpha: float | None
    units: int
    values: int


@dataclass(frozen=True)
class PanelStats:
    """The panel's figures over ``runs`` runs: ``failed_runs`` ended in an error,
    ``interrupted_runs`` were stopped (Ctrl-C / SIGTERM), counted apart."""

    runs: int
    scoring_runs: int
    failed_runs: int
    interrupted_runs: int
    judges: tuple[JudgeStats, ...]
    pairs: tuple[PairAgreement, ...]
    agreement: PanelAgreement
    independence: PanelIndependence


def scoring_records(records: Iterable[RunRecord]) -> list[ScoringRecord]:
    """The scoring record of every run that had scoring on."""
    return [r.blackbox_scoring for r in records if isinstance(r.blackbox_scoring, ScoringRecord)]


def _summary(scores: Sequence[int]) -> ScoreSummary | None:
    if not scores:
        return None
    return ScoreSummary(
        scores=tuple(scores),
        mean=statistics.fmean(scores),
        median=float(statistics.median(scores)),
        stdev=statistics.stdev(scores) if len(scores) > 1 else 0.0,
        minimum=min(scores),
        maximum=max(scores),
    )


@dataclass(frozen=True)
class _Judged:
    """One judge result with the ok scores of every judge of the same run."""

    result: JudgeResult
    panel: dict[str, dict[str, int]]

    def others_mean(self, card_id: str) -> float | None:
        others = [s[card_id] for j, s in self.panel.items() if j != self.result.id and card_id in s]
        return statistics.fmean(others) if others else None


def _position_mean(position: int, scores: list[int], offsets: list[float]) -> PositionMean:
    return PositionMean(
        position=position,
        n=len(scores),
        mean=statistics.fmean(scores),
        offset=statistics.fmean(offsets) if offsets else None,
        n_offset=len(offsets),
    )


def _positions(judged: Sequence[_Judged]) -> tuple[PositionMean, ...]:
    scores: dict[int, list[int]] = defaultdict(list)
    offsets: dict[int, list[float]] = defaultdict(list)
    for item in judged:
        result = item.result
        if result.status != "ok" or result.scores is None:
            continue
        for position, card_id in enumerate(result.order, start=1):
            if card_id not in result.scores:
                continue
            scores[position].append(result.scores[card_id])
            others = item.others_mean(card_id)
            if others is not None:
                offsets[position].append(result.scores[card_id] - others)
    return tuple(_position_mean(p, scores[p], offsets[p]) for p in sorted(scores))


def _judge_stats(judge: str, judged: Sequence[_Judged]) -> JudgeStats:
    results = [item.result for item in judged]
    tally = {status: 0 for status in JUDGE_STATUSES}
    for result in results:
        tally[result.status] += 1
    ok_scores = [
        score
        for r in results
        if r.status == "ok" and r.scores is not None
        for score in r.scores.values()
    ]
    return JudgeStats(
        judge=judge,
        models=tuple(sorted({r.model for r in results})),
        counts=StatusCounts(**tally),
        scores=_summary(ok_scores),
        positions=_positions(judged),
        monotone=_monotone(results),
    )


def _monotone(results: Sequence[JudgeResult]) -> Monotone:
    directions: list[str | None] = []
    for r in results:
        if r.status != "ok" or r.scores is None or len(r.order) < MONOTONE_MIN_CARDS:
            continue
        if all(c in r.scores for c in r.order):
            directions.append(monotone_direction([r.scores[c] for c in r.order]))
    return Monotone(
        rising=directions.count("rising"),
        falling=directions.count("falling"),
        answers=len(directions),
    )


def _ok_scores(scoring: ScoringRecord) -> dict[str, dict[str, int]]:
    """Judge id -> its ok scores in one run."""
    return {
        j.id: dict(j.scores) for j in scoring.judges if j.status == "ok" and j.scores is not None
    }


def _run_tau(a: dict[str, int], b: dict[str, int]) -> float | None:
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return None
    return kendall_tau_b([a[c] for c in common], [b[c] for c in common])


def _pair(judge_a: str, judge_b: str, runs: Sequence[dict[str, dict[str, int]]]) -> PairAgreement:
    taus: list[float] = []
    undefined = 0
    for scores in runs:
        if judge_a not in scores or judge_b not in scores:
            continue
        tau = _run_tau(scores[judge_a], scores[judge_b])
        if tau is None:
            undefined += 1
        else:
            taus.append(tau)
    return PairAgreement(
        judge_a=judge_a,
        judge_b=judge_b,
        tau=statistics.fmean(taus) if taus else None,
        runs=len(taus),
        undefined=undefined,
        per_run=tuple(taus),
    )


def _panel_agreement(runs: Sequence[dict[str, dict[str, int]]]) -> PanelAgreement:
    units: list[list[float]] = []
    for scores in runs:
        cards = sorted({c for judge_scores in scores.values() for c in judge_scores})
        for card in cards:
            units.append([float(s[card]) for s in scores.values() if card in s])
    pairable = [u for u in units if len(u) >= 2]
    return PanelAgreement(
        alpha=krippendorff_alpha(pairable, "interval"),
        units=len(pairable),
        values=sum(len(u) for u in pairable),
    )


def panel_stats(records: Iterable[RunRecord]) -> PanelStats:
    """Every figure of the judge panel over ``records`` (any order; judges sorted by id)."""
    records = list(records)
    scorings = scoring_records(records)
    ok_runs = [_ok_scores(s) for s in scorings]
    by_judge: dict[str, list[_Judged]] = defaultdict(list)
    for scoring, panel in zip(scorings, ok_runs, strict=True):
        for result in scoring.judges:
            by_judge[result.id].append(_Judged(result, panel))
    judge_ids = sorted(by_judge)
    return PanelStats(
        runs=len(records),
        scoring_runs=len(scorings),
        failed_runs=sum(1 for r in records if run_status(r) == "failed"),
        interrupted_runs=sum(1 for r in records if run_status(r) == "interrupted"),
        judges=tuple(_judge_stats(j, by_judge[j]) for j in judge_ids),
        pairs=tuple(_pair(a, b, ok_runs) for a, b in combinations(judge_ids, 2)),
        agreement=_panel_agreement(ok_runs),
        independence=panel_independence(scorings),
    )
