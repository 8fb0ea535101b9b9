"""The benchmarks' latency simulator: the package's fake OpenAI server
(:class:`image_project.testing.OpenAIServer`) served as an ASGI app by uvicorn, with offline
answers, log-normal latencies keyed by the request body and an optional requests-per-window
limit.

    sim = LatencySimulator(chat_median_s=0.4, image_median_s=2.0)
    with sim.serve() as base_url:          # http://127.0.0.1:<port>/v1
        ...                                 # point openai.AsyncOpenAI(base_url=...) at it
    sim.records                             # one CallRecord per request, server-side times

    sim = RemoteSimulator(chat_median_s=0.4)   # the same, served by its own process
    with sim.serve() as base_url: ...          # (bench/latency.py uses this one)

:class:`UvicornServer` is any :class:`~image_project.testing.OpenAIServer` served this way
(the same answers, rules, scripts, records and rate headers; ``Reply(wait_for=...)`` and
``Reply(disconnect=True)`` need the package's threaded server and are answered with a 500
here), plus a side door (``/_control/...``) through which :class:`RemoteSimulator` drives the
server in its own process.

Content comes from the project's deterministic offline backend, so a structured request
always gets valid JSON. Latency (:class:`LognormalLatency`): each request waits for a
log-normal duration (median ``chat_median_s`` or ``image_median_s``, ``sigma``, clipped to
[0.25, 4] x median) drawn from a generator seeded with the SHA-256 of the request body, so the
same request costs the same in every mode and every repeat, which keeps the
sequential/concurrent comparison fair. ``latency_key = "call"`` keys the draw by the call's
identity instead (endpoint, model, API seed): used by the N x J sweep, where a different
number of cards leads to different text in every later request.

Rate limit (bench/batch.py): ``set_rate_limit(limit, window_s)``, ``limit`` requests per fixed
window (0 = none), counted when a request arrives; a request over it is answered at once with
429 (see :class:`FixedWindow` for the headers).

``python bench/simulator.py [--chat-median S] [--image-median S] [--sigma X]`` serves one in
this process and prints its base URL first.
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
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from image_project._fake_openai import CallRecord, OpenAIServer, RecordedRequest, error_body

if TYPE_CHECKING:
    from image_project._fake_openai import _Answer

__all__ = [
    "CallRecord",
    "FixedWindow",
    "LatencySimulator",
    "LognormalLatency",
    "RemoteSimulator",
    "UvicornServer",
    "main",
]


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


# --------------------------------------------------------------------------- rate limit


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


# --------------------------------------------------------------------------- uvicorn


class UvicornServer(OpenAIServer):
    """An :class:`~image_project.testing.OpenAIServer` served as an ASGI app under uvicorn
    (:meth:`serve`), with the side door (``/_control/...``) of a server in its own process."""

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Serve this server under uvicorn on 127.0.0.1 (a free port) in a background thread;
        yields the base URL. Needs the ``bench`` extra (uvicorn)."""
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

    def set_rate_limit(self, limit: int, window_s: float) -> None:
        """``limit`` requests per fixed window of ``window_s`` seconds from now (0: none)."""
        self.rate_window = FixedWindow(limit, window_s) if limit else None

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
            await _respond(send, self._list_models(RecordedRequest(method, path, headers, None)))
            return
        started = time.time()
        try:
            payload = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            error = {"error": {"message": "invalid JSON body"}}
            await _respond(send, self._encode(400, error, None, {}))
            return
        if method != "POST" or not path.endswith(_CALL_ROUTES):
            error = {"error": {"message": f"no route {scope['path']}"}}
            await _respond(send, self._encode(404, error, None, {}))
            return
        request = RecordedRequest(method, scope["path"], headers, payload)
        await _respond(send, await self._serve_call(request, raw, started))

    async def _serve_call(self, request: RecordedRequest, raw: bytes, started: float) -> _Answer:
        """Answer a completion or image call. The default answer first, then the quota: the
        order the benchmarks' figures were measured with (the answer's CPU time counts
        within the simulated latency)."""
        default = await self.default_answer(request) if self.offline else None
        reply, admitted = self._arrive(request)
        status: int | None = None
        try:
            if reply is not None and (reply.wait_for is not None or reply.disconnect):
                status = 500
                message = "Reply(wait_for=..., disconnect=True) needs the threaded server"
                return self._encode(500, error_body(message, type="fake_server_error"), None, {})
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
            return self._encode(200, {"records": [asdict(r) for r in self.records]}, None, {})
        if method == "POST" and path == "/_control/reset":
            self.reset()
        elif method == "POST" and path == "/_control/latency_key":
            if not isinstance(self.latency, LognormalLatency):
                return self._encode(409, {"error": {"message": "no latency model"}}, None, {})
            self.latency.key = json.loads(raw)["latency_key"]
        elif method == "POST" and path == "/_control/rate_limit":
            limit = json.loads(raw)
            self.set_rate_limit(int(limit["limit"]), float(limit["window_s"]))
        else:
            return self._encode(404, {"error": {"message": f"no route {path}"}}, None, {})
        return self._encode(200, {}, None, {})


_CALL_ROUTES = ("/chat/completions", "/images/generations")

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def _respond(send: _Send, answer: _Answer) -> None:
    """Send ``answer`` through the ASGI server."""
    data = answer.data or b""
    headers = [(b"content-length", str(len(data)).encode())]
    if answer.content_type is not None:
        headers.insert(0, (b"content-type", answer.content_type.encode()))
    headers += [(k.encode(), v.encode()) for k, v in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


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


# --------------------------------------------------------------------------- simulators


class LatencySimulator(UvicornServer):
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


class RemoteSimulator:
    """The simulator served by uvicorn in its own process (``python bench/simulator.py``) and
    driven through its side door. The bench uses this one: a real API runs on other machines,
    so the simulator's CPU time must not compete with the client's for one GIL."""

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
            str(Path(__file__).resolve()),
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
    """Serve a simulator in this process under uvicorn until terminated; print the base URL
    first."""
    parser = argparse.ArgumentParser(description="OpenAI-compatible fake server with latencies")
    parser.add_argument("--chat-median", type=float, default=0.4)
    parser.add_argument("--image-median", type=float, default=2.0)
    parser.add_argument("--sigma", type=float, default=0.35)
    args = parser.parse_args(argv)
    server = LatencySimulator(args.chat_median, args.image_median, args.sigma)
    uvicorn = _import_uvicorn()
    sock = _listening_socket()
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True)
    uvicorn.Server(
        uvicorn.Config(server, lifespan="off", log_level="warning", access_log=False)
    ).run(sockets=[sock])


if __name__ == "__main__":
    main()
