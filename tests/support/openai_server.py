"""The tests' name for the fake OpenAI server: :mod:`image_project.testing` ships it (the
package's users serve the same one); see its module docstring. Here too: the refilling
request quota the fault tests put in front of it (:class:`RateWindow`, given to
``OpenAIServer(rate_window=...)``), and how OpenAI writes a duration (:func:`openai_duration`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from image_project._fake_openai import (
    HTML_PAGE,
    TINY_PNG,
    WAIT_BOUND_S,
    OpenAIServer,
    RecordedRequest,
    Reply,
    chat_completion,
    error_body,
    image_response,
    truncated,
)

__all__ = [
    "HTML_PAGE",
    "TINY_PNG",
    "WAIT_BOUND_S",
    "OpenAIServer",
    "RateWindow",
    "RecordedRequest",
    "Reply",
    "chat_completion",
    "error_body",
    "image_response",
    "openai_duration",
    "truncated",
]


def openai_duration(seconds: float) -> str:
    """A duration the way OpenAI writes ``x-ratelimit-reset-*``: ``20ms``, ``1.5s``, ``6m0s``
    (rounded up to the millisecond, so a client waiting that long is never early)."""
    millis = max(0, math.ceil(seconds * 1000 - 1e-6))
    if millis < 1000:
        return f"{millis}ms"
    minutes, millis = divmod(millis, 60_000)
    secs = f"{millis / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


@dataclass
class RateWindow:
    """A request quota of ``limit`` requests per ``window_s`` seconds, enforced the way OpenAI
    describes its limits: continuously, as a bucket of ``limit`` requests that refills at
    ``limit / window_s`` per second (so after a burst the next request is allowed a fraction
    of the window later, not a whole window later). It starts full; refused requests do not
    count. On the server's monotonic clock.

    Answers carry ``x-ratelimit-limit-requests``, ``-remaining-requests`` (whole requests left)
    and ``-reset-requests`` (the time until the bucket is full again: OpenAI's "until the rate
    limit resets to its initial state"), and a generous token quota that is never enforced. A
    refusal says when the next request will be allowed: ``retry-after-ms`` and
    ``Retry-After`` (whole seconds, rounded up).
    """

    limit: int
    window_s: float
    tokens: int = 1_000_000
    accepted: int = 0
    refused: int = 0
    _level: float = field(default=-1.0, repr=False)
    _last: float = field(default=0.0, repr=False)

    @property
    def rate(self) -> float:
        return self.limit / self.window_s

    def clock(self) -> float:
        return time.monotonic()

    def admit(self, now: float) -> tuple[bool, dict[str, str]]:
        self._refill(now)
        if self._level >= 1.0:
            self._level -= 1.0
            self.accepted += 1
            return True, self._headers()
        self.refused += 1
        headers = self._headers()
        wait = (1.0 - self._level) / self.rate
        headers["retry-after-ms"] = str(math.ceil(wait * 1000))
        headers["retry-after"] = str(math.ceil(wait))
        return False, headers

    def refusal_body(self) -> dict[str, Any]:
        wait = (1.0 - self._level) / self.rate
        return error_body(
            f"Rate limit reached for requests: Limit {self.limit} per {self.window_s:g} s. "
            f"Please try again in {wait * 1000:.0f}ms.",
            type="requests",
            code="rate_limit_exceeded",
        )

    def answer_headers(self, admitted: dict[str, str]) -> dict[str, str]:
        return admitted

    def _refill(self, now: float) -> None:
        if self._level < 0:  # the first request: a full bucket
            self._level = float(self.limit)
        else:
            self._level = min(float(self.limit), self._level + (now - self._last) * self.rate)
        self._last = now

    def _headers(self) -> dict[str, str]:
        reset = openai_duration((self.limit - self._level) / self.rate)
        used = self.limit - self._level
        return {
            "x-ratelimit-limit-requests": str(self.limit),
            "x-ratelimit-remaining-requests": str(math.floor(self._level)),
            "x-ratelimit-reset-requests": reset,
            "x-ratelimit-limit-tokens": str(self.tokens),
            "x-ratelimit-remaining-tokens": str(self.tokens - math.ceil(1000 * used)),
            "x-ratelimit-reset-tokens": reset,
        }
