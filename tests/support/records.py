"""Hand-made run records for the statistics and review tests: only the fields they read."""

from __future__ import annotations

from collections.abc import Sequence

from image_project.record.run import BackendInfo, RunError, RunRecord, TitleRecord
from image_project.record.scoring import (
    CandidateRecord,
    JudgeResult,
    JudgeStatus,
    NoveltyRecord,
    ScoringOff,
    ScoringRecord,
)

__all__ = ["judge", "run"]


def judge(
    judge_id: str,
    scores: dict[str, int] | None,
    *,
    order: Sequence[str] | None = None,
    status: JudgeStatus = "ok",
    model: str = "m-1",
) -> JudgeResult:
    """One judge's result; ``order`` defaults to the scores' key order."""
    if order is None:
        order = list(scores or {})
    return JudgeResult(
        id=judge_id,
        model=model,
        temperature=0.0,
        status=status,
        attempts=1,
        order=tuple(order),
        path=f"scoring/judges/{judge_id}",
        scores=scores if status == "ok" else None,
        error=None if status == "ok" else f"{status} from {judge_id}",
    )


def run(
    n: int,
    judges: Sequence[JudgeResult] = (),
    *,
    cards: Sequence[str] = ("A", "B", "C"),
    failed: bool = False,
    scoring: bool = True,
    image_path: str | None = None,
    concepts: Sequence[str] = (),
    title: str | None = None,
) -> RunRecord:
    """Run number ``n`` (its generation id and time sort by ``n``)."""
    section = (
        ScoringRecord(
            config_snapshot={},
            candidates=tuple(
                CandidateRecord(id=c, seed=i, direction="d") for i, c in enumerate(cards)
            ),
            judges=tuple(judges),
            exploration_rate=0.0,
            novelty=NoveltyRecord(enabled=False, used=False, window=0),
        )
        if scoring
        else ScoringOff()
    )
    return RunRecord(
        schema_version=2,
        generation_id=f"run{n:03d}",
        seed=n,
        created_at=f"2026-11-23T10:{n % 60:02d}:00+00:00",
        run_mode="full",
        backend=BackendInfo(
            provider="offline",
            description="hand-made",
            text_model="m-1",
            image_model="img-1",
            execution_mode="concurrent",
        ),
        error=RunError(type="ServerError", message="judge died", phase="scoring")
        if failed
        else None,
        blackbox_scoring=section,
        image_path=image_path,
        selected_concepts=tuple(concepts),
        title_generation=TitleRecord(
            title=title, title_source="llm", title_raw=title, attempts=1, seq=n, caption=title
        )
        if title
        else None,
    )
