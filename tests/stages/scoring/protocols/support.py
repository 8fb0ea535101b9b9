"""What the protocols' unit tests share: an answer as a judge's step hands it back, and a
protocol's call's token limit under given limits."""

from __future__ import annotations

from collections.abc import Sequence

from image_project.engine.budget import TokenLimits
from image_project.engine.outcome import Answer
from image_project.record.events import ChatEvent, ChatParams, TokenLogprobs
from image_project.stages.scoring.protocols.base import JudgingProtocol, Verdict

LIMITS = TokenLimits(judge_base=100, judge_per_card=10, judge_reasoned_per_card=50)
"""Limits whose sums tell every per-card rate apart."""


def answered(
    value: Verdict,
    text: str | None = None,
    tokens: Sequence[TokenLogprobs] | None = None,
    *,
    answers: int = 1,
    path: str = "pipeline/blackbox_scoring/judges/j",
) -> Answer[Verdict]:
    """``value`` as a judge's step hands it back, its event holding the answer ``text`` and
    its token log-probabilities."""
    event = ChatEvent(
        name=path.rsplit("/", 1)[-1],
        path=path,
        prompt="p",
        response=text,
        params=ChatParams(temperature=0.0, model="m", seed=1),
        context_messages=0,
        created_at="2026-01-01T00:00:00Z",
        latency_ms=1.0,
        attempts=1,
        answers=answers,
        logprobs=tuple(tokens) if tokens is not None else None,
    )
    return Answer(value, event)


def limit(protocol: JudgingProtocol, shown: tuple[str, ...]) -> int | None:
    """The output-token limit ``protocol`` sends with a call showing ``shown``."""
    return LIMITS.resolve(protocol.budget(shown), "m")


def parsed(protocol: JudgingProtocol, shown: tuple[str, ...], text: str) -> Verdict:
    """A call's answer ``text`` read as ``protocol`` reads it (``ValueError`` or
    ``ModelOutputError`` as its step would re-ask, ``RefusalError`` as it would not)."""
    return protocol.output(shown).parse(text)
