"""What the templates show, computed from the records: plain frozen dataclasses, so the
templates hold no logic beyond loops and the colours of the heatmap are decided here."""

from __future__ import annotations

import re
from dataclasses import dataclass

from image_project.record import ContextRecord, JudgeResult, RunError, RunRecord, ScoringRecord

__all__ = [
    "ContextView",
    "HeatCell",
    "HeatRow",
    "InjectorLine",
    "JudgeLine",
    "RunView",
    "UpscaleView",
    "heat_style",
    "page_name",
    "run_view",
    "upscale_view",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def page_name(generation_id: str) -> str:
    """A file-name-safe stem for a run's page and image (ids are ``[A-Za-z0-9_-]`` already;
    anything else becomes ``_``)."""
    return _UNSAFE.sub("_", generation_id) or "run"


def heat_style(score: float | None) -> str:
    """The CSS of one heatmap cell: a blue whose darkness grows with the 0..100 score (white
    text on the dark half); grey for a missing score."""
    if score is None:
        return "background-color: #eeeeee; color: #888888"
    value = min(100.0, max(0.0, float(score)))
    lightness = round(96 - 0.6 * value)
    text = "#ffffff" if lightness < 62 else "#111111"
    return f"background-color: hsl(212, 70%, {lightness}%); color: {text}"


@dataclass(frozen=True)
class HeatCell:
    text: str
    style: str


@dataclass(frozen=True)
class HeatRow:
    card_id: str
    hook: str
    selected: bool
    cells: tuple[HeatCell, ...]
    median: HeatCell
    penalty: str
    effective: str


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
    """The run's context (issue 28): the date, where the guidance went, the guidance."""

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
class RunView:
    """One run as the gallery and its page show it."""

    page: str
    generation_id: str
    created_at: str
    seed: int
    run_mode: str
    provider: str
    succeeded: bool
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


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _cell(score: float | None) -> HeatCell:
    return HeatCell(text=_number(score), style=heat_style(score))


def _rows(scoring: ScoringRecord, judge_ids: tuple[str, ...]) -> tuple[HeatRow, ...]:
    table = {row.id: row for row in scoring.score_table}
    ok = {j.id: j.scores or {} for j in scoring.judges if j.status == "ok"}
    rows = []
    for candidate in scoring.candidates:
        row = table.get(candidate.id)
        rows.append(
            HeatRow(
                card_id=candidate.id,
                hook=candidate.card.hook if candidate.card else "(card not generated)",
                selected=candidate.id == scoring.selected_id,
                cells=tuple(_cell(ok.get(j, {}).get(candidate.id)) for j in judge_ids),
                median=_cell(row.median if row else None),
                penalty=_number(row.novelty_penalty if row else None),
                effective=_number(row.effective_score if row else None),
            )
        )
    return tuple(rows)


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
        aggregation=scoring.aggregation if scoring is not None else None,
        judges=tuple(_judge_line(j) for j in scoring.judges) if scoring is not None else (),
        judge_ids=judge_ids,
        rows=_rows(scoring, judge_ids) if scoring is not None else (),
        context=(
            _context_view(record.context) if isinstance(record.context, ContextRecord) else None
        ),
        upscale=upscale,
    )
