"""The judge ensemble: numeric-only scores, strict parsing, structured per-judge results.

A judge answers ``{"scores": [{"id": "A", "score": 0..100}, ...]}``: every card id exactly
once, integer scores, no other keys, no prose (see :func:`parse_scores`). Each judge ends in
a :class:`JudgeResult` whose ``status`` is one of

``ok``           the answer (possibly after re-asks) parsed; ``scores`` holds it
``parse_error``  the answer was still malformed after ``max_reasks`` re-asks (or was empty)
``refused``      the API reported a refusal, or the answer holds no JSON object at all and
                 reads like one (:data:`~image_project.stages.scoring.parsing.REFUSAL_PATTERNS`);
                 never re-asked
``error``        the call itself failed (transport error after the retries, ...)

Only ``ok`` results are aggregated; the quorum (``min_ok_judges``) decides whether the run
can go on (:func:`require_quorum`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from image_project.backends.base import JsonSchema
from image_project.errors import (
    EmptyResponseError,
    ModelOutputError,
    RefusalError,
    preview,
)
from image_project.stages.scoring.parsing import (
    extract_json_object,
    has_json_object,
    looks_like_refusal,
    short_repr,
)

__all__ = [
    "JUDGE_STATUSES",
    "SCORE_MAX",
    "SCORE_MIN",
    "JudgeResult",
    "JudgeStatus",
    "judge_schema",
    "parse_scores",
    "require_quorum",
    "status_of",
]

JudgeStatus = Literal["ok", "parse_error", "refused", "error"]
JUDGE_STATUSES: tuple[JudgeStatus, ...] = ("ok", "parse_error", "refused", "error")
SCORE_MIN, SCORE_MAX = 0, 100


def judge_schema(ids: Sequence[str]) -> JsonSchema:
    """The structured-output schema of one judge: one entry per id, ids from an enum."""
    n = len(ids)
    return JsonSchema(
        name="idea_scores",
        schema={
            "type": "object",
            "properties": {
                "scores": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "enum": list(ids)},
                            "score": {
                                "type": "integer",
                                "minimum": SCORE_MIN,
                                "maximum": SCORE_MAX,
                            },
                        },
                        "required": ["id", "score"],
                        "additionalProperties": False,
                    },
                    "minItems": n,
                    "maxItems": n,
                }
            },
            "required": ["scores"],
            "additionalProperties": False,
        },
        strict=True,
    )


def parse_scores(text: str, ids: Sequence[str]) -> dict[str, int]:
    """The scores of one judge answer, keyed by id in ``ids`` order.

    Raises :class:`RefusalError` for an answer with no JSON object in it that reads like a
    refusal (never re-asked) and ``ValueError`` naming the problem for anything else that is
    wrong. An answer that tried (a ``{...}`` with an apology around it) is malformed, not a
    refusal: a re-ask can fix it.
    """
    try:
        data = extract_json_object(text)
    except ValueError:
        if not has_json_object(text) and looks_like_refusal(text):
            raise RefusalError("the judge declined to score", output=text) from None
        raise
    extra = sorted(set(data) - {"scores"})
    if extra:
        raise ValueError(
            f"unexpected top-level key(s) {short_repr(extra)}; only 'scores' is allowed"
        )
    items = data.get("scores")
    if not isinstance(items, list):
        raise ValueError('\'scores\' must be a list of {"id": ..., "score": ...} objects')
    known = set(ids)
    found: dict[str, int] = {}
    for index, item in enumerate(items):
        where = f"scores[{index}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where} must be an object with 'id' and 'score'")
        keys = set(item)
        if keys != {"id", "score"}:
            missing = sorted({"id", "score"} - keys)
            unexpected = sorted(keys - {"id", "score"})
            detail = []
            if missing:
                detail.append(f"missing {missing}")
            if unexpected:
                detail.append(
                    f"unexpected {short_repr(unexpected)} (no explanations or other keys)"
                )
            raise ValueError(f"{where}: {', '.join(detail)}")
        card_id, score = item["id"], item["score"]
        if not isinstance(card_id, str) or card_id not in known:
            raise ValueError(f"{where}: unknown id {short_repr(card_id)}; the ids are {list(ids)}")
        if card_id in found:
            raise ValueError(f"{where}: id {card_id!r} is scored twice")
        if isinstance(score, bool) or not isinstance(score, int):
            raise ValueError(
                f"{where}: score for {card_id!r} must be an integer, got {short_repr(score)}"
            )
        if not SCORE_MIN <= score <= SCORE_MAX:
            raise ValueError(
                f"{where}: score for {card_id!r} must be in {SCORE_MIN}..{SCORE_MAX}, "
                f"got {short_repr(score)}"
            )
        found[card_id] = score
    missing_ids = [i for i in ids if i not in found]
    if missing_ids:
        raise ValueError(f"no score for id(s) {missing_ids}; score every id exactly once")
    return {i: found[i] for i in ids}


@dataclass(frozen=True)
class JudgeResult:
    """One judge's outcome. ``attempts`` = the judge's answers that were checked (the first
    answer plus the answers to re-asks; at least 1, also for a refusal or transport error)."""

    judge_id: str
    status: JudgeStatus
    scores: Mapping[str, int] | None
    attempts: int
    model: str
    temperature: float
    order: tuple[str, ...]
    path: str
    error: str | None = None
    output_preview: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The transcript's ``judges[]`` entry."""
        return {
            "id": self.judge_id,
            "model": self.model,
            "temperature": self.temperature,
            "status": self.status,
            "attempts": self.attempts,
            "order": list(self.order),
        }


def status_of(exc: Exception) -> JudgeStatus:
    """The status a failed judge call gets."""
    if isinstance(exc, RefusalError):
        return "refused"
    if isinstance(exc, ModelOutputError | EmptyResponseError):
        return "parse_error"
    return "error"


def require_quorum(results: Sequence[JudgeResult], min_ok: int) -> list[JudgeResult]:
    """The ``ok`` results, or :class:`ModelOutputError` ``invalid_judge_output`` naming every
    judge's status and step path and previewing the first bad output."""
    ok = [r for r in results if r.status == "ok"]
    if len(ok) >= min_ok:
        return ok
    statuses = ", ".join(f"{r.judge_id}={r.status}" for r in results)
    paths = ", ".join(r.path for r in results if r.status != "ok")
    bad = next((r for r in results if r.status != "ok" and r.output_preview), None)
    first_error = next((r.error for r in results if r.status != "ok" and r.error), None)
    message = (
        f"only {len(ok)} of {len(results)} judge(s) answered usably, at least {min_ok} "
        f"required (prompt.scoring.min_ok_judges); statuses: {statuses}; judge steps: {paths}"
    )
    if first_error:
        message += f"; first error: {preview(first_error, 200)}"
    raise ModelOutputError(
        "invalid_judge_output", message, output=bad.output_preview if bad else ""
    )
