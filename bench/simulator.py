"""A local OpenAI-compatible latency simulator for bench/latency.py (served by uvicorn).

    sim = LatencySimulator(chat_median_s=0.4, image_median_s=2.0)
    with sim.serve() as base_url:          # http://127.0.0.1:<port>/v1
        ...                                 # point openai.AsyncOpenAI(base_url=...) at it
    sim.records                             # one CallRecord per request, server-side times

    sim = RemoteSimulator(chat_median_s=0.4)   # the same, served by its own process
    with sim.serve() as base_url: ...          # (bench/latency.py uses this one)

Endpoints: ``POST /v1/chat/completions`` (plain text, or strict ``json_schema`` structured
output with schema-valid content) and ``POST /v1/images/generations`` (base64 PNG of the
requested size). Content comes from the project's deterministic offline backend, so a
structured request always gets valid JSON.

Rate limit (bench/batch.py): ``rate_limit`` requests per ``rate_window_s`` fixed window
(0 = none), counted when a request arrives; a request over it is answered at once with 429,
``Retry-After`` the rest of the window and OpenAI's error code ``rate_limit_exceeded``. Every
answer carries OpenAI's ``x-ratelimit-limit-requests`` / ``-remaining-requests`` /
``-reset-requests`` headers for the window current when it is sent. OpenAI says a
per-minute limit may be enforced over shorter periods (60,000 RPM as 1,000 a second); the
window here is such a period, and its headers describe it.

Latency: each request sleeps for a log-normal duration (median ``chat_median_s`` or
``image_median_s``, ``sigma``, clipped to [0.25, 4] x median) drawn from a ``random.Random``
seeded with the SHA-256 of the request body. The same request therefore costs the same in
every mode and every repeat, which keeps the sequential/concurrent comparison fair.

``latency_key = "call"`` seeds the draw with the call's identity instead of its whole body:
the endpoint, the model and the API ``seed`` (every pipeline step sends its own derived
seed; an image request, which has none, is keyed by model, size and quality). Both modes
still pay the same, and in addition a step costs the same whatever text it carries: used
by the N x J sweep, where a different number of cards leads to a different winning card and
so to different text in every later request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import asdict, dataclass, field
from typing import Any

import uvicorn

from image_project.testing import offline_chat_completion, offline_images_response

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class CallRecord:
    """One request as the server saw it (``time.time`` seconds: one clock for every process
    on the machine, so the bench can place a served-elsewhere call on its own time axis)."""

    kind: str  # "chat" | "image"
    seed: int | None
    latency_s: float  # the simulated latency it slept
    started: float
    finished: float
    structured: bool
    body: dict[str, Any] | None = None  # the request's JSON, for bench/floor.py to replay
    status: int = 200  # 429: refused by the rate limit (no latency slept)


@dataclass
class LatencySimulator:
    chat_median_s: float = 0.4
    image_median_s: float = 2.0
    sigma: float = 0.35
    latency_key: str = "body"  # "body" | "call" (module docstring)
    records: list[CallRecord] = field(default_factory=list)
    rate_limit: int = 0  # requests per window; 0 = no limit
    rate_window_s: float = 1.0
    _window: tuple[int, int] = (-1, 0)  # (window number, requests counted in it)
    _window_t0: float = 0.0

    def set_rate_limit(self, limit: int, window_s: float) -> None:
        """``limit`` requests per fixed window of ``window_s`` seconds from now (0: none)."""
        self.rate_limit, self.rate_window_s = limit, window_s
        self._window, self._window_t0 = (-1, 0), time.time()

    def _window_now(self) -> tuple[int, float]:
        """The current window's number and the seconds until it ends."""
        elapsed = time.time() - self._window_t0
        number = int(elapsed // self.rate_window_s)
        return number, (number + 1) * self.rate_window_s - elapsed

    def _admit(self) -> bool:
        """Count a request in the current window; False when the window is full."""
        number, _ = self._window_now()
        counted = self._window[1] if self._window[0] == number else 0
        if counted >= self.rate_limit:
            self._window = (number, counted)
            return False
        self._window = (number, counted + 1)
        return True

    def rate_headers(self) -> list[tuple[bytes, bytes]]:
        if not self.rate_limit:
            return []
        number, left = self._window_now()
        used = self._window[1] if self._window[0] == number else 0
        return [
            (b"x-ratelimit-limit-requests", str(self.rate_limit).encode()),
            (b"x-ratelimit-remaining-requests", str(max(0, self.rate_limit - used)).encode()),
            (b"x-ratelimit-reset-requests", f"{left:.3f}s".encode()),
        ]

    def key_for(self, kind: str, body: bytes) -> bytes:
        """The bytes that seed a request's latency draw (see ``latency_key``)."""
        if self.latency_key == "body":
            return body
        if self.latency_key != "call":
            raise ValueError(f"latency_key must be 'body' or 'call', got {self.latency_key!r}")
        payload = json.loads(body or b"{}")
        identity = [kind, payload.get("model")]
        if kind == "chat" and payload.get("seed") is not None:
            identity.append(payload["seed"])
        elif kind == "image":
            identity += [payload.get("size"), payload.get("quality")]
        else:  # a chat call without a seed has no identity but its content
            return body
        return json.dumps(identity).encode()

    def latency_for(self, kind: str, body: bytes) -> float:
        median = self.chat_median_s if kind == "chat" else self.image_median_s
        if median <= 0:
            return 0.0
        key = self.key_for(kind, body)
        rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))
        value = rng.lognormvariate(math.log(median), self.sigma)
        return min(4 * median, max(0.25 * median, value))

    def reset(self) -> None:
        self.records.clear()

    # -- ASGI ---------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"].rstrip("/")
        if path.startswith("/_bench"):
            await self._control(scope["method"], path, body, send)
            return
        started = time.time()
        try:
            payload = json.loads(body or b"{}")
        except json.JSONDecodeError:
            await _respond(send, 400, {"error": {"message": "invalid JSON body"}})
            return
        if scope["method"] == "POST" and path.endswith("/chat/completions"):
            kind, reply = "chat", await offline_chat_completion(payload)
        elif scope["method"] == "POST" and path.endswith("/images/generations"):
            kind, reply = "image", offline_images_response(payload)
        else:
            await _respond(send, 404, {"error": {"message": f"no route {scope['path']}"}})
            return
        if self.rate_limit and not self._admit():
            _, left = self._window_now()
            self.records.append(
                CallRecord(
                    kind=kind,
                    seed=payload.get("seed"),
                    latency_s=0.0,
                    started=started,
                    finished=time.time(),
                    structured=False,
                    status=429,
                )
            )
            error = {"message": "Rate limit reached for requests", "type": "requests"}
            await _respond(
                send,
                429,
                {"error": {**error, "code": "rate_limit_exceeded"}},
                [(b"retry-after-ms", f"{left * 1000:.0f}".encode()), *self.rate_headers()],
            )
            return
        latency = self.latency_for(kind, body)
        await asyncio.sleep(max(0.0, latency - (time.time() - started)))
        self.records.append(
            CallRecord(
                kind=kind,
                seed=payload.get("seed"),
                latency_s=latency,
                started=started,
                finished=time.time(),
                structured=kind == "chat" and "response_format" in payload,
                body=payload,
            )
        )
        await _respond(send, 200, reply, self.rate_headers())

    async def _control(self, method: str, path: str, body: bytes, send: Send) -> None:
        """The bench's side door when the simulator runs in its own process:
        ``GET /_bench/records``, ``POST /_bench/reset``, ``POST /_bench/latency_key``."""
        if method == "GET" and path == "/_bench/records":
            await _respond(send, 200, {"records": [asdict(r) for r in self.records]})
        elif method == "POST" and path == "/_bench/reset":
            self.reset()
            await _respond(send, 200, {})
        elif method == "POST" and path == "/_bench/latency_key":
            self.latency_key = json.loads(body)["latency_key"]
            await _respond(send, 200, {})
        elif method == "POST" and path == "/_bench/rate_limit":
            limit = json.loads(body)
            self.set_rate_limit(int(limit["limit"]), float(limit["window_s"]))
            await _respond(send, 200, {})
        else:
            await _respond(send, 404, {"error": {"message": f"no route {path}"}})

    # -- serving ------------------------------------------------------------------------

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Serve on 127.0.0.1 (a free port) in a background thread; yields the base URL."""
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
                raise RuntimeError("the latency simulator did not start")
            time.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            sock.close()


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit TCP_NODELAY on Linux. Without it the response's header and
    # body writes meet the client's delayed ACK: ~40 ms added to every call, an artefact of
    # the simulator that real APIs do not have.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class RemoteSimulator:
    """A :class:`LatencySimulator` served by its own process (``python bench/simulator.py``),
    driven through its side door. The bench uses this one: a real API runs on other
    machines, so the simulator's CPU time must not compete with the client's for one GIL."""

    def __init__(
        self, chat_median_s: float = 0.4, image_median_s: float = 2.0, sigma: float = 0.35
    ):
        self.chat_median_s, self.image_median_s, self.sigma = chat_median_s, image_median_s, sigma
        self.base_url = ""
        self._key = "body"

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Start the server process, yield its base URL, stop it (and close its pipe)."""
        with subprocess.Popen(
            [
                sys.executable,
                __file__,
                f"--chat-median={self.chat_median_s}",
                f"--image-median={self.image_median_s}",
                f"--sigma={self.sigma}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        ) as proc:
            try:
                assert proc.stdout is not None
                line = proc.stdout.readline().strip()
                if not line.startswith("http://"):
                    raise RuntimeError(f"the latency simulator did not start (said {line!r})")
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
        self._call("POST", "/_bench/latency_key", {"latency_key": value})
        self._key = value

    @property
    def records(self) -> list[CallRecord]:
        return [CallRecord(**r) for r in self._call("GET", "/_bench/records")["records"]]

    def reset(self) -> None:
        self._call("POST", "/_bench/reset", {})

    def set_rate_limit(self, limit: int, window_s: float) -> None:
        """``limit`` requests per ``window_s`` window from now on (0: no limit)."""
        self._call("POST", "/_bench/rate_limit", {"limit": limit, "window_s": window_s})


def main(argv: list[str] | None = None) -> None:
    """Serve a simulator in this process until terminated; print the base URL first."""
    parser = argparse.ArgumentParser(description="OpenAI-compatible latency simulator")
    parser.add_argument("--chat-median", type=float, default=0.4)
    parser.add_argument("--image-median", type=float, default=2.0)
    parser.add_argument("--sigma", type=float, default=0.35)
    args = parser.parse_args(argv)
    sim = LatencySimulator(args.chat_median, args.image_median, args.sigma)
    sock = _listening_socket()
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True)
    server = uvicorn.Server(
        uvicorn.Config(sim, lifespan="off", log_level="warning", access_log=False)
    )
    server.run(sockets=[sock])


async def _respond(
    send: Send,
    status: int,
    body: dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


if __name__ == "__main__":
    main()
