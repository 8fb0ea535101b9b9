"""A local OpenAI-compatible latency simulator for bench/latency.py (served by uvicorn).

    sim = LatencySimulator(chat_median_s=0.4, image_median_s=2.0)
    with sim.serve() as base_url:          # http://127.0.0.1:<port>/v1
        ...                                 # point openai.AsyncOpenAI(base_url=...) at it
    sim.records                             # one CallRecord per request, server-side times

Endpoints: ``POST /v1/chat/completions`` (plain text, or strict ``json_schema`` structured
output with schema-valid content) and ``POST /v1/images/generations`` (base64 PNG of the
requested size). Content comes from the project's deterministic offline backend, so a
structured request always gets valid JSON.

Latency: each request sleeps for a log-normal duration (median ``chat_median_s`` or
``image_median_s``, ``sigma``, clipped to [0.25, 4] x median) drawn from a ``random.Random``
seeded with the SHA-256 of the request body. The same request therefore costs the same in
every mode and every repeat, which keeps the sequential/concurrent comparison fair.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import random
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from image_project.testing import offline_chat_completion, offline_images_response

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class CallRecord:
    """One request as the server saw it (``time.perf_counter`` seconds)."""

    kind: str  # "chat" | "image"
    seed: int | None
    latency_s: float  # the simulated latency it slept
    started: float
    finished: float
    structured: bool


@dataclass
class LatencySimulator:
    chat_median_s: float = 0.4
    image_median_s: float = 2.0
    sigma: float = 0.35
    records: list[CallRecord] = field(default_factory=list)

    def latency_for(self, kind: str, body: bytes) -> float:
        median = self.chat_median_s if kind == "chat" else self.image_median_s
        if median <= 0:
            return 0.0
        rng = random.Random(int.from_bytes(hashlib.sha256(body).digest()[:8], "big"))
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
        started = time.perf_counter()
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
        latency = self.latency_for(kind, body)
        await asyncio.sleep(max(0.0, latency - (time.perf_counter() - started)))
        self.records.append(
            CallRecord(
                kind=kind,
                seed=payload.get("seed"),
                latency_s=latency,
                started=started,
                finished=time.perf_counter(),
                structured=kind == "chat" and "response_format" in payload,
            )
        )
        await _respond(send, 200, reply)

    # -- serving ------------------------------------------------------------------------

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Serve on 127.0.0.1 (a free port) in a background thread; yields the base URL."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit TCP_NODELAY on Linux. Without it the response's header and
        # body writes meet the client's delayed ACK: ~40 ms added to every call, an artefact
        # of the simulator that real APIs do not have.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))
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


async def _respond(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
