"""The ``logprobs`` judging protocol: each score weighted by the probabilities of its digits.

A ``logprobs`` judge is asked exactly like a ``list`` judge (same prompt, schema and token
limit) and also for the answer tokens' log-probabilities with :data:`TOP_LOGPROBS`
alternatives each (``logprobs`` / ``top_logprobs``, which llama.cpp's server and OpenAI's
API both return). Each card's score then becomes the expected score over the alternatives
of its first digit token (G-Eval's probability-weighted score): the token that starts the
score is replaced by each alternative that is digits in the same place, the score's
remaining digits kept as sampled, and the candidates in 0..100 averaged by their
probabilities, renormalised (:func:`expected_scores`). With a tokenizer that writes every
digit alone (Qwen, Llama 3) this weighs the tens digit; with one that writes ``85`` as one
token, the whole score. A sampled score of 0 is the one whose length says nothing about its
alternatives' (JSON allows no digit after a leading 0): an alternative single digit 1-9 in
its place is read as the tens digit of a two-digit score, units 0 (``7`` is 70), as a 0-100
judge writes its scores; read as one-digit scores, a judge that wrote 0 for every card with
most of each card's probability on other tens digits got weighted scores of 0 to 4.

Where the server returns no log-probabilities, or its tokens do not spell the answer, the
sampled scores are kept and the judge's result carries a ``warning`` saying so (logged
too): the fallback is loud, never silent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from image_project.record.events import TokenLogprobs

TOP_LOGPROBS = 10
"""How many alternatives per answer token a ``logprobs`` judge asks for."""
NO_LOGPROBS = "the endpoint returned no token log-probabilities; the sampled scores are used"


@dataclass(frozen=True)
class Weighted:
    """The weighted scores (rounded to integers, as every judge's) and the cards whose
    score kept its sampled value (no usable alternative digits)."""

    scores: dict[str, int]
    kept: tuple[str, ...]


def _score_span(text: str, card_id: str) -> tuple[int, int] | None:
    found = re.search(rf'"{re.escape(card_id)}"\s*:\s*(\d+)', text)
    return found.span(1) if found else None


def _lead_digits(text: str) -> str:
    return text[: len(text) - len(text.lstrip("0123456789"))]


def expected_scores(
    text: str, tokens: Sequence[TokenLogprobs] | None, scores: Mapping[str, int]
) -> Weighted | str:
    """The scores of an answer ``text`` weighted by its ``tokens``' alternatives, or why
    they cannot be (no tokens; tokens that do not spell ``text``)."""
    if not tokens:
        return NO_LOGPROBS
    if "".join(t.token for t in tokens) != text:
        return "the token log-probabilities do not spell the answer; the sampled scores are used"
    starts: list[int] = []
    at = 0
    for t in tokens:
        starts.append(at)
        at += len(t.token)
    out: dict[str, int] = {}
    kept: list[str] = []
    for card_id, sampled in scores.items():
        value = _expected(text, tokens, starts, card_id)
        if value is None:
            kept.append(card_id)
            out[card_id] = sampled
        else:
            out[card_id] = round(value)
    return Weighted(out, tuple(kept))


def _expected(
    text: str, tokens: Sequence[TokenLogprobs], starts: Sequence[int], card_id: str
) -> float | None:
    span = _score_span(text, card_id)
    if span is None:
        return None
    begin, end = span
    index = max(i for i, s in enumerate(starts) if s <= begin)
    token = tokens[index]
    prefix = text[starts[index] : begin]
    own = token.token[len(prefix) :]
    own_digits = _lead_digits(own)
    tail = own[len(own_digits) :]
    rest = text[begin + len(own_digits) : end]
    weights: dict[int, float] = {}
    for alt, logprob in token.top or ((token.token, token.logprob),):
        if not alt.startswith(prefix):
            continue
        body = alt[len(prefix) :]
        digits = _lead_digits(body)
        if not digits or body[len(digits) :] != tail:
            continue
        candidate = int(digits + rest)
        if own_digits + rest == "0" and len(digits) == 1:
            candidate *= 10  # the tens digit of a score the sampled 0 does not show
        if 0 <= candidate <= 100:
            weights[candidate] = weights.get(candidate, 0.0) + math.exp(logprob)
    total = sum(weights.values())
    if total <= 0:
        return None
    return sum(v * w for v, w in weights.items()) / total
