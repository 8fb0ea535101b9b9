"""The one fake OpenAI-compatible server: tests, ``image_project.testing`` and the benchmarks.

Internal module; its public names are re-exported by :mod:`image_project.testing`.

:class:`OpenAIServer` answers ``POST /v1/chat/completions``, ``POST /v1/images/generations``
and ``GET /v1/models`` on 127.0.0.1 (a free port), in one of two ways:

* ``with OpenAIServer() as server:`` serves it in-process on a stdlib
  :class:`http.server.ThreadingHTTPServer` (no dependency): every feature below, including
  the ones that hold or drop a connection (:attr:`OpenAIServer.gate`, ``Reply.wait_for``,
  ``Reply.disconnect``). Point a client at ``server.base_url``.
* ``with server.serve_uvicorn() as base_url:`` serves the same object as an ASGI app under
  uvicorn in a background thread, and :class:`OpenAIServerProcess` (``python -m
  image_project._fake_openai``) in its own process, driven through a side door
  (``/_control/...``): what the benchmarks use, so the server's CPU time does not compete with
  the client's. uvicorn is in the ``bench`` extra.

What it answers:

* Every request is answered by the first rule that matches it (:meth:`OpenAIServer.rule`: a
  predicate on the request and its own queue of replies; for concurrent calls, whose arrival
  order is not fixed), else by the next scripted :class:`Reply` (one FIFO for all paths,
  :meth:`OpenAIServer.script`), else by a valid default answer (404 for unknown paths). The
  default text is ``text``, or with ``offline=True`` the offline backend's answer to the
  request (schema-valid JSON for structured outputs, an image of the requested size), so a
  whole pipeline can run on it.
* Latency: ``latency_s`` makes every default answer take that long; ``latency`` (a
  :class:`LognormalLatency`) draws each request's latency from a generator seeded with the
  SHA-256 of its body (or of its call identity), so the same request costs the same in every
  run. A reply can carry a status, headers, a JSON body, a delay, an event to wait for, or
  ``disconnect=True``; ``raw`` sends those bytes instead of JSON (:data:`HTML_PAGE`,
  :func:`truncated`).
* Rate limits (``rate_window``): :class:`RateWindow` is OpenAI's continuously refilled quota
  (every answer carries the ``x-ratelimit-*`` headers; a request over it gets a 429
  ``rate_limit_exceeded`` with ``retry-after-ms`` and ``Retry-After``); :class:`FixedWindow`
  counts requests per fixed window (the benchmarks' limit). A refused request is answered at
  once, before any rule or script is consulted.
* Records: :attr:`OpenAIServer.requests` (each :class:`RecordedRequest` as it arrived, its
  status once answered) and :attr:`OpenAIServer.records` (a :class:`CallRecord` per answered
  completion or image call, with server-side ``time.time`` stamps and the latency slept).
  The number of requests in flight is tracked with its maximum;
  :meth:`OpenAIServer.wait_for_in_flight` / ``wait_for_requests`` let a test synchronise on
  arrivals instead of sleeping.
* ``GET /models`` (the CLI's pre-flight probe) is answered apart: with ``models=[...]`` as
  that model list, else 404 (no list: the probe passes); it is counted in
  :attr:`OpenAIServer.model_listings`, not recorded in ``requests``, and consumes no script;
  the replies queued in :attr:`OpenAIServer.model_list_faults` are answered to it first.

:class:`image_project.testing.StrictLocalServer` is this server answering like llama.cpp's
``llama-server`` with a strict chat template. Waits inside the threaded server also wake on
shutdown, so stopping never hangs on a held request.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import math
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Protocol, Self

import anyio
from PIL import Image

from image_project.backends.base import JsonSchema, Message, TextRequest, Usage
from image_project.backends.offline import OfflineTextBackend, parse_size

__all__ = [
    "HTML_PAGE",
    "TINY_PNG",
    "WAIT_BOUND_S",
    "CallRecord",
    "FixedWindow",
    "LognormalLatency",
    "OpenAIServer",
    "OpenAIServerProcess",
    "RateLimit",
    "RateWindow",
    "RecordedRequest",
    "Reply",
    "chat_completion",
    "error_body",
    "image_response",
    "main",
    "offline_chat_completion",
    "offline_images_response",
    "openai_duration",
    "truncated",
]

TINY_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""A valid 1x1 PNG: the default image the server returns."""

_POLL_S = 0.02

WAIT_BOUND_S = 60.0
"""How long :meth:`OpenAIServer.wait_for_in_flight` / ``wait_for_requests`` wait by default:
a bound that only ends a broken test, never a timing assertion (5 s was within reach of a
loaded 2-core machine starting a few calls)."""

HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n"
    b"<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>\n"
)
"""What a reverse proxy answers, with status 200 in the tests, when the upstream is gone."""

Kind = Literal["chat", "image"]


# --------------------------------------------------------------------------- wire bodies


@dataclass(frozen=True)
class Reply:
    """One scripted answer.

    ``body`` None means the path's default answer for a 2xx status and an OpenAI-shaped
    error body for any other status. ``raw`` (bytes) replaces the JSON body entirely and is
    sent with ``content_type`` (None: no Content-Type header). ``wait_for`` and
    ``disconnect`` need the threaded server (``with OpenAIServer():``).
    """

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    wait_for: threading.Event | None = None
    disconnect: bool = False
    raw: bytes | None = None
    content_type: str | None = "application/json"


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it; ``status`` is the one it answered with (None
    while it is in flight, or when the connection was dropped)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    status: int | None = None
    raw: bytes = field(default=b"", repr=False)
    """The body's bytes as they came."""

    @property
    def route(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    @property
    def schema_name(self) -> str | None:
        """The ``response_format.json_schema.name`` of a structured chat request."""
        if not isinstance(self.body, dict):
            return None
        fmt = self.body.get("response_format") or {}
        name = (fmt.get("json_schema") or {}).get("name")
        return name if isinstance(name, str) else None

    @property
    def seed(self) -> int | None:
        seed = self.body.get("seed") if isinstance(self.body, dict) else None
        return seed if isinstance(seed, int) else None

    @property
    def is_image(self) -> bool:
        return self.route.endswith("/images/generations")

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles of a chat request's messages, in order."""
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        return tuple(str(m.get("role")) for m in messages or () if isinstance(m, dict))

    @property
    def token_limit(self) -> int | None:
        """``max_completion_tokens``, else ``max_tokens``, as sent (None: no limit)."""
        if not isinstance(self.body, dict):
            return None
        limit = self.body.get("max_completion_tokens", self.body.get("max_tokens"))
        return limit if isinstance(limit, int) else None


@dataclass(frozen=True)
class CallRecord:
    """One completion or image call as the server answered it (``time.time`` seconds: one
    clock for every process on the machine, so a benchmark can place a call served by another
    process on its own time axis)."""

    kind: str  # "chat" | "image"
    seed: int | None
    latency_s: float  # the latency the server waited before answering
    started: float
    finished: float
    structured: bool
    body: dict[str, Any] | None = None  # the request's JSON (a refused request: None)
    status: int = 200  # 429: refused by the rate limit (no latency waited)


def chat_completion(
    content: str | None = "ok",
    *,
    model: str = "test-model",
    refusal: str | None = None,
    finish_reason: str = "stop",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    system_fingerprint: str | None = "fp_test",
) -> dict[str, Any]:
    """A valid ``chat.completion`` body."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": system_fingerprint,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def image_response(
    data: bytes | None = TINY_PNG,
    *,
    revised_prompt: str | None = None,
    output_format: str | None = "png",
    url: str | None = None,
) -> dict[str, Any]:
    """A valid ``images.generate`` body (``data`` None leaves ``b64_json`` out)."""
    item: dict[str, Any] = {}
    if data is not None:
        item["b64_json"] = base64.b64encode(data).decode("ascii")
    if revised_prompt is not None:
        item["revised_prompt"] = revised_prompt
    if url is not None:
        item["url"] = url
    body: dict[str, Any] = {"created": int(time.time()), "data": [item]}
    if output_format is not None:
        body["output_format"] = output_format
    return body


def truncated(body: Any, keep: float = 0.5) -> bytes:
    """The first ``keep`` share of ``body`` as JSON bytes: a body cut off in transit."""
    data = json.dumps(body).encode("utf-8")
    return data[: max(1, int(len(data) * keep))]


def error_body(
    message: str, *, type: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    """An OpenAI-shaped error body."""
    return {"error": {"message": message, "type": type, "param": None, "code": code}}


def openai_duration(seconds: float) -> str:
    """A duration the way OpenAI writes ``x-ratelimit-reset-*``: ``20ms``, ``1.5s``, ``6m0s``
    (rounded up to the millisecond, so a client waiting that long is never early)."""
    millis = max(0, math.ceil(seconds * 1000 - 1e-6))
    if millis < 1000:
        return f"{millis}ms"
    minutes, millis = divmod(millis, 60_000)
    secs = f"{millis / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


_OFFLINE_TEXT = OfflineTextBackend()


async def offline_chat_completion(
    payload: Mapping[str, Any], *, model_error: float | None = None
) -> dict[str, Any]:
    """A ``chat.completion`` body answering the request body ``payload`` with the offline
    backend's deterministic text; a strict ``json_schema`` response format gets
    schema-valid JSON. ``model_error``: the offline judges' shared per-model error
    (``OfflineTextBackend(model_error=...)``; None = its default)."""
    fmt = payload.get("response_format") or {}
    schema = None
    if fmt.get("type") == "json_schema":
        spec = fmt["json_schema"]
        schema = JsonSchema(spec["name"], spec["schema"], bool(spec.get("strict", True)))
    backend = _OFFLINE_TEXT if model_error is None else OfflineTextBackend(model_error=model_error)
    reply = await backend.complete(
        TextRequest(
            messages=tuple(Message(m["role"], m["content"]) for m in payload["messages"]),
            temperature=float(payload.get("temperature", 1.0)),
            model=payload.get("model"),
            seed=payload.get("seed"),
            json_schema=schema,
        )
    )
    usage = reply.usage or Usage()
    return {
        "id": "chatcmpl-offline",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": payload.get("model", "offline"),
        "system_fingerprint": "fp_offline",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text, "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    }


def offline_images_response(payload: Mapping[str, Any]) -> dict[str, Any]:
    """An ``images.generate`` body: a base64 PNG gradient of the requested size."""
    return {
        "created": int(time.time()),
        "data": [{"b64_json": _gradient_png_b64(parse_size(str(payload.get("size") or "auto")))}],
        "output_format": "png",
    }


@functools.lru_cache(maxsize=8)
def _gradient_png_b64(size: tuple[int, int]) -> str:
    buf = io.BytesIO()
    Image.linear_gradient("L").resize(size).convert("RGB").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


# --------------------------------------------------------------------------- latency


@dataclass
class LognormalLatency:
    """Each request's latency: log-normal (median ``chat_median_s`` or ``image_median_s``,
    ``sigma``, clipped to [0.25, 4] x median) drawn from a ``random.Random`` seeded with the
    SHA-256 of the request body, so the same request costs the same in every run and mode.

    ``key = "call"`` seeds the draw with the call's identity instead of its whole body: the
    endpoint, the model and the API ``seed`` (an image request, which has none, is keyed by
    model, size and quality); a step then costs the same whatever text it carries.
    """

    chat_median_s: float = 0.4
    image_median_s: float = 2.0
    sigma: float = 0.35
    key: str = "body"  # "body" | "call"

    def key_for(self, kind: str, body: bytes) -> bytes:
        """The bytes that seed a request's latency draw (see ``key``)."""
        if self.key == "body":
            return body
        if self.key != "call":
            raise ValueError(f"latency_key must be 'body' or 'call', got {self.key!r}")
        payload = json.loads(body or b"{}")
        identity = [kind, payload.get("model")]
        if kind == "chat" and payload.get("seed") is not None:
            identity.append(payload["seed"])
        elif kind == "image":
            identity += [payload.get("size"), payload.get("quality")]
        else:  # a chat call without a seed has no identity but its content
            return body
        return json.dumps(identity).encode()

    def __call__(self, kind: str, body: bytes) -> float:
        median = self.chat_median_s if kind == "chat" else self.image_median_s
        if median <= 0:
            return 0.0
        key = self.key_for(kind, body)
        rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))
        value = rng.lognormvariate(math.log(median), self.sigma)
        return min(4 * median, max(0.25 * median, value))


# --------------------------------------------------------------------------- rate limits


class RateLimit(Protocol):
    """A request quota: whether a request is admitted, and the headers its answer carries."""

    def clock(self) -> float:
        """The clock :meth:`admit` is given."""
        ...

    def admit(self, now: float) -> tuple[bool, dict[str, str]]:
        """Whether a request arriving at ``now`` is accepted, and the headers of its answer
        (for a refusal, the 429's)."""
        ...

    def refusal_body(self) -> dict[str, Any]:
        """The body of a 429 for the request :meth:`admit` just refused."""
        ...

    def answer_headers(self, admitted: dict[str, str]) -> dict[str, str]:
        """The rate headers of an accepted request's answer, as it is sent."""
        ...


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


class FixedWindow:
    """``limit`` requests per fixed window of ``window_s`` seconds, the windows counted from
    the moment it is made (``time.time``), a request counted when it arrives. A request over
    it is refused with ``retry-after-ms`` the rest of the window and OpenAI's error code
    ``rate_limit_exceeded``. Every answer carries OpenAI's ``x-ratelimit-limit-requests`` /
    ``-remaining-requests`` / ``-reset-requests`` headers for the window current when it is
    sent. OpenAI says a per-minute limit may be enforced over shorter periods (60,000 RPM as
    1,000 a second); the window here is such a period, and its headers describe it."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit, self.window_s = limit, window_s
        self._window = (-1, 0)  # (window number, requests counted in it)
        self._t0 = time.time()

    def clock(self) -> float:
        return time.time()

    def window_now(self) -> tuple[int, float]:
        """The current window's number and the seconds until it ends."""
        elapsed = time.time() - self._t0
        number = int(elapsed // self.window_s)
        return number, (number + 1) * self.window_s - elapsed

    def count(self) -> bool:
        """Count a request in the current window; False when the window is full."""
        number, _ = self.window_now()
        counted = self._window[1] if self._window[0] == number else 0
        if counted >= self.limit:
            self._window = (number, counted)
            return False
        self._window = (number, counted + 1)
        return True

    def headers(self) -> dict[str, str]:
        """The ``x-ratelimit-*`` headers for the window current now."""
        number, left = self.window_now()
        used = self._window[1] if self._window[0] == number else 0
        return {
            "x-ratelimit-limit-requests": str(self.limit),
            "x-ratelimit-remaining-requests": str(max(0, self.limit - used)),
            "x-ratelimit-reset-requests": f"{left:.3f}s",
        }

    def admit(self, now: float) -> tuple[bool, dict[str, str]]:
        if self.count():
            return True, {}
        _, left = self.window_now()
        return False, {"retry-after-ms": f"{left * 1000:.0f}", **self.headers()}

    def refusal_body(self) -> dict[str, Any]:
        error = {"message": "Rate limit reached for requests", "type": "requests"}
        return {"error": {**error, "code": "rate_limit_exceeded"}}

    def answer_headers(self, admitted: dict[str, str]) -> dict[str, str]:
        return self.headers()


# --------------------------------------------------------------------------- the server


@dataclass
class _Answer:
    """What the server sends back for one request (``data`` None: no answer, drop it)."""

    status: int
    data: bytes | None
    content_type: str | None
    headers: Mapping[str, str]


class OpenAIServer:
    """The fake OpenAI-compatible server; see the module docstring."""

    content_type = "application/json"
    """The Content-Type of its JSON answers."""

    record_model_listings = False
    """Whether ``GET /models`` is recorded in :attr:`requests` too."""

    def __init__(
        self,
        *,
        text: str = "ok",
        image: bytes = TINY_PNG,
        offline: bool = False,
        offline_model_error: float | None = None,
        latency_s: float = 0.0,
        latency: Callable[[str, bytes], float] | None = None,
        rate_window: RateLimit | None = None,
        models: Sequence[str] | None = None,
    ) -> None:
        self.models = None if models is None else tuple(models)
        self.model_listings = 0
        self.model_list_faults: collections.deque[Reply] = collections.deque()
        self.default_text = text
        self.default_image = image
        self.offline = offline
        self.offline_model_error = offline_model_error
        self.latency_s = latency_s
        self.latency = latency
        self.rate_window = rate_window
        self.gate: threading.Event | None = None
        self.records: list[CallRecord] = []
        self._script: collections.deque[Reply] = collections.deque()
        self._rules: list[tuple[Callable[[RecordedRequest], bool], collections.deque[Reply]]] = []
        self._requests: list[RecordedRequest] = []
        self._cond = threading.Condition()
        self._in_flight = 0
        self._in_flight_requests: list[RecordedRequest] = []
        self._max_in_flight = 0
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._base_url: str | None = None

    # lifecycle (threaded, in-process) ----------------------------------------------------

    def start(self) -> Self:
        """Serve on a stdlib threaded HTTP server in a daemon thread."""
        owner: OpenAIServer = self

        class Handler(_Handler):
            server_owner = owner

        self._stopping.clear()
        self._httpd = _QuietHTTPServer(("127.0.0.1", 0), Handler)
        self._base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": _POLL_S},
            name="openai-test-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._base_url is None:
            raise RuntimeError("server not started")
        return int(self._base_url.rsplit(":", 1)[1].split("/", 1)[0])

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("server not started")
        return self._base_url

    # lifecycle (uvicorn) -----------------------------------------------------------------

    @contextlib.contextmanager
    def serve_uvicorn(self) -> Iterator[str]:
        """Serve this server as an ASGI app under uvicorn on 127.0.0.1 (a free port) in a
        background thread; yields the base URL. Needs the ``bench`` extra (uvicorn)."""
        uvicorn = _import_uvicorn()
        sock = _listening_socket()
        port = sock.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(self, lifespan="off", log_level="warning", access_log=False)
        )
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the fake OpenAI server did not start under uvicorn")
            time.sleep(0.01)
        self._base_url = f"http://127.0.0.1:{port}/v1"
        try:
            yield self._base_url
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            sock.close()

    # scripting and inspection ------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one (then defaults)."""
        with self._cond:
            self._script.extend(replies)

    def rule(self, when: Callable[[RecordedRequest], bool], *replies: Reply) -> None:
        """Requests for which ``when(request)`` is true take these replies, in order, before
        the FIFO script; once they are used up such requests fall through as usual."""
        with self._cond:
            self._rules.append((when, collections.deque(replies)))

    def reset(self) -> None:
        """Forget the requests and call records received so far."""
        with self._cond:
            self._requests.clear()
            self.records.clear()

    def set_rate_limit(self, limit: int, window_s: float) -> None:
        """``limit`` requests per fixed window of ``window_s`` seconds from now (0: none)."""
        self.rate_window = FixedWindow(limit, window_s) if limit else None

    @property
    def unused_replies(self) -> int:
        with self._cond:
            return len(self._script) + sum(len(queue) for _, queue in self._rules)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._cond:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.route.endswith("/chat/completions")]

    @property
    def request_bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        with self._cond:
            return self._max_in_flight

    def wait_for_in_flight(
        self,
        count: int,
        timeout: float = WAIT_BOUND_S,
        where: Callable[[RecordedRequest], bool] | None = None,
    ) -> bool:
        """Block until at least ``count`` requests (those matching ``where``, if given) are in
        flight; False on timeout (:data:`WAIT_BOUND_S` unless given)."""

        def arrived() -> bool:
            if where is None:
                return self._in_flight >= count
            return sum(1 for r in self._in_flight_requests if where(r)) >= count

        with self._cond:
            return self._cond.wait_for(arrived, timeout=timeout)

    def wait_for_requests(self, count: int, timeout: float = WAIT_BOUND_S) -> bool:
        """Block until at least ``count`` requests have arrived; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._requests) >= count, timeout=timeout)

    # what to answer (both transports) ----------------------------------------------------

    def _arrive(self, request: RecordedRequest) -> tuple[Reply | None, dict[str, str] | None]:
        """Record ``request`` as arrived and in flight; its reply (None: the default answer)
        and the rate headers to add to it (None: refused by the quota, the reply is the 429).
        A request over the quota is refused here, before any rule or script."""
        with self._cond:
            self._requests.append(request)
            window_headers: dict[str, str] | None = {}
            window = self.rate_window
            reply: Reply | None = None
            if window is not None:
                accepted, headers = window.admit(window.clock())
                if accepted:
                    window_headers = headers
                else:
                    reply = Reply(status=429, body=window.refusal_body(), headers=headers)
                    window_headers = None
            if reply is None:
                reply = self._next_reply(request)
            self._in_flight += 1
            self._in_flight_requests.append(request)
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            self._cond.notify_all()
        return reply, window_headers

    def _rate_headers(self, admitted: dict[str, str] | None) -> dict[str, str]:
        """The rate headers of an answer as it is sent ({} for a refusal: its reply has
        them)."""
        window = self.rate_window
        if admitted is None or window is None:
            return {}
        return window.answer_headers(admitted)

    def _next_reply(self, request: RecordedRequest) -> Reply | None:
        for when, queue in self._rules:
            if queue and when(request):
                return queue.popleft()
        return self._script.popleft() if self._script else None

    def _done(self, request: RecordedRequest, status: int | None) -> None:
        """No longer in flight (counted *before* the answer is written: once the client has
        it, it may start another request, which must not see this one in flight)."""
        with self._cond:
            self._in_flight -= 1
            self._in_flight_requests = [r for r in self._in_flight_requests if r is not request]
            if status is not None:
                for i in range(len(self._requests) - 1, -1, -1):
                    if self._requests[i] is request:
                        self._requests[i] = dataclasses.replace(request, status=status)
                        break
            self._cond.notify_all()

    def _delay(self, request: RecordedRequest, reply: Reply | None, raw: bytes) -> float:
        if reply is not None:
            return reply.delay_s
        kind = _kind(request.route)
        if self.latency is not None and kind is not None:
            return self.latency(kind, raw)
        return self.latency_s

    def _encode(
        self, status: int, payload: Any, reply: Reply | None, headers: Mapping[str, str]
    ) -> _Answer:
        if reply is not None and reply.raw is not None:
            return _Answer(status, reply.raw, reply.content_type, headers)
        return _Answer(status, json.dumps(payload).encode("utf-8"), self.content_type, headers)

    async def _payload(
        self, request: RecordedRequest, reply: Reply | None
    ) -> tuple[int, Any, Mapping[str, str]]:
        """The status, JSON body and headers of the answer to ``request``."""
        status = reply.status if reply is not None else 200
        headers: Mapping[str, str] = reply.headers if reply is not None else {}
        if reply is not None and reply.body is not None:
            return status, reply.body, headers
        if status >= 400:
            return status, error_body(f"scripted HTTP {status}", type="scripted_error"), headers
        default_status, payload = await self.default_answer(request)
        return (default_status if reply is None else status), payload, headers

    async def default_answer(self, request: RecordedRequest) -> tuple[int, Any]:
        """The answer to a request no rule or script answers: the offline backend's (with
        ``offline=True``), else ``text`` / ``image``; 404 for an unknown path."""
        route = request.route
        body = request.body
        if self.offline and isinstance(body, dict):
            if route.endswith("/chat/completions"):
                return 200, await offline_chat_completion(
                    body, model_error=self.offline_model_error
                )
            if route.endswith("/images/generations"):
                return 200, offline_images_response(body)
        model = body.get("model") if isinstance(body, dict) else None
        if route.endswith("/chat/completions"):
            return 200, chat_completion(self.default_text, model=model or "test-model")
        if route.endswith("/images/generations"):
            return 200, image_response(self.default_image)
        return 404, error_body(f"no such path {route!r}", type="not_found")

    def model_list(self) -> tuple[int, Any]:
        """The answer to ``GET /models`` when no fault is queued."""
        if self.models is None:
            return 404, error_body("no such path '/v1/models'", type="not_found")
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in self.models]
        return 200, {"object": "list", "data": data}

    def _list_models(self, request: RecordedRequest) -> _Answer:
        """``GET /models``: counted in :attr:`model_listings`, never consuming a scripted
        reply or rule; a queued fault first."""
        with self._cond:
            self.model_listings += 1
            fault = self.model_list_faults.popleft() if self.model_list_faults else None
        if fault is not None and fault.disconnect:
            return _Answer(0, None, None, {})  # no answer at all: a reset for the client
        if fault is not None:
            payload = fault.body if fault.body is not None else error_body("try later")
            status, headers = fault.status, dict(fault.headers)
        else:
            (status, payload), headers = self.model_list(), {}
        if self.record_model_listings:
            with self._cond:
                self._requests.append(dataclasses.replace(request, status=status))
        return _Answer(status, json.dumps(payload).encode("utf-8"), self.content_type, headers)

    def _record_call(
        self, request: RecordedRequest, latency_s: float, started: float, status: int
    ) -> None:
        kind = _kind(request.route)
        if kind is None:
            return
        body = request.body if isinstance(request.body, dict) else None
        record = CallRecord(
            kind=kind,
            seed=body.get("seed") if body is not None else None,
            latency_s=latency_s,
            started=started,
            finished=time.time(),
            structured=status != 429
            and kind == "chat"
            and body is not None
            and "response_format" in body,
            body=body if status != 429 else None,
            status=status,
        )
        with self._cond:
            self.records.append(record)

    # threaded transport (server threads) -------------------------------------------------

    def _wait(self, event: threading.Event) -> None:
        while not event.wait(_POLL_S):
            if self._stopping.is_set():
                return

    def _handle(self, handler: _Handler) -> None:
        request = _recorded(handler.command, handler.path, dict(handler.headers.items()), b"")
        if handler.command == "GET" and request.route.endswith("/models"):
            _write(handler, self._list_models(request))
            return
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        request = _recorded(handler.command, handler.path, dict(handler.headers.items()), raw)
        started = time.time()
        reply, admitted = self._arrive(request)
        status: int | None = None
        delay = 0.0
        try:
            gate = self.gate
            if gate is not None:
                self._wait(gate)
            if reply is not None and reply.wait_for is not None:
                self._wait(reply.wait_for)
            delay = self._delay(request, reply, raw)
            if delay > 0:
                self._stopping.wait(delay)
            status, payload, headers = anyio.run(self._payload, request, reply)
            answer = self._encode(
                status, payload, reply, {**self._rate_headers(admitted), **headers}
            )
        finally:
            dropped = reply is not None and reply.disconnect
            self._done(request, None if dropped else status)
        if reply is not None and reply.disconnect:
            handler.close_connection = True
            return
        self._record_call(request, delay if admitted is not None else 0.0, started, status)
        _write(handler, answer)

    # ASGI transport (uvicorn) ------------------------------------------------------------

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        method, path = scope["method"], scope["path"].rstrip("/")
        if path.startswith("/_control"):
            await _respond(send, self._control(method, path, raw))
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if method == "GET" and path.endswith("/models"):
            await _respond(send, self._list_models(_recorded(method, path, headers, b"")))
            return
        started = time.time()
        try:
            payload = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            await _respond(send, _json_answer(400, {"error": {"message": "invalid JSON body"}}))
            return
        if method != "POST" or _kind(path) is None:
            error = {"error": {"message": f"no route {scope['path']}"}}
            await _respond(send, _json_answer(404, error))
            return
        request = RecordedRequest(method, scope["path"], headers, payload)
        await _respond(send, await self._serve_call(request, raw, started))

    async def _serve_call(self, request: RecordedRequest, raw: bytes, started: float) -> _Answer:
        """Answer a completion or image call under uvicorn. The default answer first, then
        the quota: the order the benchmarks' figures were measured with (the answer's CPU
        time counts within the simulated latency)."""
        default = await self.default_answer(request) if self.offline else None
        reply, admitted = self._arrive(request)
        status: int | None = None
        try:
            if reply is not None and (reply.wait_for is not None or reply.disconnect):
                status = 500
                message = "Reply(wait_for=..., disconnect=True) needs the threaded server"
                return _json_answer(500, error_body(message, type="fake_server_error"))
            if admitted is None:  # refused by the quota: at once
                assert reply is not None
                latency, status = 0.0, reply.status
                answer = self._encode(status, reply.body, None, dict(reply.headers))
            else:
                latency = self._delay(request, reply, raw)
                await asyncio.sleep(max(0.0, latency - (time.time() - started)))
                extra: Mapping[str, str] = {}
                if reply is None and default is not None:
                    status, body = default
                else:
                    status, body, extra = await self._payload(request, reply)
                rate = self._rate_headers(admitted)
                answer = self._encode(status, body, reply, {**rate, **extra})
            self._record_call(request, latency, started, status)
        finally:
            self._done(request, status)
        return answer

    def _control(self, method: str, path: str, raw: bytes) -> _Answer:
        """The side door of a server in its own process: ``GET /_control/records``, ``POST
        /_control/reset``, ``POST /_control/latency_key``, ``POST /_control/rate_limit``."""
        if method == "GET" and path == "/_control/records":
            return _json_answer(200, {"records": [asdict(r) for r in self.records]})
        if method == "POST" and path == "/_control/reset":
            self.reset()
        elif method == "POST" and path == "/_control/latency_key":
            if not isinstance(self.latency, LognormalLatency):
                return _json_answer(409, {"error": {"message": "no latency model"}})
            self.latency.key = json.loads(raw)["latency_key"]
        elif method == "POST" and path == "/_control/rate_limit":
            limit = json.loads(raw)
            self.set_rate_limit(int(limit["limit"]), float(limit["window_s"]))
        else:
            return _json_answer(404, {"error": {"message": f"no route {path}"}})
        return _json_answer(200, {})


_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _kind(route: str) -> Kind | None:
    if route.endswith("/chat/completions"):
        return "chat"
    if route.endswith("/images/generations"):
        return "image"
    return None


def _recorded(method: str, path: str, headers: Mapping[str, str], raw: bytes) -> RecordedRequest:
    try:
        body: Any = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", "replace")
    return RecordedRequest(
        method=method,
        path=path,
        headers={k.lower(): v for k, v in headers.items()},
        body=body,
        raw=raw,
    )


def _json_answer(status: int, payload: Any) -> _Answer:
    return _Answer(status, json.dumps(payload).encode("utf-8"), "application/json", {})


def _write(handler: BaseHTTPRequestHandler, answer: _Answer) -> None:
    """Send ``answer`` through the threaded server (no data: drop the connection)."""
    if answer.data is None:
        handler.close_connection = True
        return
    try:
        handler.send_response(answer.status)
        if answer.content_type is not None:
            handler.send_header("Content-Type", answer.content_type)
        handler.send_header("Content-Length", str(len(answer.data)))
        for name, value in answer.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(answer.data)
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True


async def _respond(send: _Send, answer: _Answer) -> None:
    """Send ``answer`` through the ASGI server."""
    data = answer.data or b""
    headers = [(b"content-length", str(len(data)).encode())]
    if answer.content_type is not None:
        headers.insert(0, (b"content-type", answer.content_type.encode()))
    headers += [(k.encode(), v.encode()) for k, v in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class _QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (timeout tests) is expected; anything else is a bug here.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are two writes; with Nagle on, the body waits for the client's delayed
    # ACK (~40 ms per call), a cost of this server that real services do not have.
    disable_nagle_algorithm = True
    server_owner: OpenAIServer

    def do_POST(self) -> None:
        self.server_owner._handle(self)

    def do_GET(self) -> None:
        self.server_owner._handle(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit TCP_NODELAY on Linux. Without it the response's header and
    # body writes meet the client's delayed ACK: ~40 ms added to every call, an artefact of
    # the server that real APIs do not have.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def _import_uvicorn() -> Any:
    try:
        import uvicorn
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "serving the fake OpenAI server under uvicorn needs uvicorn, which the base "
            "install leaves out: pip install 'image-project[bench]'"
        ) from exc
    return uvicorn


class OpenAIServerProcess:
    """An :class:`OpenAIServer` with offline answers and :class:`LognormalLatency` latencies,
    served by uvicorn in its own process (``python -m image_project._fake_openai``) and driven
    through its side door: a real API runs on other machines, so the server's CPU time must
    not compete with the client's for one GIL."""

    def __init__(
        self, chat_median_s: float = 0.4, image_median_s: float = 2.0, sigma: float = 0.35
    ) -> None:
        self.chat_median_s, self.image_median_s, self.sigma = chat_median_s, image_median_s, sigma
        self.base_url = ""
        self._key = "body"

    def command(self) -> list[str]:
        """The command line that serves it."""
        return [
            sys.executable,
            "-m",
            "image_project._fake_openai",
            f"--chat-median={self.chat_median_s}",
            f"--image-median={self.image_median_s}",
            f"--sigma={self.sigma}",
        ]

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Start the server process, yield its base URL, stop it (and close its pipe)."""
        with subprocess.Popen(self.command(), stdout=subprocess.PIPE, text=True) as proc:
            try:
                assert proc.stdout is not None
                line = proc.stdout.readline().strip()
                if not line.startswith("http://"):
                    raise RuntimeError(f"the fake OpenAI server did not start (said {line!r})")
                self.base_url = line
                yield line
            finally:
                proc.terminate()
                proc.wait(timeout=10)

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        root = self.base_url.removesuffix("/v1")
        request = urllib.request.Request(f"{root}{path}", data=data, method=method)
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    @property
    def latency_key(self) -> str:
        return self._key

    @latency_key.setter
    def latency_key(self, value: str) -> None:
        self._call("POST", "/_control/latency_key", {"latency_key": value})
        self._key = value

    @property
    def records(self) -> list[CallRecord]:
        return [CallRecord(**r) for r in self._call("GET", "/_control/records")["records"]]

    def reset(self) -> None:
        self._call("POST", "/_control/reset", {})

    def set_rate_limit(self, limit: int, window_s: float) -> None:
        """``limit`` requests per ``window_s`` window from now on (0: no limit)."""
        self._call("POST", "/_control/rate_limit", {"limit": limit, "window_s": window_s})


def main(argv: list[str] | None = None) -> None:
    """Serve an offline server with log-normal latencies under uvicorn in this process until
    terminated; print the base URL first."""
    parser = argparse.ArgumentParser(description="OpenAI-compatible fake server with latencies")
    parser.add_argument("--chat-median", type=float, default=0.4)
    parser.add_argument("--image-median", type=float, default=2.0)
    parser.add_argument("--sigma", type=float, default=0.35)
    args = parser.parse_args(argv)
    server = OpenAIServer(
        offline=True, latency=LognormalLatency(args.chat_median, args.image_median, args.sigma)
    )
    uvicorn = _import_uvicorn()
    sock = _listening_socket()
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True)
    uvicorn.Server(
        uvicorn.Config(server, lifespan="off", log_level="warning", access_log=False)
    ).run(sockets=[sock])


if __name__ == "__main__":
    main()
