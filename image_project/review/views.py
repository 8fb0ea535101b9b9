"""What the templates show, computed from the records: plain frozen dataclasses, so the
templates hold no logic beyond loops and the colours of the heatmap are decided here."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from image_project.record.calls import (
    JudgeView,
    Message,
    call_cells,
    choice_text,
    reask_head,
    reask_note,
    run_calls,
)
from image_project.record.context import ContextRecord
from image_project.record.ids import generation_id_problem
from image_project.record.run import RunError, RunRecord, run_status, scoring_absent, stopped_reason
from image_project.record.scoring import (
    JudgeResult,
    RoundCandidate,
    RoundRecord,
    ScoreRow,
    ScoringRecord,
    SelectorRecord,
    pick_rule,
)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def page_name(generation_id: str) -> str:
    """The file-name stem of a run's page and image, one per generation id: a generation id
    (:data:`~image_project.record.ids.GENERATION_ID_PATTERN`, the only ids a run or an
    import stores) is its own name; any other string (a run stored before ids were checked)
    is ``_`` and its UTF-8 bytes in hex, or ``__`` and their SHA-256 when that would be
    longer than 128 characters. No id starts with ``_`` and hex never does, so the three
    kinds never meet, and every name is lower case: two runs never share a page, not even
    on a case-insensitive filesystem."""
    if generation_id_problem(generation_id) is None:
        return generation_id
    raw = generation_id.encode("utf-8", "surrogatepass")
    if len(raw) <= 64:
        return "_" + raw.hex()
    return "__" + hashlib.sha256(raw).hexdigest()


HeatScale = tuple[float, float]
"""The lowest and highest score of one heatmap: its lightest and darkest blue."""


def heat_style(score: float | None, scale: HeatScale = (0.0, 100.0)) -> str:
    """The CSS of one heatmap cell: a blue whose darkness grows with the score from the
    table's lowest score (lightest) to its highest (darkest), so that the scores a table
    holds are told apart however close they are (white text on the dark half); the
    middle blue when the table's scores are all equal; grey for a missing score."""
    if score is None:
        return "background-color: #eeeeee; color: #888888"
    low, high = scale
    share = 0.5 if high <= low else (min(high, max(low, float(score))) - low) / (high - low)
    lightness = round(96 - 60 * share)
    text = "#ffffff" if lightness < 62 else "#111111"
    return f"background-color: hsl(212, 70%, {lightness}%); color: {text}"


def heat_scale(scores: Iterable[float | None]) -> HeatScale | None:
    """The scale of a heatmap holding ``scores`` (None: a missing score): their lowest and
    highest; None when there is no score (every cell is grey)."""
    known = [float(s) for s in scores if s is not None]
    return (min(known), max(known)) if known else None


def _scale_note(scale: HeatScale | None) -> str:
    """What the ends of a heatmap's blue stand for ("" when it has no score)."""
    if scale is None:
        return ""
    low, high = scale
    if low == high:
        return f"every score here is {_number(low)}"
    return f"lightest = {_number(low)}, darkest = {_number(high)}: this table's lowest and highest"


@dataclass(frozen=True)
class HeatCell:
    text: str
    style: str


@dataclass(frozen=True)
class SurvivorLine:
    """Why a card survived its round: the category it fills, the reason (the code's
    sentence or the selector model's words) and who proposed it."""

    category: str
    reason: str
    proposed_by: str


@dataclass(frozen=True)
class HeatRow:
    """One card of one round: ``anchor`` is its element id on the run page, ``parent`` /
    ``parent_anchor`` the previous round's card it comes from (empty for a first card)."""

    card_id: str
    hook: str
    selected: bool
    cells: tuple[HeatCell, ...]
    median: HeatCell
    penalty: str
    effective: str
    anchor: str = ""
    kind: str = "card"
    parent: str = ""
    parent_anchor: str = ""
    directive: str = ""
    dropped: str = ""
    survivor: SurvivorLine | None = None


@dataclass(frozen=True)
class SelectorLine:
    """Who chose a round's survivors, in words: ``who`` is ``code`` or ``LLM selector
    (model)``; ``fallback`` the cause when the LLM's proposal was replaced by the code's."""

    who: str
    status: str
    attempts: int
    summary: str
    fallback: str


@dataclass(frozen=True)
class RoundView:
    """One round of a run's scoring: its cards as a heatmap (cards x judges), its judges,
    its survivors' selector, and whether the final pick was made from it."""

    index: int
    heading: str
    judge_ids: tuple[str, ...]
    rows: tuple[HeatRow, ...]
    judges: tuple[JudgeLine, ...]
    selector: SelectorLine | None
    final: bool
    note: str
    scale: str = ""


@dataclass(frozen=True)
class PickView:
    """The final pick and the rule that made it."""

    card_id: str
    hook: str
    mode: str
    rule: str
    aggregate: str
    effective: str
    lineage: str


@dataclass(frozen=True)
class JudgeLine:
    id: str
    model: str
    temperature: float
    rubric: str
    profile: str
    status: str
    attempts: int
    order: str
    error: str


@dataclass(frozen=True)
class InjectorLine:
    """One context injector's decision, as the run page's table shows it."""

    name: str
    source: str
    applied: bool
    reason: str
    probability: str
    roll: str
    detail: str


@dataclass(frozen=True)
class ContextView:
    """The run's context: the date, where the guidance went, the guidance."""

    date_used: str
    date_source: str
    location: str
    guidance: str
    injectors: tuple[InjectorLine, ...]


@dataclass(frozen=True)
class UpscaleView:
    """The run's 4K image as its page shows it: ``image`` the site-relative path of the
    copied file (None, with ``missing`` saying why, when it is gone), and what it is."""

    image: str | None
    missing: str | None
    size: str
    source_size: str
    method: str
    bytes: int


@dataclass(frozen=True)
class ReaskView:
    """One rejected answer of a call: its heading (which one, the reason its re-ask gave),
    what the record kept of it, and the answer."""

    head: str
    note: str
    text: str


@dataclass(frozen=True)
class CallView:
    """One model call on the run page (:func:`image_project.record.calls.run_calls`):
    ``cells`` under :data:`CALL_COLUMNS` for its summary line, the rest for when it is
    opened. ``anchor`` is its element id (``call-<n>``, n its place in the list)."""

    anchor: str
    cells: tuple[str, ...]
    outcome: str
    facts: tuple[tuple[str, str], ...]
    messages: tuple[Message, ...]
    earlier: str
    answer: str | None
    answer_head: str
    reasks: tuple[ReaskView, ...]
    judge: JudgeView | None
    choice: str


def call_views(record: RunRecord) -> tuple[CallView, ...]:
    """Every model call of ``record`` as its run page shows it."""
    views = []
    for n, call in enumerate(run_calls(record), start=1):
        judge = call.judge
        views.append(
            CallView(
                anchor=f"call-{n}",
                cells=call_cells(call),
                outcome=call.outcome,
                facts=call.facts,
                messages=call.messages,
                earlier=call.earlier_note,
                answer=call.answer,
                answer_head=call.answer_head,
                reasks=tuple(
                    ReaskView(
                        head=reask_head(k, r, len(call.reasks)),
                        note=reask_note(r),
                        text=r.response,
                    )
                    for k, r in enumerate(call.reasks, start=1)
                ),
                judge=judge,
                choice=choice_text(judge.choice) if judge and judge.choice else "",
            )
        )
    return tuple(views)


@dataclass(frozen=True)
class RunView:
    """One run as the gallery and its page show it."""

    page: str
    generation_id: str
    created_at: str
    seed: int
    run_mode: str
    provider: str
    succeeded: bool
    status: str
    error: RunError | None
    title: str | None
    concepts: tuple[str, ...]
    image: str | None
    image_missing: str | None
    final_prompt: str | None
    scoring: bool
    selected_id: str | None
    selected_hook: str | None
    selection_mode: str | None
    aggregation: str | None
    judges: tuple[JudgeLine, ...]
    judge_ids: tuple[str, ...]
    rows: tuple[HeatRow, ...]
    context: ContextView | None = None
    upscale: UpscaleView | None = None
    scoring_note: str = ""
    prompt_first: str = ""
    rounds: tuple[RoundView, ...] = ()
    pick: PickView | None = None
    calls: tuple[CallView, ...] = ()
    scale: str = ""


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _cell(score: float | None, scale: HeatScale | None) -> HeatCell:
    return HeatCell(text=_number(score), style=heat_style(score, scale or (0.0, 100.0)))


def _anchor(index: int, card_id: str) -> str:
    return f"r{index}-{_UNSAFE.sub('_', card_id) or 'run'}"


def _row(
    candidate: RoundCandidate,
    row: ScoreRow | None,
    ok: dict[str, dict[str, int]],
    judge_ids: tuple[str, ...],
    *,
    index: int,
    selected: bool,
    scale: HeatScale | None,
    survivor: SurvivorLine | None = None,
) -> HeatRow:
    dropped = ""
    if candidate.dropped is not None:
        d = candidate.dropped
        dropped = (
            f"dropped before judging: near-duplicate of {d.of} "
            f"(distance {d.distance:.2f} < {d.threshold:g})"
        )
    parent = candidate.id if candidate.kind == "parent" else (candidate.parent or "")
    return HeatRow(
        card_id=candidate.id,
        hook=candidate.card.hook if candidate.card else "(card not generated)",
        selected=selected,
        cells=tuple(_cell(ok.get(j, {}).get(candidate.id), scale) for j in judge_ids),
        median=_cell(row.median if row else None, scale),
        penalty=_number(row.novelty_penalty if row else None),
        effective=_number(row.effective_score if row else None),
        anchor=_anchor(index, candidate.id),
        kind=candidate.kind,
        parent=parent,
        parent_anchor=_anchor(index - 1, parent) if parent and index > 0 else "",
        directive=candidate.directive,
        dropped=dropped,
        survivor=survivor,
    )


def _ok_scores(judges: tuple[JudgeResult, ...]) -> dict[str, dict[str, int]]:
    return {j.id: j.scores or {} for j in judges if j.status == "ok"}


def _table_scale(
    cards: Iterable[str], table: dict[str, ScoreRow], ok: dict[str, dict[str, int]]
) -> HeatScale | None:
    """The scale of one heatmap: over every score it shows, the judges' and the medians."""
    shown = list(cards)
    judged = (scores.get(c) for scores in ok.values() for c in shown)
    medians = (table[c].median for c in shown if c in table)
    return heat_scale([*judged, *medians])


def _one_round_scale(scoring: ScoringRecord) -> HeatScale | None:
    table = {row.id: row for row in scoring.score_table}
    return _table_scale((c.id for c in scoring.candidates), table, _ok_scores(scoring.judges))


def _rows(
    scoring: ScoringRecord, judge_ids: tuple[str, ...], scale: HeatScale | None
) -> tuple[HeatRow, ...]:
    """The one-round score table (the last round's, for a multi-round run)."""
    table = {row.id: row for row in scoring.score_table}
    ok = _ok_scores(scoring.judges)
    return tuple(
        _row(
            RoundCandidate(
                id=c.id, kind="card", parent=None, directive=c.direction, seed=c.seed, card=c.card
            ),
            table.get(c.id),
            ok,
            judge_ids,
            index=0,
            selected=c.id == scoring.selected_id,
            scale=scale,
        )
        for c in scoring.candidates
    )


def _selector_line(selector: SelectorRecord) -> SelectorLine:
    who = "code" if selector.kind == "code" else f"LLM selector ({selector.model or 'model'})"
    fallback = ""
    if selector.status == "fallback":
        fallback = selector.warning or "the LLM selector failed; the code choice was used"
    return SelectorLine(
        who=who,
        status=selector.status,
        attempts=selector.attempts,
        summary=selector.summary or "",
        fallback=fallback,
    )


def _round_view(r: RoundRecord, scoring: ScoringRecord, *, final: bool, stopped: str) -> RoundView:
    judge_ids = tuple(j.id for j in r.judges)
    ok = _ok_scores(r.judges)
    table = {row.id: row for row in r.score_table}
    survivors = {
        s.id: SurvivorLine(category=s.category, reason=s.reason, proposed_by=s.proposed_by)
        for s in r.survivors
    }
    scale = _table_scale((c.id for c in r.candidates), table, ok)
    rows = tuple(
        _row(
            c,
            table.get(c.id),
            ok,
            judge_ids,
            index=r.index,
            selected=final and c.id == scoring.selected_id,
            scale=scale,
            survivor=survivors.get(c.id),
        )
        for c in r.candidates
    )
    if r.index == 0:
        heading = "Round 0: the first cards"
    else:
        parents = sorted({c.parent or c.id for c in r.candidates if c.kind != "card"})
        heading = f"Round {r.index}: variants of {', '.join(parents)}"
    note = ""
    if not r.score_table:
        note = f"Not judged: {stopped}." if stopped else "Not judged."
    elif final:
        note = "The final card was picked from this round."
    elif not r.survivors and stopped:
        note = f"No survivors chosen: {stopped}."
    return RoundView(
        index=r.index,
        heading=heading,
        judge_ids=judge_ids,
        rows=rows,
        judges=tuple(_judge_line(j) for j in r.judges),
        selector=_selector_line(r.selector) if r.selector is not None else None,
        final=final,
        note=note,
        scale=_scale_note(scale),
    )


def _round_views(record: RunRecord, scoring: ScoringRecord) -> tuple[RoundView, ...]:
    if scoring.evolution is None:
        return ()
    rounds = scoring.evolution.rounds
    picked = scoring.selected_id is not None
    return tuple(
        _round_view(
            r,
            scoring,
            final=picked and n == len(rounds) - 1,
            stopped=stopped_reason(record),
        )
        for n, r in enumerate(rounds)
    )


def _lineage(scoring: ScoringRecord, card_id: str) -> str:
    """The final card's way through the rounds: ``D (round 0, card) -> D (round 1, kept,
    survivor: diversity) -> N (round 2, variant of J)``."""
    if scoring.evolution is None:
        return ""
    steps = []
    for r, c in scoring.evolution.history(card_id):
        what = {"card": "first card", "parent": "kept", "variant": f"variant of {c.parent}"}
        text = f"{c.id} (round {r.index}, {what[c.kind]}"
        survivor = next((s for s in r.survivors if s.id == c.id), None)
        if survivor is not None:
            text += f", survivor: {survivor.category} by {survivor.proposed_by}"
        steps.append(text + ")")
    return " -> ".join(steps)


def _pick(scoring: ScoringRecord) -> PickView | None:
    if scoring.selected_id is None:
        return None
    card = scoring.selected_card
    row = next((r for r in scoring.score_table if r.id == scoring.selected_id), None)
    return PickView(
        card_id=scoring.selected_id,
        hook=card.hook if card else "",
        mode=scoring.selection_mode or "",
        rule=pick_rule(scoring),
        aggregate=_number(row.aggregate if row else scoring.selected_score),
        effective=_number(row.effective_score if row else None),
        lineage=_lineage(scoring, scoring.selected_id),
    )


def _first_line(prompt: str | None, limit: int = 160) -> str:
    first = next((ln.strip() for ln in (prompt or "").splitlines() if ln.strip()), "")
    return first[: limit - 1] + "…" if len(first) > limit else first


def _scoring_note(record: RunRecord, scoring: ScoringRecord | None) -> str:
    """What the page says when there is no scoring record: "Scoring was off" only for a run
    that got through (a run that stopped before its scoring stage has no record of it,
    whether scoring was on or not)."""
    if scoring is not None:
        return ""
    if record.error is None:
        return "Scoring was off for this run."
    return f"No scoring record: {scoring_absent(record)}."


def _judge_line(r: JudgeResult) -> JudgeLine:
    return JudgeLine(
        id=r.id,
        model=r.model,
        temperature=r.temperature,
        rubric=r.rubric,
        profile=r.profile,
        status=r.status,
        attempts=r.attempts,
        order=" ".join(r.order),
        error=r.error or "",
    )


def _chance(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _detail(metadata: dict[str, object]) -> str:
    """The few facts of an injector worth a glance (the full metadata is in the record)."""
    keys = ("season", "hemisphere", "holiday", "holiday_date", "days_until", "country")
    return ", ".join(f"{k} {metadata[k]}" for k in keys if metadata.get(k) is not None)


def _context_view(context: ContextRecord) -> ContextView:
    return ContextView(
        date_used=context.date_used,
        date_source=context.date_source,
        location=context.injection_location,
        guidance=context.guidance,
        injectors=tuple(
            InjectorLine(
                name=i.name,
                source=i.module or i.source,
                applied=i.applied,
                reason=i.reason,
                probability=_chance(i.probability),
                roll=_chance(i.roll),
                detail=_detail(dict(i.metadata)),
            )
            for i in context.injectors
        ),
    )


def upscale_view(record: RunRecord, image: str | None, missing: str | None) -> UpscaleView | None:
    """The view of ``record``'s 4K image (None when it has none); ``image`` is the
    site-relative path of its copied file (or None, with ``missing`` saying why)."""
    up = record.upscale
    if up is None:
        return None
    return UpscaleView(
        image=image,
        missing=missing,
        size=up.size,
        source_size=up.source_size,
        method=up.method,
        bytes=up.bytes,
    )


def run_view(
    record: RunRecord,
    image: str | None,
    image_missing: str | None,
    upscale: UpscaleView | None = None,
) -> RunView:
    """The view of ``record``; ``image`` is the site-relative path of its copied image (or
    None, with ``image_missing`` saying why when the run should have had one); ``upscale``
    its 4K image's view (:func:`upscale_view`)."""
    section = record.blackbox_scoring
    scoring = section if isinstance(section, ScoringRecord) else None
    judge_ids = tuple(j.id for j in scoring.judges) if scoring is not None else ()
    selected = scoring.selected_card if scoring is not None else None
    title = record.title_generation
    return RunView(
        page=page_name(record.generation_id),
        generation_id=record.generation_id,
        created_at=record.created_at,
        seed=record.seed,
        run_mode=record.run_mode,
        provider=record.backend.provider,
        succeeded=record.succeeded,
        status=run_status(record),
        error=record.error,
        title=title.title if title else None,
        concepts=record.selected_concepts,
        image=image,
        image_missing=image_missing,
        final_prompt=record.final_image_prompt,
        scoring=scoring is not None,
        selected_id=scoring.selected_id if scoring is not None else None,
        selected_hook=selected.hook if selected else None,
        selection_mode=scoring.selection_mode if scoring is not None else None,
        aggregation=_aggregation(scoring) if scoring is not None else None,
        judges=tuple(_judge_line(j) for j in scoring.judges) if scoring is not None else (),
        judge_ids=judge_ids,
        rows=_rows(scoring, judge_ids, _one_round_scale(scoring)) if scoring is not None else (),
        context=(
            _context_view(record.context) if isinstance(record.context, ContextRecord) else None
        ),
        upscale=upscale,
        scoring_note=_scoring_note(record, scoring),
        prompt_first=_first_line(record.final_image_prompt),
        rounds=_round_views(record, scoring) if scoring is not None else (),
        pick=_pick(scoring) if scoring is not None else None,
        calls=call_views(record),
        scale=_scale_note(_one_round_scale(scoring)) if scoring is not None else "",
    )


def _aggregation(scoring: ScoringRecord) -> str:
    """The aggregation's name, and the normalisation it was taken after unless ``none``
    (``median of zscores``)."""
    if scoring.normalise == "none":
        return scoring.aggregation
    return f"{scoring.aggregation} of {scoring.normalise}"
