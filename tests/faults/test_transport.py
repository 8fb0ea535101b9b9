"""Transport faults through the whole pipeline: the real ``openai`` client against a local
scripted server on 127.0.0.1 (tests/support/openai_server.py), never a mock of the SDK.

Each test runs :func:`run_generation` with the OpenAI adapter; the server answers every call
with the offline backend's content unless a rule scripts a fault for a chosen call. The retry
layer's sleep is recorded instead of slept (the waits it asked for are asserted), except for
the read timeout, which must really fire."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from image_project.backends.factory import make_backends
from image_project.backends.openai_backend import OpenAITextBackend
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.seeding import derive_seed
from tests.faults.common import (
    MAX_ATTEMPTS,
    http_backends,
    images,
    make_cfg,
    read_rows,
    transcripts,
)
from tests.support import RecordingSleep
from tests.support.openai_server import (
    HTML_PAGE,
    OpenAIServer,
    RecordedRequest,
    Reply,
    chat_completion,
    error_body,
    truncated,
)

pytestmark = pytest.mark.anyio


def attempts_by_path(t: dict[str, Any]) -> dict[str, int]:
    return {s["path"]: s["attempts"] for s in t["steps"] if s["type"] == "chat"}


async def run_with(
    tmp: Path,
    server: OpenAIServer,
    *extra: str,
    **backend_kw: Any,
) -> tuple[dict[str, Any], RecordingSleep]:
    sleep = RecordingSleep()
    async with http_backends(server, sleep, **backend_kw) as b:
        await run_generation(make_cfg(tmp, *extra), b)
    (t,) = transcripts(tmp)
    return t, sleep


def only_retried(t: dict[str, Any], path: str, attempts: int) -> None:
    """``path`` took ``attempts`` transport attempts; every other step exactly one."""
    counts = attempts_by_path(t)
    assert counts[path] == attempts, counts
    assert {p: n for p, n in counts.items() if p != path} == {p: 1 for p in counts if p != path}


IDEA_B = "pipeline/blackbox_scoring/ideas/idea_B"
SCORING = ("prompt.scoring.enabled=true", "prompt.scoring.num_ideas=4")


IDEA_B_SEED = derive_seed(77, "step", "idea", "B")


def idea_card_request(r: RecordedRequest) -> bool:
    return r.schema_name == "idea_card"


def idea(card_seed: int) -> Callable[[RecordedRequest], bool]:
    return lambda r: r.schema_name == "idea_card" and r.seed == card_seed


def judge(judge_id: str) -> Callable[[RecordedRequest], bool]:
    seed = derive_seed(77, "step", "judge", judge_id)
    return lambda r: r.schema_name == "idea_scores" and r.seed == seed


# --- retried faults: the run completes and the transcript counts the attempts -----------------


async def test_429_with_retry_after_waits_at_least_that_long(
    tmp_path: Path, allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(
            idea(IDEA_B_SEED),
            Reply(status=429, headers={"Retry-After": "3"}, body=error_body("slow down")),
        )
        t, sleep = await run_with(tmp_path, server, *SCORING)
    assert len(sleep.waits) == 1 and 3.0 <= sleep.waits[0] <= 3.3
    only_retried(t, IDEA_B, 2)
    assert t["error"] is None and images(tmp_path)


async def test_retry_after_5_is_waited_for_in_full_before_the_next_attempt(
    tmp_path: Path, allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), Reply(status=429, headers={"Retry-After": "5"}))
        t, sleep = await run_with(tmp_path, server, *SCORING, max_retry_wait_s=5.0)
    (waited,) = sleep.waits  # the injected sleep: asked for, not slept
    assert waited >= 5.0
    only_retried(t, IDEA_B, 2)
    assert t["error"] is None and images(tmp_path)


async def test_429_without_retry_after_backs_off_with_jitter(
    tmp_path: Path, allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), *[Reply(status=429)] * 3)
        t, sleep = await run_with(tmp_path, server, *SCORING)
    w1, w2, w3 = sleep.waits
    assert 0.5 <= w1 <= 1.0 and 1.0 <= w2 <= 2.0 and 2.0 <= w3 <= 4.0  # equal jitter
    assert not (w2 - w1 == w3 - w2 or w2 / w1 == w3 / w2)  # no fixed interval or ratio
    only_retried(t, IDEA_B, 4)


@pytest.mark.parametrize("burst", [(500, 502, 503), (503, 503), (502,)], ids=str)
async def test_server_error_bursts_are_retried(
    tmp_path: Path, allow_loopback: None, burst: tuple[int, ...]
) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), *[Reply(status=s) for s in burst])
        t, _ = await run_with(tmp_path, server, *SCORING)
    only_retried(t, IDEA_B, len(burst) + 1)
    assert t["error"] is None


async def test_connection_reset_is_retried(tmp_path: Path, allow_loopback: None) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), Reply(disconnect=True), Reply(disconnect=True))
        t, _ = await run_with(tmp_path, server, *SCORING)
    only_retried(t, IDEA_B, 3)


async def test_read_timeout_fires_and_is_retried(tmp_path: Path, allow_loopback: None) -> None:
    # The held answer would take 60 s; the configured 0.5 s timeout must cut it off.
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), Reply(delay_s=60))
        t, sleep = await run_with(tmp_path, server, *SCORING, timeout_s=0.5)
    only_retried(t, IDEA_B, 2)
    assert len(sleep.waits) == 1


async def test_image_retries_are_counted(tmp_path: Path, allow_loopback: None) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(lambda r: r.is_image, Reply(status=503), Reply(status=429))
        t, _ = await run_with(tmp_path, server)
    image = next(s for s in t["steps"] if s["type"] == "image")
    assert image["attempts"] == 3
    assert set(attempts_by_path(t).values()) == {1}


# A 200 that is not the answer: (raw body, content type, what the error shows of it).
MALFORMED_200 = {
    "html_page": (HTML_PAGE, "text/html", "502 Bad Gateway"),
    "truncated_json": (
        truncated(chat_completion('{"hook": "a heron"}')),
        "application/json",
        '"id"',
    ),
    "wrong_content_type": (b"upstream request timeout", "text/plain", "upstream request timeout"),
}


def malformed_200(case: str) -> Reply:
    raw, content_type, _ = MALFORMED_200[case]
    return Reply(raw=raw, content_type=content_type)


@pytest.mark.parametrize("case", list(MALFORMED_200))
async def test_a_malformed_200_is_retried_and_the_run_completes(
    tmp_path: Path, allow_loopback: None, case: str
) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), malformed_200(case), malformed_200(case))
        t, sleep = await run_with(tmp_path, server, *SCORING)
    only_retried(t, IDEA_B, 3)
    assert len(sleep.waits) == 2
    assert t["error"] is None and images(tmp_path)


@pytest.mark.parametrize("case", list(MALFORMED_200))
async def test_malformed_200s_to_two_judges_are_retried_and_the_run_completes(
    tmp_path: Path, allow_loopback: None, case: str
) -> None:
    # Each judge's malformed answer is retried on its own: two of them cost one more request
    # each, not the run.
    judges = "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel}]"
    with OpenAIServer(offline=True) as server:
        for judge_id in ("strict", "warm"):
            server.rule(judge(judge_id), malformed_200(case))
        t, _ = await run_with(tmp_path, server, *SCORING, judges)
    counts = attempts_by_path(t)
    judge_attempts = {p.rsplit("/", 1)[1]: n for p, n in counts.items() if "/judges/" in p}
    assert judge_attempts == {"strict": 2, "warm": 2, "novel": 1}
    assert t["error"] is None and images(tmp_path)
    assert all(s.get("error") is None for s in t["steps"])


@pytest.mark.parametrize("case", list(MALFORMED_200))
async def test_a_malformed_200_every_time_fails_with_our_error_after_the_attempts(
    tmp_path: Path, allow_loopback: None, case: str
) -> None:
    _, content_type, shown = MALFORMED_200[case]
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), *[malformed_200(case)] * 10)
        with pytest.raises(RunFailed) as caught:
            await run_with(tmp_path, server, *SCORING)
        hits = [r for r in server.requests if idea(IDEA_B_SEED)(r)]
    assert len(hits) == MAX_ATTEMPTS
    message = str(caught.value)
    assert IDEA_B in message and f"content type {content_type!r}" in message and shown in message
    (t,) = transcripts(tmp_path)
    error = t["error"]
    assert (error["type"], error["path"]) == ("MalformedResponseError", IDEA_B)
    assert (error["status"], error["attempts"]) == (200, MAX_ATTEMPTS)
    assert images(tmp_path) == [] and read_rows(tmp_path / "out" / "generations.csv") == []


# --- faults that end the run: a clear error, a transcript, no records -------------------------


async def test_the_configured_timeout_and_attempts_reach_the_adapter(
    tmp_path: Path, allow_loopback: None
) -> None:
    # Built from config by the factory, as the CLI does: attempt 1 is held past
    # backend.timeout_s, attempt 2 gets a 503, and backend.max_attempts 2 ends it there.
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), Reply(delay_s=60), *[Reply(status=503)] * 5)
        cfg = make_cfg(
            tmp_path,
            *SCORING,
            "backend.provider=openai",
            f"backend.base_url={server.base_url}",
            "backend.timeout_s=0.5",
            "backend.max_attempts=2",
            "backend.backoff_initial_s=0.01",
            "backend.backoff_max_s=0.01",
        )
        backends = make_backends(cfg, {})
        try:
            with pytest.raises(RunFailed) as caught:
                await run_generation(cfg, backends)
        finally:
            await backends.aclose()
        outage = [r for r in server.requests if idea(IDEA_B_SEED)(r)]
    assert len(outage) == 2
    assert caught.value.error.attempts == 2 and caught.value.error.status == 503
    assert "attempt 2 of 2" in str(caught.value)


async def test_retry_after_300_fails_the_call_at_once_with_the_wait_and_the_setting(
    tmp_path: Path, allow_loopback: None
) -> None:
    # Built from config by the factory, as the CLI does, with the real sleep: the call must
    # fail without waiting at all: a wait longer than backend.max_retry_wait_s is refused
    # up front, rather than waited out (or cut short and refused again) attempt after
    # attempt.
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), *[Reply(status=429, headers={"Retry-After": "300"})] * 4)
        cfg = make_cfg(
            tmp_path,
            *SCORING,
            "backend.provider=openai",
            f"backend.base_url={server.base_url}",
            "backend.max_retry_wait_s=60",
        )
        backends = make_backends(cfg, {})
        try:
            with pytest.raises(RunFailed) as caught:
                await run_generation(cfg, backends)
        finally:
            await backends.aclose()
        hits = [r for r in server.requests if idea(IDEA_B_SEED)(r)]
    assert len(hits) == 1
    message = str(caught.value)
    assert IDEA_B in message
    assert "asked to wait 300 s" in message and "backend.max_retry_wait_s (60 s)" in message
    (t,) = transcripts(tmp_path)
    error = t["error"]
    assert (error["type"], error["path"]) == ("RetryAfterTooLongError", IDEA_B)
    assert (error["status"], error["attempts"]) == (429, 1)
    assert images(tmp_path) == [] and read_rows(tmp_path / "out" / "generations.csv") == []


async def test_permanent_outage_names_the_step_the_status_and_the_attempts(
    tmp_path: Path, allow_loopback: None
) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), *[Reply(status=503)] * 10)
        with pytest.raises(RunFailed) as caught:
            await run_with(tmp_path, server, *SCORING)
        outage = [r for r in server.requests if idea(IDEA_B_SEED)(r)]
    assert len(outage) == MAX_ATTEMPTS
    message = str(caught.value)
    assert IDEA_B in message and "HTTP 503" in message
    assert f"attempt {MAX_ATTEMPTS} of {MAX_ATTEMPTS}" in message
    (t,) = transcripts(tmp_path)
    error = t["error"]
    assert (error["type"], error["phase"], error["path"]) == ("ServerError", "pipeline", IDEA_B)
    assert (error["status"], error["attempts"]) == (503, MAX_ATTEMPTS)
    assert images(tmp_path) == [] and read_rows(tmp_path / "out" / "generations.csv") == []


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "RequestRejectedError"),
        (401, "AuthenticationError"),
        (404, "RequestRejectedError"),
        (422, "RequestRejectedError"),
    ],
)
async def test_client_errors_are_never_retried(
    tmp_path: Path, allow_loopback: None, status: int, kind: str
) -> None:
    with OpenAIServer(offline=True) as server:
        server.rule(idea(IDEA_B_SEED), *[Reply(status=status)] * 5)
        with pytest.raises(RunFailed) as caught:
            await run_with(tmp_path, server, *SCORING)
        hits = [r for r in server.requests if idea(IDEA_B_SEED)(r)]
    assert len(hits) == 1
    (t,) = transcripts(tmp_path)
    assert (t["error"]["type"], t["error"]["status"], t["error"]["attempts"]) == (kind, status, 1)
    assert t["error"]["path"] == IDEA_B
    if status == 401:
        assert "OPENAI_API_KEY" in str(caught.value)
    else:
        assert "not retried" in str(caught.value)


# --- retry storms -----------------------------------------------------------------------------


async def test_twenty_concurrent_429s_stay_within_the_limiter_and_the_attempt_budget(
    tmp_path: Path, allow_loopback: None
) -> None:
    ideas, limit, attempts = 20, 4, 3
    is_idea = idea_card_request
    with OpenAIServer(offline=True) as server:
        # Every idea call is rate limited twice (40 refusals), each call by its own rule so that
        # no call can draw a third 429 from a shared queue. The first refusals are held until
        # the limiter's worth of idea calls is in flight together, so the calls overlap by
        # construction, however slowly this machine gets them out (no wall-clock race).
        first_round = threading.Event()
        for card in range(ideas):
            server.rule(
                idea(derive_seed(77, "step", "idea", chr(ord("A") + card))),
                Reply(status=429, headers={"Retry-After": "2"}, wait_for=first_round),
                Reply(status=429, headers={"Retry-After": "2"}),
            )
        sleep = RecordingSleep()
        async with http_backends(
            server, sleep, max_concurrency=limit, max_attempts=attempts
        ) as backends:
            cfg = make_cfg(
                tmp_path, "prompt.scoring.enabled=true", f"prompt.scoring.num_ideas={ideas}"
            )
            assert isinstance(backends.text, OpenAITextBackend)
            limiter = backends.text.transport.limiter
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_generation, cfg, backends)
                try:
                    # Waits for the arrivals (the server's default bound only ends a broken run).
                    together = await anyio.to_thread.run_sync(
                        functools.partial(server.wait_for_in_flight, limit, where=is_idea),
                        abandon_on_cancel=True,
                    )
                    held_in_flight, held_borrowed = server.in_flight, limiter.borrowed_tokens
                finally:
                    first_round.set()
        (t,) = transcripts(tmp_path)
        idea_requests = [r for r in server.requests if is_idea(r)]
        peak = server.max_in_flight
    assert together, "the limiter's worth of idea calls never was in flight at once"
    assert held_in_flight == held_borrowed == limit  # the calls overlap, up to the limiter
    assert peak == limit  # and never beyond it
    assert len(idea_requests) == ideas * attempts  # each: two 429s, then the answer
    assert len(server.requests) <= len(attempts_by_path(t)) * attempts + 1  # +1: the image
    idea_attempts = [n for p, n in attempts_by_path(t).items() if "/ideas/" in p]
    assert idea_attempts == [attempts] * ideas
    assert len(sleep.waits) == 2 * ideas
    assert all(2.0 <= w <= 2.2 for w in sleep.waits)
    assert len(set(sleep.waits)) == len(sleep.waits)  # spread, not a herd in lockstep
