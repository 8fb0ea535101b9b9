"""A small request quota, enforced by the local server the way OpenAI does it: 6 requests per
2 seconds, refilled continuously, ``x-ratelimit-*`` headers on every answer, a 429 saying when
the next request is allowed beyond it (tests/support/openai_server.py, ``RateWindow``).

The server keeps its own real clock (it is the world the client lives in), and the run is
built by the factory from config as the CLI builds it, so the client really waits for the
window. Nothing here asserts on time: only on what the server refused, what the transcript
recorded and how the run ended.

Why pacing matters here: without it, the refused calls of a fan-out all come back together
when the server says the next request would be allowed, one gets in, the rest are refused
again, and a call runs out of its 4 attempts (24 refusals, 15 accepted requests,
``RateLimitedError ... (attempt 4 of 4)``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from image_project.backends.factory import make_backends
from image_project.record.events import TIMING_FIELDS
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from tests.faults.common import images, make_cfg, transcripts
from tests.support.openai_server import OpenAIServer, RateWindow

pytestmark = pytest.mark.anyio

SCORING_6x3 = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.num_ideas=6",
    "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel}]",
)


async def run_against(tmp: Path, window: RateWindow | None) -> tuple[dict[str, Any], str | None]:
    """One scoring run (6 cards, 3 judges) through the factory's backends; its transcript and
    the run's error message (None when it completed)."""
    with OpenAIServer(offline=True, rate_window=window) as server:
        cfg = make_cfg(
            tmp,
            *SCORING_6x3,
            "backend.provider=openai",
            f"backend.base_url={server.base_url}",
            "backend.backoff_initial_s=0.01",  # the server's own waits decide
            "backend.backoff_max_s=0.05",
        )
        backends = make_backends(cfg, {})
        failure = None
        try:
            await run_generation(cfg, backends)
        except RunFailed as exc:
            failure = str(exc)
        finally:
            await backends.aclose()
    (t,) = transcripts(tmp)
    return t, failure


def calls(t: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in t["steps"] if s["type"] in ("chat", "image")]


def without_timing(t: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in s.items() if k not in TIMING_FIELDS} for s in t["steps"]]


async def test_a_scoring_run_completes_within_a_6_per_2s_request_window(
    tmp_path: Path, allow_loopback: None
) -> None:
    window = RateWindow(limit=6, window_s=2.0)
    t, failure = await run_against(tmp_path / "paced", window)
    print(f"rate window 6/2s: accepted {window.accepted}, refused {window.refused}")
    assert failure is None and t["error"] is None and images(tmp_path / "paced")
    steps = calls(t)
    assert len(steps) == 24  # 23 text calls and the image, 6 cards and 3 judges among them
    assert window.refused <= 3  # at most a few 429s (in practice none)
    assert window.accepted == 24
    assert sum(s["attempts"] for s in steps) == window.accepted + window.refused
    # The holds are recorded per chat step, and they are not attempts.
    chat = [s for s in steps if s["type"] == "chat"]
    assert all(s["pacing_wait_ms"] >= 0 for s in chat)
    assert any(s["pacing_wait_ms"] > 0 and s["attempts"] == 1 for s in chat)

    # Pacing changes when calls go out, not what the run produces: the same run against
    # the same server without a quota records the same steps, answers and selection.
    free, free_failure = await run_against(tmp_path / "free", None)
    assert free_failure is None
    assert without_timing(free) == without_timing(t)
    for record in (free, t):  # the novelty warning names the run's own output directory
        record["blackbox_scoring"]["novelty"].pop("warning")
    assert free["blackbox_scoring"] == t["blackbox_scoring"]
