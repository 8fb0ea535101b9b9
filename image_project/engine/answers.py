"""How one chat step's answers are judged and re-asked (the runner's helpers): what every
request of a step shares (:class:`Call`), why an answer cut at the token limit is not an
answer (:func:`cut_off`), the answer text or its refusal / empty-answer error
(:func:`answer_text`), and the conversation of the next re-ask (:func:`reask_messages`),
which keeps user and assistant turns alternating."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from image_project.backends.base import Message, TextReply
from image_project.engine.nodes import ChatStep
from image_project.engine.output import Output, ReaskPolicy
from image_project.errors import (
    PREVIEW_CHARS,
    EmptyResponseError,
    ModelOutputError,
    RefusalError,
    preview,
)
from image_project.record.events import Reask

TRUNCATION_MARK = "…"
REASK_ERROR_CHARS = 2000
"""The longest validation error a re-ask carries."""

_Conversation: TypeAlias = tuple[Message, ...]


@dataclass(frozen=True)
class Call:
    """What every request of one chat step shares: the model, the token limit, the path."""

    model: str
    limit: int | None
    path: str


def cut_off(limit: int | None, reply: TextReply) -> str | None:
    """Why an answer the server stopped at its token limit (``finish_reason`` ``length``)
    is not an answer, or None. Its own reason, so that a re-ask says what went wrong (a
    JSON answer cut off would otherwise read as "no {...} found"). The limit named is the one
    the answered attempt was sent with (a retry after a timeout may send a smaller one)."""
    if reply.finish_reason != "length":
        return None
    if reply.max_output_tokens is not None:
        limit = reply.max_output_tokens
    at = f"{limit} tokens" if limit is not None else "the server's token limit"
    return f"the answer was cut off at {at} (finish_reason 'length'); answer shorter"


def reask_error(exc: Exception) -> str:
    """What a re-ask says about a rejected answer: the reason and the problem, never a
    preview of the answer itself (a conversation re-ask has the answer as its assistant turn,
    a restated one must not anchor on it, and a quoted preview is what a weak model copies
    back as its "answer")."""
    if isinstance(exc, ModelOutputError):
        return f"{exc.reason}: {exc.detail}"
    return str(exc)


def echo_of(text: str, rejected: Sequence[str]) -> str | None:
    """Why a re-ask's answer that passed its output's checks is still no answer, or None:
    it ends in the truncation mark of a shortened quote (:func:`~image_project.errors.preview`),
    or, for a rejected answer longer than a preview, it is that answer's preview or its first
    ``PREVIEW_CHARS`` characters or fewer (a copy of what an error quoted, not a new answer;
    a short answer's shorter start, such as a title cut to fewer words, is an answer)."""
    shown = " ".join(text.split())
    if shown.endswith(TRUNCATION_MARK):
        return (
            f"the answer ends in the truncation mark {TRUNCATION_MARK!r}: it copies a shortened "
            "quote; write the whole answer"
        )
    for earlier in rejected:
        flat = " ".join(earlier.split())
        if len(flat) > PREVIEW_CHARS and (
            shown == preview(earlier) or (len(shown) <= PREVIEW_CHARS and flat.startswith(shown))
        ):
            return "the answer repeats the start of the rejected answer; write a new, whole answer"
    return None


def accepted(
    output: Output[Any] | None, text: str, cut: str | None, rejected: Sequence[str]
) -> Any:
    """The value of an answer the step accepts, or the error it is rejected with: cut off
    at the token limit (``cut``), invalid for ``output``, or (after re-asks) an echo of one
    of the ``rejected`` answers (whole, :func:`echo_of`)."""
    if cut is not None:
        raise ModelOutputError("cut_off", cut, output=text)
    value = text if output is None else output.parse(text)
    echo = echo_of(text, rejected) if rejected else None
    if echo is not None:
        raise ModelOutputError("reask_echo", echo, output=text)
    return value


@dataclass(frozen=True)
class Rejection:
    """A rejected answer: its record, whether the step stops here (re-asks used up, or the
    policy's ``skip`` gave a reason not to re-ask), and the next re-ask's own
    ``(seed, temperature)`` when the policy gives it one."""

    record: Reask
    final: bool
    sampling: tuple[int, float] | None = None


def reject(policy: ReaskPolicy, exc: Exception, text: str, earlier: Sequence[Reask]) -> Rejection:
    """What becomes of an answer rejected with ``exc`` after ``earlier`` rejections."""
    error = reask_error(exc)[:REASK_ERROR_CHARS]
    skip = policy.skip(exc) if policy.skip is not None and policy.max else None
    if skip is not None:
        return Rejection(Reask.of(text, f"{error}; {skip}"), final=True)
    if len(earlier) + 1 > policy.max:
        return Rejection(Reask.of(text, error), final=True)
    sampling = policy.resample(exc, len(earlier) + 1) if policy.resample is not None else None
    if sampling is None:
        return Rejection(Reask.of(text, error), final=False)
    seed, temperature = sampling
    record = Reask.of(text, error, seed=seed, temperature=temperature)
    return Rejection(record, final=False, sampling=sampling)


def answer_text(step: ChatStep[Any], reply: TextReply, path: str) -> str:
    """The answer's text, or the refusal / empty-answer error the step does not allow."""
    text = reply.text
    if reply.refusal and not (text and text.strip()):
        raise RefusalError(f"{path}: the model refused: {reply.refusal}", output=reply.refusal)
    if text is None or not text.strip():
        if not step.allow_empty_response:
            what = "None" if text is None else "a blank response"
            raise EmptyResponseError(f"{path}: the model returned {what}")
        return text or ""
    return text


def reask_messages(
    policy: ReaskPolicy,
    history: _Conversation,
    messages: _Conversation,
    prompt: str,
    answer: str,
    error: str,
) -> _Conversation:
    """The conversation of the next re-ask: ``restate`` sends the history plus one user
    message (the prompt followed by the error); ``conversation`` appends the rejected answer
    and the error to what was sent."""
    if policy.style == "restate":
        return (*history, Message("user", f"{prompt}\n\n{policy.prompt(error)}"))
    return (*messages, Message("assistant", answer), Message("user", policy.prompt(error)))
