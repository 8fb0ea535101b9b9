"""The package's fake OpenAI server (``image_project.testing.OpenAIServer``) behaves the same
served in-process on its threaded server and under uvicorn by the benchmarks
(``bench/simulator.py``: ``UvicornServer``): the same answers, records, rate limits and
headers. Plain HTTP from the standard library; no timing is asserted."""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from image_project._fake_openai import OpenAIServer, Reply, chat_completion
from tests.support.openai_server import RateWindow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

if TYPE_CHECKING:  # mypy sees the real module (bench/ is on its path; see pyproject.toml)
    from simulator import FixedWindow, LognormalLatency, UvicornServer
else:
    simulator = pytest.importorskip("simulator")
    FixedWindow = simulator.FixedWindow
    LognormalLatency = simulator.LognormalLatency
    UvicornServer = simulator.UvicornServer

Serve = Callable[[UvicornServer], AbstractContextManager[str]]


@contextmanager
def threaded(server: OpenAIServer) -> Iterator[str]:
    with server:
        yield server.base_url


@contextmanager
def under_uvicorn(server: UvicornServer) -> Iterator[str]:
    pytest.importorskip("uvicorn")
    with server.serve() as base_url:
        yield base_url


TRANSPORTS = [pytest.param(threaded, id="threaded"), pytest.param(under_uvicorn, id="uvicorn")]


def post(base_url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    """POST ``body`` as JSON; the status, the headers (lower-case names) and the JSON answer."""
    request = urllib.request.Request(
        base_url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, headers, data = answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        status, headers, data = error.code, error.headers, error.read()
    return status, {k.lower(): v for k, v in headers.items()}, json.loads(data)


def chat(seed: int, text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": "m", "seed": seed, "messages": [{"role": "user", "content": text}], **extra}


@pytest.mark.parametrize("serve", TRANSPORTS)
def test_offline_answers_and_call_records_are_the_same_on_both_transports(serve: Serve) -> None:
    server = UvicornServer(offline=True)
    with serve(server) as base_url:
        status, _, answer = post(base_url, "/chat/completions", chat(3, "a harbour at dusk"))
        image_status, _, image = post(
            base_url, "/images/generations", {"model": "i", "prompt": "p", "size": "64x48"}
        )
    assert (status, image_status) == (200, 200)
    reference = OpenAIServer(offline=True)
    with threaded(reference) as base_url:
        _, _, expected = post(base_url, "/chat/completions", chat(3, "a harbour at dusk"))
    assert answer["choices"] == expected["choices"] and answer["usage"] == expected["usage"]
    assert image["data"][0]["b64_json"]
    assert [(r.kind, r.seed, r.status) for r in server.records] == [
        ("chat", 3, 200),
        ("image", None, 200),
    ]
    assert [(r.method, r.route, r.status) for r in server.requests] == [
        ("POST", "/v1/chat/completions", 200),
        ("POST", "/v1/images/generations", 200),
    ]


@pytest.mark.parametrize("serve", TRANSPORTS)
def test_scripted_replies_and_rules_answer_on_both_transports(serve: Serve) -> None:
    server = UvicornServer()
    server.rule(lambda r: r.seed == 9, Reply(body=chat_completion("ruled")))
    server.script(Reply(status=503), Reply(body=chat_completion("scripted")))
    with serve(server) as base_url:
        first = post(base_url, "/chat/completions", chat(1))
        ruled = post(base_url, "/chat/completions", chat(9))
        second = post(base_url, "/chat/completions", chat(2))
        default = post(base_url, "/chat/completions", chat(3))
    assert first[0] == 503 and first[2]["error"]["type"] == "scripted_error"
    assert ruled[2]["choices"][0]["message"]["content"] == "ruled"
    assert second[2]["choices"][0]["message"]["content"] == "scripted"
    assert default[2]["choices"][0]["message"]["content"] == "ok"
    assert server.unused_replies == 0
    assert [r.status for r in server.requests] == [503, 200, 200, 200]


@pytest.mark.parametrize("serve", TRANSPORTS)
@pytest.mark.parametrize("window", ["fixed", "refilling"])
def test_a_rate_limit_refuses_the_request_over_it_with_openai_s_headers(
    serve: Serve, window: str
) -> None:
    """Two requests per hour: the third is a 429 ``rate_limit_exceeded`` saying when to come
    back; every answer carries ``x-ratelimit-*``; the refused call is recorded without its
    body or latency."""
    limit = FixedWindow(2, 3600.0) if window == "fixed" else RateWindow(2, 3600.0)
    server = UvicornServer(rate_window=limit)
    with serve(server) as base_url:
        answers = [post(base_url, "/chat/completions", chat(i)) for i in range(3)]
    assert [status for status, _, _ in answers] == [200, 200, 429]
    assert all(h["x-ratelimit-limit-requests"] == "2" for _, h, _ in answers)
    assert [h["x-ratelimit-remaining-requests"] for _, h, _ in answers] == ["1", "0", "0"]
    _, refused_headers, refusal = answers[2]
    assert refusal["error"]["code"] == "rate_limit_exceeded"
    assert int(refused_headers["retry-after-ms"]) > 0
    last = server.records[-1]
    assert (last.status, last.body, last.latency_s, last.structured) == (429, None, 0.0, False)


@pytest.mark.parametrize("serve", TRANSPORTS)
def test_latencies_come_from_the_model_keyed_by_the_request_body(serve: Serve) -> None:
    """A zero-median model still goes through the model (latency 0 for every call); the
    draws for non-zero medians are a function of the body alone."""
    server = UvicornServer(offline=True, latency=LognormalLatency(0.0, 0.0))
    with serve(server) as base_url:
        post(base_url, "/chat/completions", chat(1))
    assert [r.latency_s for r in server.records] == [0.0]
    model = LognormalLatency(0.4, 2.0)
    body = json.dumps(chat(1)).encode()
    assert model("chat", body) == LognormalLatency(0.4, 2.0)("chat", body)
    assert model("chat", body) != model("chat", json.dumps(chat(2)).encode())


def test_holding_and_dropping_a_connection_need_the_threaded_server() -> None:
    """``wait_for`` holds a request until the test lets it go (no sleep); ``disconnect`` cuts
    the connection without an answer. Under uvicorn both are answered with a 500 saying so."""
    release = threading.Event()
    server = OpenAIServer()
    server.script(Reply(wait_for=release), Reply(disconnect=True))
    with server:
        answers: list[int] = []
        held = threading.Thread(
            target=lambda: answers.append(post(server.base_url, "/chat/completions", chat(1))[0])
        )
        held.start()
        assert server.wait_for_in_flight(1)
        assert answers == []
        release.set()
        held.join(timeout=30)
        assert answers == [200]
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            post(server.base_url, "/chat/completions", chat(2))
    assert [r.status for r in server.requests] == [200, None]
    pytest.importorskip("uvicorn")
    uvicorn_server = UvicornServer()
    uvicorn_server.script(Reply(disconnect=True))
    with uvicorn_server.serve() as base_url:
        status, _, answer = post(base_url, "/chat/completions", chat(3))
    assert status == 500 and "needs the threaded server" in answer["error"]["message"]
