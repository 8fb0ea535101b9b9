"""The fake OpenAI-compatible server of tests and ``image_project.testing``.

Internal module; its public names are re-exported by :mod:`image_project.testing`.

:class:`OpenAIServer` answers ``POST /v1/chat/completions``, ``POST /v1/images/generations``
and ``GET /v1/models`` on 127.0.0.1 (a free port), served in-process on a stdlib
:class:`http.server.ThreadingHTTPServer` (no dependency): ``with OpenAIServer() as server:``,
then point a client at ``server.base_url``. Every feature below works, including the ones
that hold or drop a connection (:attr:`OpenAIServer.gate`, ``Reply.wait_for``,
``Reply.disconnect``).

What it answers:

* Every request is answered by the first rule that matches it (:meth:`OpenAIServer.rule`: a
  predicate on the request and its own queue of replies; for concurrent calls, whose arrival
  order is not fixed), else by the next scripted :class:`Reply` (one FIFO for all paths,
  :meth:`OpenAIServer.script`), else by a valid default answer (404 for unknown paths). The
  default text is ``text``, or with ``offline=True`` the offline backend's answer to the
  request (schema-valid JSON for structured outputs, an image of the requested size), so a
  whole pipeline can run on it.
* Latency: ``latency_s`` makes every default answer take that long; ``latency`` (a function
  of the call's kind and body bytes) gives each request its own. A reply can carry a status,
  headers, a JSON body, a delay, an event to wait for, or ``disconnect=True``; ``raw`` sends
  those bytes instead of JSON (:data:`HTML_PAGE`, :func:`truncated`).
* Rate limits (``rate_window``): any :class:`RateLimit` admits or refuses each request and
  gives the ``x-ratelimit-*`` headers of its answer; a refused request is answered at once
  with its 429, before any rule or script is consulted.
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
``llama-server`` with a strict chat template. Waits inside the server also wake on shutdown,
so stopping never hangs on a held request.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import functools
import io
import json
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Protocol, Self

import anyio
from PIL import Image

from image_project.backends.base import JsonSchema, Message, TextRequest, Usage
from image_project.backends.offline.image import parse_size
from image_project.backends.offline.text import OfflineTextBackend

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

    # lifecycle ---------------------------------------------------------------------------

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

    # what to answer ----------------------------------------------------------------------

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

    # the transport (server threads) ------------------------------------------------------

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
