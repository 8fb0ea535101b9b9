"""A :class:`~image_project.record.RunRecord` as the store's rows (pure data, no database).

:func:`record_rows` maps one record onto every table (:mod:`image_project.store.schema`):
one ``runs`` row, a ``calls`` row per chat or image step, and, for a scoring run, per round
a ``candidates`` row per card, a ``judge_results`` row per judge, a ``scores`` row per
(card, judge) score (a one-round run has round 0 only), then one ``selections`` row; for a
multi-round run also a ``rounds`` row per round and a ``survivors`` row per survivor; an
``images`` row when an image was saved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from image_project.record.context import ContextRecord
from image_project.record.events import ChatEvent, ImageEvent
from image_project.record.ids import check_generation_id
from image_project.record.run import RunRecord, run_status
from image_project.record.scoring import (
    JudgeResult,
    RoundCandidate,
    RoundRecord,
    ScoreRow,
    ScoringRecord,
)

Row = dict[str, Any]
"""One table row: column name to value."""


def parse_utc(text: str) -> datetime:
    """An ISO 8601 time (``Z`` or an offset; a naive one is taken as UTC) as a naive UTC
    datetime, the form every time column holds."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def utc_now() -> datetime:
    """Now, as a naive UTC datetime (the form every time column holds)."""
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass
class RecordRows:
    """The rows of one record, per table name."""

    tables: dict[str, list[Row]] = field(default_factory=dict)

    def add(self, table: str, row: Row) -> None:
        self.tables.setdefault(table, []).append(row)


def record_rows(record: RunRecord, *, source: str, stored_at: datetime) -> RecordRows:
    """Every row ``record`` makes; ``source`` is ``run`` or ``import``. A record whose
    generation id is not one (:mod:`image_project.record.ids`) raises ValueError naming it
    and the pattern: every write into the store, a run's or an import's, makes its rows
    here, so none stores it."""
    check_generation_id(record.generation_id)
    rows = RecordRows()
    rows.add("runs", _run_row(record, source=source, stored_at=stored_at))
    for position, step in enumerate(record.steps):
        if isinstance(step, ChatEvent):
            rows.add("calls", _chat_row(record.generation_id, position, step))
        elif isinstance(step, ImageEvent):
            rows.add("calls", _image_row(record.generation_id, position, step))
    if isinstance(record.blackbox_scoring, ScoringRecord):
        _scoring_rows(rows, record.generation_id, record.blackbox_scoring)
    title = record.title_generation
    if title is not None and record.image_path is not None:
        image = record.image_step
        rows.add(
            "images",
            {
                "generation_id": record.generation_id,
                "seq": title.seq,
                "title": title.title,
                "title_source": title.title_source,
                "caption": title.caption,
                "path": record.image_path,
                "bytes": record.image_bytes,
                "model": image.model if image else None,
                "size": image.size if image else None,
                "quality": image.quality if image else None,
            },
        )
    if isinstance(record.context, ContextRecord):
        _context_rows(rows, record.generation_id, record.context)
    return rows


def _run_row(record: RunRecord, *, source: str, stored_at: datetime) -> Row:
    error, usage, title = record.error, record.usage, record.title_generation
    return {
        "generation_id": record.generation_id,
        "status": run_status(record),
        "created_at": parse_utc(record.created_at),
        "seed": record.seed,
        "run_mode": record.run_mode,
        "provider": record.backend.provider,
        "text_model": record.backend.text_model,
        "image_model": record.backend.image_model,
        "execution_mode": record.backend.execution_mode,
        "concepts": list(record.selected_concepts),
        "final_image_prompt": record.final_image_prompt,
        "scoring": isinstance(record.blackbox_scoring, ScoringRecord),
        "seq": title.seq if title else None,
        "title": title.title if title else None,
        "image_path": record.image_path,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "model_calls": usage.model_calls,
        "image_calls": usage.image_calls,
        "wall_s": record.timing.wall_s,
        "error_type": error.type if error else None,
        "error_message": error.message if error else None,
        "error_phase": error.phase if error else None,
        "error_path": error.path if error else None,
        "schema_version": record.schema_version,
        "record_json": record.model_dump_json(),
        "source": source,
        "stored_at": stored_at,
    }


def _chat_row(generation_id: str, position: int, step: ChatEvent) -> Row:
    usage, error = step.usage, step.error
    return {
        "generation_id": generation_id,
        "position": position,
        "kind": "chat",
        "path": step.path,
        "name": step.name,
        "model": step.params.model,
        "response_model": step.response_model,
        "temperature": step.params.temperature,
        "seed": step.params.seed,
        "params": step.params.model_dump(mode="json"),
        "created_at": step.created_at,
        "latency_ms": step.latency_ms,
        "pacing_wait_ms": step.pacing_wait_ms,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": usage.cached_tokens,
        "attempts": step.attempts,
        "answers": step.answers,
        "reasks": len(step.reasks),
        "status": "ok" if error is None else "error",
        "error_type": error.type if error else None,
        "error_message": error.message if error else None,
    }


def _image_row(generation_id: str, position: int, step: ImageEvent) -> Row:
    error = step.error
    status = "ok" if error is None else ("cancelled" if step.cancelled else "error")
    return {
        "generation_id": generation_id,
        "position": position,
        "kind": "image",
        "path": step.path,
        "name": step.name,
        "model": step.model,
        "response_model": None,
        "temperature": None,
        "seed": step.seed,
        "params": {
            "model": step.model,
            "size": step.size,
            "quality": step.quality,
            "seed": step.seed,
        },
        "created_at": step.created_at,
        "latency_ms": step.latency_ms,
        "pacing_wait_ms": step.pacing_wait_ms,
        "prompt_tokens": None,
        "completion_tokens": None,
        "total_tokens": None,
        "cached_tokens": None,
        "attempts": step.attempts,
        "answers": None,
        "reasks": 0,
        "status": status,
        "error_type": error.type if error else None,
        "error_message": error.message if error else None,
    }


def _scoring_rows(rows: RecordRows, generation_id: str, scoring: ScoringRecord) -> None:
    """The rows of every round (a one-round run is round 0 of its top-level candidates,
    judges and score table; a multi-round run's rounds come from its ``evolution``), then
    the run's ``selections`` row."""
    evolution = scoring.evolution
    if evolution is None or not evolution.rounds:
        first = tuple(
            RoundCandidate(
                id=c.id, kind="card", parent=None, directive=c.direction, seed=c.seed, card=c.card
            )
            for c in scoring.candidates
        )
        _round_rows(rows, generation_id, 0, first, scoring.judges, scoring.score_table, scoring)
    else:
        last = evolution.rounds[-1].index
        for round_ in evolution.rounds:
            final = scoring if round_.index == last else None
            table = scoring.score_table if final and scoring.score_table else round_.score_table
            _round_rows(
                rows, generation_id, round_.index, round_.candidates, round_.judges, table, final
            )
            _evolution_rows(rows, generation_id, round_)
    rows.add("selections", _selection_row(generation_id, scoring))


def _round_rows(
    rows: RecordRows,
    generation_id: str,
    index: int,
    candidates: Sequence[RoundCandidate],
    judges: Sequence[JudgeResult],
    table: Sequence[ScoreRow],
    final: ScoringRecord | None,
) -> None:
    """One round's ``candidates``, ``judge_results`` and ``scores`` rows; ``final`` (the
    scoring record) marks the round the final pick was made from (rank and selected)."""
    by_id: Mapping[str, ScoreRow] = {row.id: row for row in table}
    ranking = final.selection.ranking if final and final.selection else ()
    selected = final.selected_id if final else None
    for position, candidate in enumerate(candidates):
        row = _candidate_row(candidate, by_id.get(candidate.id))
        row.update(
            generation_id=generation_id,
            round=index,
            position=position,
            rank=ranking.index(candidate.id) + 1 if candidate.id in ranking else None,
            selected=candidate.id == selected,
        )
        rows.add("candidates", row)
    for position, judge in enumerate(judges):
        rows.add("judge_results", _judge_row(generation_id, index, position, judge))
        for card_id, score in (judge.scores or {}).items():
            rows.add(
                "scores",
                {
                    "generation_id": generation_id,
                    "round": index,
                    "card_id": card_id,
                    "judge_id": judge.id,
                    "score": score,
                    "presented_position": (
                        judge.order.index(card_id) if card_id in judge.order else None
                    ),
                },
            )


def _candidate_row(candidate: RoundCandidate, score: ScoreRow | None) -> Row:
    card, dropped = candidate.card, candidate.dropped
    return {
        "card_id": candidate.id,
        "kind": candidate.kind,
        "parent": candidate.parent,
        "seed": candidate.seed,
        "direction": candidate.directive,
        "dropped_of": dropped.of if dropped else None,
        "dropped_distance": dropped.distance if dropped else None,
        "dropped_threshold": dropped.threshold if dropped else None,
        "hook": card.hook if card else None,
        "card": card.model_dump(mode="json") if card else None,
        "median": score.median if score else None,
        "aggregate": score.aggregate if score else None,
        "spread": score.spread if score else None,
        "n_ok": score.n_ok if score else None,
        "novelty_penalty": score.novelty_penalty if score else None,
        "effective_score": score.effective_score if score else None,
    }


def _judge_row(generation_id: str, index: int, position: int, judge: JudgeResult) -> Row:
    return {
        "generation_id": generation_id,
        "round": index,
        "judge_id": judge.id,
        "position": position,
        "model": judge.model,
        "temperature": judge.temperature,
        "rubric": judge.rubric,
        "profile": judge.profile,
        "weight": judge.weight,
        "status": judge.status,
        "attempts": judge.attempts,
        "presented_order": list(judge.order),
        "path": judge.path,
        "error": judge.error,
        "output_preview": judge.output_preview,
    }


def _evolution_rows(rows: RecordRows, generation_id: str, round_: RoundRecord) -> None:
    """A multi-round run's ``rounds`` row (the round's selector) and ``survivors`` rows."""
    selector = round_.selector
    rows.add(
        "rounds",
        {
            "generation_id": generation_id,
            "round": round_.index,
            "selector_kind": selector.kind if selector else None,
            "selector_status": selector.status if selector else None,
            "selector_attempts": selector.attempts if selector else None,
            "selector_model": selector.model if selector else None,
            "selector_path": selector.path if selector else None,
            "selector_summary": selector.summary if selector else None,
            "selector_warning": selector.warning if selector else None,
        },
    )
    for position, survivor in enumerate(round_.survivors):
        rows.add(
            "survivors",
            {
                "generation_id": generation_id,
                "round": round_.index,
                "card_id": survivor.id,
                "position": position,
                "category": survivor.category,
                "reason": survivor.reason,
                "proposed_by": survivor.proposed_by,
            },
        )


def _selection_row(generation_id: str, scoring: ScoringRecord) -> Row:
    selection, evolution = scoring.selection, scoring.evolution
    return {
        "generation_id": generation_id,
        "aggregation": scoring.aggregation,
        "mode": scoring.selection_mode,
        "exploration_rate": scoring.exploration_rate,
        "roll": scoring.exploration_roll,
        "explore_roll": selection.explore_roll if selection else None,
        "ranking": list(selection.ranking) if selection else None,
        "explore_pool": list(selection.explore_pool) if selection else None,
        "selected_id": scoring.selected_id,
        "selected_score": scoring.selected_score,
        "novelty_used": scoring.novelty.used,
        "evolution": (evolution.model_dump(mode="json", exclude={"rounds"}) if evolution else None),
    }


def _context_rows(rows: RecordRows, generation_id: str, context: ContextRecord) -> None:
    """A run's ``contexts`` row and one ``context_injectors`` row per injector."""
    rows.add(
        "contexts",
        {
            "generation_id": generation_id,
            "date_used": context.date_used,
            "date_source": context.date_source,
            "injection_location": context.injection_location,
            "guidance": context.guidance,
        },
    )
    for position, injector in enumerate(context.injectors):
        rows.add(
            "context_injectors",
            {
                "generation_id": generation_id,
                "position": position,
                "name": injector.name,
                "source": injector.source,
                "module": injector.module,
                "applied": injector.applied,
                "reason": injector.reason,
                "probability": injector.probability,
                "roll": injector.roll,
                "guidance": list(injector.guidance),
                "metadata": injector.metadata,
            },
        )
