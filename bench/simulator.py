"""The benchmarks' latency simulator: the package's fake OpenAI server
(:class:`image_project.testing.OpenAIServer`) with offline answers, log-normal latencies keyed
by the request body and an optional requests-per-window limit, served by uvicorn.

    sim = LatencySimulator(chat_median_s=0.4, image_median_s=2.0)
    with sim.serve() as base_url:          # http://127.0.0.1:<port>/v1
        ...                                 # point openai.AsyncOpenAI(base_url=...) at it
    sim.records                             # one CallRecord per request, server-side times

    sim = RemoteSimulator(chat_median_s=0.4)   # the same, served by its own process
    with sim.serve() as base_url: ...          # (bench/latency.py uses this one)

Content comes from the project's deterministic offline backend, so a structured request
always gets valid JSON. Latency: each request waits for a log-normal duration (median
``chat_median_s`` or ``image_median_s``, ``sigma``, clipped to [0.25, 4] x median) drawn from
a generator seeded with the SHA-256 of the request body, so the same request costs the same
in every mode and every repeat, which keeps the sequential/concurrent comparison fair.
``latency_key = "call"`` keys the draw by the call's identity instead (endpoint, model, API
seed; see :class:`image_project.testing.LognormalLatency`): used by the N x J sweep, where a
different number of cards leads to different text in every later request.

Rate limit (bench/batch.py): ``set_rate_limit(limit, window_s)``, ``limit`` requests per fixed
window (0 = none), counted when a request arrives; a request over it is answered at once with
429 (see :class:`image_project.testing.FixedWindow` for the headers).

``python bench/simulator.py [--chat-median S] [--image-median S] [--sigma X]`` serves one in
this process and prints its base URL first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from image_project._fake_openai import main as _main
from image_project.testing import (
    CallRecord,
    FixedWindow,
    LognormalLatency,
    OpenAIServer,
    OpenAIServerProcess,
)

__all__ = ["CallRecord", "LatencySimulator", "RemoteSimulator", "main"]


class LatencySimulator(OpenAIServer):
    """The simulator in this process (uvicorn in a background thread)."""

    def __init__(
        self,
        chat_median_s: float = 0.4,
        image_median_s: float = 2.0,
        sigma: float = 0.35,
        latency_key: str = "body",
    ) -> None:
        self.latencies = LognormalLatency(chat_median_s, image_median_s, sigma, latency_key)
        super().__init__(offline=True, latency=self.latencies)

    @property
    def latency_key(self) -> str:
        return self.latencies.key

    @latency_key.setter
    def latency_key(self, value: str) -> None:
        self.latencies.key = value

    def latency_for(self, kind: str, body: bytes) -> float:
        return self.latencies(kind, body)

    @property
    def window(self) -> FixedWindow | None:
        return self.rate_window if isinstance(self.rate_window, FixedWindow) else None

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        with self.serve_uvicorn() as base_url:
            yield base_url


class RemoteSimulator(OpenAIServerProcess):
    """The simulator served by its own process (``python -m image_project._fake_openai``),
    driven through its side door. The bench uses this one: a real API runs on other machines,
    so the simulator's CPU time must not compete with the client's for one GIL."""


def main(argv: list[str] | None = None) -> None:
    """Serve a simulator in this process until terminated; print the base URL first."""
    _main(argv)


if __name__ == "__main__":
    main()
