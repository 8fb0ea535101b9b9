"""The judge ensemble: numeric-only scores, strict parsing, structured per-judge results.

A judge answers ``{"scores": {"A": 0..100, "B": 0..100, ...}}``: one integer score per card
id (the schema makes every id a required property, so a grammar enforces it), no other keys,
no prose (see :func:`parse_scores`); a ``reasoned`` judge answers
``{"scores": {"A": {"rationale": "...", "score": 0..100}, ...}}`` (:func:`reasoned_output`;
the other protocols: docs/protocols.md). Each judge ends in
a :class:`JudgeResult` whose ``status`` is one of

``ok``           the answer (possibly after re-asks) parsed; ``scores`` holds it
``parse_error``  the answer was still malformed after ``max_reasks`` re-asks (or was empty)
``degenerate``   the answer was well formed but its scores carry no judgement, still after
                 the re-asks (:func:`degeneracy`: the cards' positions, all equal, ranks
                 instead of the 0-100 scale); re-asked with reason
                 ``gate:judge_degenerate`` with its own seed and at least
                 :data:`REASK_TEMPERATURE` (:func:`degenerate_reask_sampling`), or not at
                 all when every score is equal (:func:`degenerate_reask_skip`)
``refused``      the API reported a refusal, or the answer holds no JSON object at all and
                 reads like one (:data:`~image_project.engine.output.REFUSAL_PATTERNS`);
                 never re-asked
``error``        the call itself failed (transport error after the retries, ...)

Only ``ok`` results are aggregated (a ``degenerate`` judge is left out like a parse error);
the quorum (``min_ok_judges``) decides whether the run can go on (:func:`require_quorum`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from image_project.engine.output import JsonOutput
from image_project.errors import (
    EmptyResponseError,
    ModelOutputError,
    RefusalError,
    preview,
)
from image_project.record.base import RecordModel
from image_project.record.gates import GATE_PREFIX, gate_error
from image_project.record.scoring import JudgeResult, JudgeStatus
from image_project.seeding import derive_seed

SCORE_MIN, SCORE_MAX = 0, 100
RATIONALE_MAX_CHARS = 240
"""The longest rationale a ``reasoned`` judge may write per card (the schema's
``maxLength``: a grammar-constrained server stops it there)."""
ALL_EQUAL = "every card got the same score"
"""How :func:`degeneracy` starts for an answer whose scores are all equal."""
REASK_TEMPERATURE = 0.3
"""The temperature of a degenerate judge's re-ask when the judge's own is lower: with the
same seed at temperature 0 a re-ask returns the same answer byte for byte (11 of 11 with
a small real model), so the re-ask gets its own seed and this small temperature."""


def degenerate_reask_skip(exc: Exception) -> str | None:
    """Why a degenerate judge answer is not re-asked, or None: every card got the same
    score, a judge that does not tell the cards apart at all (a small model gives every card
    0, or 75, in nearly every answer); a re-ask costs the whole prompt again for nothing."""
    if _is_degenerate(exc) and ALL_EQUAL in str(exc):
        return "not re-asked: a judge that scores every card the same does not tell them apart"
    return None


def degenerate_reask_sampling(
    seed: int | None, temperature: float
) -> Callable[[Exception, int], tuple[int, float] | None]:
    """The sampling of a degenerate judge's re-ask ``k``: a seed derived from the judge's
    (``seed``, ``k``) and at least :data:`REASK_TEMPERATURE`; None (the step's own) for any
    other error, and for a judge with no seed."""

    def resample(exc: Exception, k: int) -> tuple[int, float] | None:
        if seed is None or not _is_degenerate(exc):
            return None
        return derive_seed(seed, "reask", k), max(temperature, REASK_TEMPERATURE)

    return resample


def _is_degenerate(exc: Exception) -> bool:
    return isinstance(exc, ModelOutputError) and exc.reason == f"{GATE_PREFIX}judge_degenerate"


def degeneracy(scores: Sequence[int]) -> str | None:
    """Why ``scores`` (one judge's, in the order it was shown the cards) carry no judgement,
    or None when they may: the positions themselves (``0, 1, 2, ...`` or ``1, 2, 3, ...``,
    either way round, any count); with 3 or more cards also every score equal, or a
    degenerate range (every score at most the number of cards: ranks or positions in some
    order, not the 0-100 scale). Two cards may honestly tie, so only the exact position
    pattern counts for them; a near-tie of several cards is a judgement, even one that
    happens to rise along the order shown (``72, 73, 74, 75``: an offline rubric judge on
    four similar cards)."""
    values = list(scores)
    n = len(values)
    if n < 2:
        return None
    for start in (0, 1):
        positions = list(range(start, start + n))
        if values in (positions, positions[::-1]):
            return "the scores are the cards' positions in the order shown"
    if n < 3:
        return None
    if len(set(values)) == 1:
        return ALL_EQUAL
    if max(values) <= n:
        return f"the scores are ranks (all at most {n}), not the 0-100 scale"
    return None


class JudgeScore(RecordModel):
    """One card's score in a judge's answer."""

    model_config = ConfigDict(strict=True)

    id: str
    score: int = Field(ge=SCORE_MIN, le=SCORE_MAX)


class JudgeAnswer(RecordModel):
    """A judge's answer: ``{"scores": {"A": 0..100, "B": 0..100, ...}}``, one integer per
    card id. The model for one run's ids is built by :func:`judge_output`: ``scores`` is an
    object with one required property per id (in the order shown) and no other, so a
    grammar-constrained server can only write one score per card. The validator checks the
    same in words for the re-ask, and also reads the list form
    ``{"scores": [{"id": ..., "score": ...}, ...]}`` (every id exactly once) a model may
    still write when the server does not enforce the schema."""

    model_config = ConfigDict(title="idea_scores", strict=True)
    ids: ClassVar[tuple[str, ...]] = ()

    scores: Any

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        if cls.ids:
            return {"scores": _check_answer(data, cls.ids)}
        return data

    def as_dict(self) -> dict[str, int]:
        """The scores keyed by id, in the order the ids were given."""
        found = self.scores.model_dump(by_alias=True)
        return {i: int(found[i]) for i in type(self).ids}


def _check_answer(data: Any, ids: Sequence[str]) -> dict[str, int]:
    """The scores of a judge answer (already a JSON object) by id, or ``ValueError`` naming
    the first problem, worded for the re-ask."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object at the top level, got {type(data).__name__}")
    extra = sorted(set(data) - {"scores"})
    if extra:
        raise ValueError(f"{len(extra)} unexpected top-level key(s); only 'scores' is allowed")
    items = data.get("scores")
    if isinstance(items, dict):
        return _check_keyed(items, ids)
    if not isinstance(items, list):
        raise ValueError(
            "'scores' must be an object with one integer score per card id, "
            f"{{{', '.join(f'{i!r}: ...' for i in ids)}}}"
        )
    found: dict[str, int] = {}
    for index, item in enumerate(items):
        card_id = _check_item(f"scores[{index}]", item, ids, set(found))
        found[card_id] = item["score"]
    missing_ids = [i for i in ids if i not in found]
    if missing_ids:
        raise ValueError(f"no score for id(s) {missing_ids}; score every id exactly once")
    return found


def _check_keyed(items: dict[str, Any], ids: Sequence[str]) -> dict[str, int]:
    """``{"A": 80, ...}``: every id once (a JSON object cannot repeat a key: the parser
    rejects duplicates), integer scores in range, no other key."""
    unknown = [k for k in items if k not in ids]
    if unknown:
        raise ValueError(
            f"scores: {len(unknown)} key(s) that are not card ids; the ids are {list(ids)}"
        )
    missing_ids = [i for i in ids if i not in items]
    if missing_ids:
        raise ValueError(f"no score for id(s) {missing_ids}; score every id exactly once")
    for card_id in ids:
        _check_score(f"scores.{card_id}", card_id, items[card_id])
    return {i: items[i] for i in ids}


def _check_score(where: str, card_id: str, score: Any) -> None:
    if isinstance(score, bool) or not isinstance(score, int):
        raise ValueError(
            f"{where}: score for {card_id!r} must be an integer, got {_json_type(score)}"
        )
    if not SCORE_MIN <= score <= SCORE_MAX:
        raise ValueError(
            f"{where}: score for {card_id!r} is out of range; it must be in "
            f"{SCORE_MIN}..{SCORE_MAX}"
        )


def _json_type(value: Any) -> str:
    """What kind of JSON value ``value`` is, for a message that must not quote it."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a number with a fraction"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else "null"


def _check_item(where: str, item: Any, ids: Sequence[str], found: set[str]) -> str:
    """The id of one ``{"id": ..., "score": ...}`` entry, or ``ValueError``."""
    if not isinstance(item, dict):
        raise ValueError(f"{where} must be an object with 'id' and 'score'")
    keys = set(item)
    if keys != {"id", "score"}:
        missing = sorted({"id", "score"} - keys)
        unexpected = sorted(keys - {"id", "score"})
        detail = [f"missing {missing}"] if missing else []
        if unexpected:
            detail.append(
                f"{len(unexpected)} unexpected key(s) (only 'id' and 'score': no explanations "
                "or other keys)"
            )
        raise ValueError(f"{where}: {', '.join(detail)}")
    card_id, score = item["id"], item["score"]
    if not isinstance(card_id, str) or card_id not in ids:
        raise ValueError(f"{where}: 'id' is not one of the card ids {list(ids)}")
    if card_id in found:
        raise ValueError(f"{where}: id {card_id!r} is scored twice")
    _check_score(where, card_id, score)
    return card_id


_Score = Annotated[int, Field(ge=SCORE_MIN, le=SCORE_MAX)]


@functools.lru_cache(maxsize=1024)
def _answer_model(ids: tuple[str, ...]) -> type[JudgeAnswer]:
    fields: dict[str, Any] = {
        f"card_{n}": (_Score, Field(alias=card_id)) for n, card_id in enumerate(ids)
    }
    keyed = create_model("IdeaScores", __config__=ConfigDict(strict=True, extra="forbid"), **fields)
    model = create_model("JudgeAnswer", __base__=JudgeAnswer, scores=(keyed, ...))
    model.ids = ids
    return model


def _scores(answer: JudgeAnswer) -> dict[str, int]:
    return _gate(answer.as_dict())


def _gate(scores: dict[str, int]) -> dict[str, int]:
    """``scores``, or the ``gate:judge_degenerate`` error of :func:`degeneracy`."""
    why = degeneracy(list(scores.values()))
    if why is not None:
        raise gate_error(
            "judge_degenerate",
            f"{why}; judge every card on its own merits against the rubric and use the "
            "0-100 scale to tell them apart",
        )
    return scores


@dataclass(frozen=True)
class ReasonedScores:
    """A ``reasoned`` judge's answer: the scores and each card's rationale, by id."""

    scores: dict[str, int]
    rationales: dict[str, str]


class _Reasoned(RecordModel):
    """One card in a ``reasoned`` answer: the rationale first, so a model that writes the
    JSON in schema order reads the card before it commits to a number."""

    model_config = ConfigDict(strict=True, extra="forbid")

    rationale: str = Field(min_length=1, max_length=RATIONALE_MAX_CHARS)
    score: _Score


@functools.lru_cache(maxsize=1024)
def _reasoned_model(ids: tuple[str, ...]) -> type[BaseModel]:
    fields: dict[str, Any] = {
        f"card_{n}": (_Reasoned, Field(alias=card_id)) for n, card_id in enumerate(ids)
    }
    keyed = create_model(
        "ReasonedIdeaScores", __config__=ConfigDict(strict=True, extra="forbid"), **fields
    )
    return create_model(
        "ReasonedJudgeAnswer",
        __config__=ConfigDict(title="idea_scores", strict=True, extra="forbid"),
        scores=(keyed, ...),
    )


def reasoned_output(ids: Sequence[str]) -> JsonOutput[ReasonedScores]:
    """A ``reasoned`` judge's output for cards shown in the order ``ids``:
    ``{"scores": {"A": {"rationale": "...", "score": 0..100}, ...}}``, every id a required
    property in that order, each rationale at most :data:`RATIONALE_MAX_CHARS` characters
    and written before its score. The same degeneracy gate and refusal reading as
    :func:`judge_output`."""
    order = tuple(ids)

    def check(answer: BaseModel) -> ReasonedScores:
        found = answer.model_dump(by_alias=True)["scores"]
        scores = {i: int(found[i]["score"]) for i in order}
        _gate(scores)
        return ReasonedScores(scores, {i: str(found[i]["rationale"]) for i in order})

    return JsonOutput(_reasoned_model(order), check=check, refusals=True)


def judge_output(ids: Sequence[str], *, gate: bool = True) -> JsonOutput[dict[str, int]]:
    """A judge's output for cards shown in the order ``ids``: the schema lists the ids in that
    order, the step's value is ``{id: score}`` in that order. An answer with no JSON object
    that reads like a refusal is a refusal (never re-asked); degenerate scores
    (:func:`degeneracy`) are re-asked with reason ``gate:judge_degenerate``, unless ``gate``
    is False (a ``logprobs`` judge: its weighted scores are gated instead)."""
    check = _scores if gate else _plain
    return JsonOutput(_answer_model(tuple(ids)), check=check, refusals=True)


def _plain(answer: JudgeAnswer) -> dict[str, int]:
    return answer.as_dict()


def parse_scores(text: str, ids: Sequence[str]) -> dict[str, int]:
    """The scores of one judge answer, keyed by id in ``ids`` order.

    Raises :class:`RefusalError` for an answer with no JSON object in it that reads like a
    refusal (never re-asked) and ``ValueError`` naming the problem for anything else that is
    wrong. An answer that tried (a ``{...}`` with an apology around it) is malformed, not a
    refusal: a re-ask can fix it.
    """
    return judge_output(ids).parse(text)


def status_of(exc: Exception) -> JudgeStatus:
    """The status a failed judge call gets."""
    if isinstance(exc, RefusalError):
        return "refused"
    if isinstance(exc, ModelOutputError) and exc.reason == f"{GATE_PREFIX}judge_degenerate":
        return "degenerate"
    if isinstance(exc, ModelOutputError | EmptyResponseError):
        return "parse_error"
    return "error"


def require_quorum(results: Sequence[JudgeResult], min_ok: int) -> list[JudgeResult]:
    """The ``ok`` results, or :class:`ModelOutputError` ``invalid_judge_output`` naming every
    judge's status and step path and previewing the first bad output."""
    ok = [r for r in results if r.status == "ok"]
    if len(ok) >= min_ok:
        return ok
    statuses = ", ".join(f"{r.id}={r.status}" for r in results)
    paths = ", ".join(r.path for r in results if r.status != "ok")
    bad = next((r for r in results if r.status != "ok" and r.output_preview), None)
    first_error = next((r.error for r in results if r.status != "ok" and r.error), None)
    message = (
        f"only {len(ok)} of {len(results)} judge(s) answered usably, at least {min_ok} "
        f"required (prompt.scoring.min_ok_judges); statuses: {statuses}; judge steps: {paths}"
    )
    if first_error:
        detail = first_error.split(" (output preview: ", 1)[0]  # the message's own follows
        message += f"; first error: {preview(detail, 200)}"
    raise ModelOutputError(
        "invalid_judge_output", message, output=bad.output_preview if bad else ""
    )
