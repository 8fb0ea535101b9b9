"""A scripted OpenAI-compatible HTTP server on 127.0.0.1, for tests that use the real SDK.

Stdlib only: a :class:`http.server.ThreadingHTTPServer` on port 0 in a daemon thread, started
and stopped by the test (``with OpenAIServer() as server: ...``). Point a client at
``server.base_url``.

* Every request is answered by the first rule that matches it (:meth:`OpenAIServer.rule`: a
  predicate on the request and its own queue of replies; for concurrent calls, whose arrival
  order is not fixed), else by the next scripted :class:`Reply` (one FIFO for all paths,
  :meth:`OpenAIServer.script`), else by a valid default answer for ``/v1/chat/completions``
  and ``/v1/images/generations`` (404 for anything else). The default text is ``text``, or
  with ``offline=True`` the offline backend's answer to the request (schema-valid JSON for
  structured outputs, an image of the requested size), so a whole pipeline can run on it;
  ``latency_s`` makes every default answer take that long (a slow but healthy service).
* A reply can carry a status, headers, a JSON body, a server-side delay (to provoke a read
  timeout), an event to wait for before answering, or ``disconnect=True`` (close the socket
  without answering, a connection error for the client). ``raw`` sends those bytes as the
  body instead of JSON, under ``content_type`` (None: no Content-Type header at all): an
  HTML error page from a proxy, a truncated JSON body, a wrong content type
  (:data:`HTML_PAGE`, :func:`truncated`).
* ``rate_window=RateWindow(limit, window_s)`` enforces a request quota the way OpenAI does,
  on the server's own clock: ``limit`` requests per ``window_s`` seconds, refilled
  continuously; every answer carries OpenAI's ``x-ratelimit-*`` headers, and a request over
  the quota gets a 429 ``rate_limit_exceeded`` saying when the next request will be allowed
  (``retry-after-ms``, ``Retry-After``), before any rule or script is consulted.
* Every request is recorded (:attr:`OpenAIServer.requests`), and the number of requests in
  flight (received, not yet answered) is tracked with its maximum. :attr:`OpenAIServer.gate`
  holds every request until it is set; :meth:`OpenAIServer.wait_for_in_flight` lets a test
  synchronise on arrivals instead of sleeping.
* ``GET /models`` (the CLI's pre-flight probe) is answered apart: with ``models=[...]`` as
  that model list, else 404 (no list: the probe passes); it is counted in
  :attr:`OpenAIServer.model_listings`, not recorded in ``requests``, and consumes no script;
  the replies queued in :attr:`OpenAIServer.model_list_faults` (status, headers, body) are
  answered to it first, one per listing (a provider's hiccup at start).

Waits inside the server always also wake on shutdown, so stopping never hangs on a held
request.
"""

from __future__ import annotations

import base64
import collections
import functools
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import anyio

from image_project.testing import offline_chat_completion, offline_images_response

__all__ = [
    "HTML_PAGE",
    "TINY_PNG",
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


@dataclass(frozen=True)
class Reply:
    """One scripted answer.

    ``body`` None means the path's default answer for a 2xx status and an OpenAI-shaped
    error body for any other status. ``raw`` (bytes) replaces the JSON body entirely and is
    sent with ``content_type`` (None: no Content-Type header).
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
    method: str
    path: str
    headers: Mapping[str, str]
    body: Any

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
        return self.path.split("?", 1)[0].endswith("/images/generations")


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


@dataclass
class RateWindow:
    """A request quota of ``limit`` requests per ``window_s`` seconds, enforced the way OpenAI
    describes its limits: continuously, as a bucket of ``limit`` requests that refills at
    ``limit / window_s`` per second (so after a burst the next request is allowed a fraction
    of the window later, not a whole window later). It starts full; refused requests do not
    count. Used by :class:`OpenAIServer` under its lock, on the server's clock.

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

    def admit(self, now: float) -> tuple[bool, dict[str, str]]:
        """Whether a request arriving at ``now`` (server clock) is accepted, and the headers of
        its answer."""
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


class OpenAIServer:
    """The scripted server; see the module docstring."""

    def __init__(
        self,
        *,
        text: str = "ok",
        image: bytes = TINY_PNG,
        offline: bool = False,
        offline_model_error: float | None = None,
        latency_s: float = 0.0,
        rate_window: RateWindow | None = None,
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
        self.rate_window = rate_window
        self.gate: threading.Event | None = None
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

    # lifecycle -------------------------------------------------------------------------

    def start(self) -> OpenAIServer:
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self._httpd = _QuietHTTPServer(("127.0.0.1", 0), Handler)
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

    def __enter__(self) -> OpenAIServer:
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
        if self._httpd is None:
            raise RuntimeError("server not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # scripting and inspection ----------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one (then defaults)."""
        with self._cond:
            self._script.extend(replies)

    def rule(self, when: Callable[[RecordedRequest], bool], *replies: Reply) -> None:
        """Requests for which ``when(request)`` is true take these replies, in order, before
        the FIFO script; once they are used up such requests fall through as usual."""
        with self._cond:
            self._rules.append((when, collections.deque(replies)))

    @property
    def unused_replies(self) -> int:
        with self._cond:
            return len(self._script) + sum(len(queue) for _, queue in self._rules)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._cond:
            return list(self._requests)

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

    # request handling (server threads) -------------------------------------------------

    def _wait(self, event: threading.Event) -> None:
        while not event.wait(_POLL_S):
            if self._stopping.is_set():
                return

    def _handle(self, handler: _Handler) -> None:
        if handler.command == "GET" and handler.path.split("?", 1)[0].endswith("/models"):
            self._list_models(handler)
            return
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = RecordedRequest(
            method=handler.command,
            path=handler.path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
        )
        with self._cond:
            self._requests.append(request)
            reply, window_headers = self._admit(request)
            self._in_flight += 1
            self._in_flight_requests.append(request)
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            self._cond.notify_all()
        try:
            gate = self.gate
            if gate is not None:
                self._wait(gate)
            if reply is not None and reply.wait_for is not None:
                self._wait(reply.wait_for)
            delay = reply.delay_s if reply is not None else self.latency_s
            if delay > 0:
                self._stopping.wait(delay)
            status, payload, headers = self._answer(request, reply)
            headers = {**window_headers, **headers}
        finally:
            # Count the request as answered *before* writing: once the client has the
            # response it may start another request, which must not see this one in flight.
            with self._cond:
                self._in_flight -= 1
                self._in_flight_requests.remove(request)
                self._cond.notify_all()
        if reply is not None and reply.disconnect:
            handler.close_connection = True
            return
        content_type: str | None = "application/json"
        if reply is not None and reply.raw is not None:
            data, content_type = reply.raw, reply.content_type
        else:
            data = json.dumps(payload).encode("utf-8")
        try:
            handler.send_response(status)
            if content_type is not None:
                handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
            handler.wfile.flush()
        except OSError:
            handler.close_connection = True

    def _list_models(self, handler: _Handler) -> None:
        """``GET /models`` (the pre-flight probe): ``models`` as the list, or 404 without
        ``models``; counted in :attr:`model_listings`, never in :attr:`requests`, and never
        consuming a scripted reply or rule."""
        with self._cond:
            self.model_listings += 1
            fault = self.model_list_faults.popleft() if self.model_list_faults else None
        if fault is not None and fault.disconnect:
            handler.close_connection = True  # no answer at all: a reset for the client
            return
        if fault is not None:
            status = fault.status
            payload = fault.body if fault.body is not None else error_body("try later")
            headers = dict(fault.headers)
        elif self.models is None:
            status, payload = 404, error_body("no such path '/v1/models'", type="not_found")
        else:
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in self.models
            ]
            status, payload = 200, {"object": "list", "data": data}
        body = json.dumps(payload).encode("utf-8")
        try:
            handler.send_response(status)
            for name, value in (headers if fault is not None else {}).items():
                handler.send_header(name, value)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            handler.wfile.flush()
        except OSError:
            handler.close_connection = True

    def _admit(self, request: RecordedRequest) -> tuple[Reply | None, Mapping[str, str]]:
        """The reply for ``request`` (None: the default answer) and the rate-window headers to
        add to it; a request over the window's quota is refused before any rule or script."""
        window = self.rate_window
        if window is None:
            return self._next_reply(request), {}
        now = time.monotonic()
        accepted, headers = window.admit(now)
        if not accepted:
            return Reply(status=429, body=window.refusal_body(), headers=headers), {}
        return self._next_reply(request), headers

    def _next_reply(self, request: RecordedRequest) -> Reply | None:
        for when, queue in self._rules:
            if queue and when(request):
                return queue.popleft()
        return self._script.popleft() if self._script else None

    def _answer(
        self, request: RecordedRequest, reply: Reply | None
    ) -> tuple[int, Any, Mapping[str, str]]:
        status = reply.status if reply is not None else 200
        headers: Mapping[str, str] = reply.headers if reply is not None else {}
        if reply is not None and reply.body is not None:
            return status, reply.body, headers
        if status >= 400:
            return status, error_body(f"scripted HTTP {status}", type="scripted_error"), headers
        path = request.path.split("?", 1)[0]
        requested_model = request.body.get("model") if isinstance(request.body, dict) else None
        if self.offline and isinstance(request.body, dict):
            if path.endswith("/chat/completions"):
                answer = functools.partial(
                    offline_chat_completion, model_error=self.offline_model_error
                )
                return status, anyio.run(answer, request.body), headers
            if path.endswith("/images/generations"):
                return status, offline_images_response(request.body), headers
        if path.endswith("/chat/completions"):
            return (
                status,
                chat_completion(self.default_text, model=requested_model or "test-model"),
                headers,
            )
        if path.endswith("/images/generations"):
            return status, image_response(self.default_image), headers
        return 404, error_body(f"no such path {path!r}", type="not_found"), headers


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
