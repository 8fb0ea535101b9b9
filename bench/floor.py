"""The floor under bench/latency.py: the very requests of a project run, replayed without the
project, in the same call structure, against the same simulator.

A run's requests are captured server-side (the simulator keeps each request's JSON body,
:attr:`simulator.CallRecord.body`) and matched to the run's steps by the API seed each step
sends. :func:`replay` then sends them again in the run's recorded structure
(:class:`shape.Shape`: the run's step paths and the parallel groups the engine announced):
its roots one after another (``dislike_rewrite``, ``pipeline``), a sequential block's
children in order, a parallel group's at once under a ``CapacityLimiter`` of
``backend.max_concurrency``, a step's re-asks one after the other, then the image call and
the title call together. Two clients:

* ``sdk``: a bare ``openai.AsyncOpenAI`` (SDK retries off), ``chat.completions.create`` /
  ``images.generate`` with the captured body as keyword arguments, typed responses, the
  image's base64 decoded; nothing else (no retry layer, pacing, records or logs);
* ``httpx``: the SDK's own HTTP client (``httpx2``) posting the captured JSON and reading
  the JSON answer: the cheapest a Python client over this transport gets.

Nothing local is replayed (no records phase: bench/latency.py adds the run's measured local
time to the floor when it compares). The CPU figure is the event-loop thread's CPU time
(``time.thread_time``) over the replay, the same measure as the project's run: work the
project hands to worker threads (decoding and encoding the image) is not in it. Each timed
replay starts from a settled collector (``bench/cpu.py``), as each project run does.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio
import httpx2
import openai
from cpu import CpuMeter, settle
from shape import Shape

if TYPE_CHECKING:
    from simulator import CallRecord

__all__ = ["Captured", "Replay", "capture", "per_request_cpu", "replay"]

Client = Literal["sdk", "httpx"]
CLIENTS: tuple[Client, ...] = ("sdk", "httpx")
Kind = Literal["chat", "image"]
IMAGE = "image"
"""The image call's path in the transcript (``steps[].path`` of its event)."""


@dataclass(frozen=True)
class Captured:
    """A run's requests by step path (chat, in the order sent) plus its image request(s)."""

    chats: Mapping[str, tuple[dict[str, Any], ...]]
    images: tuple[dict[str, Any], ...]

    @property
    def calls(self) -> int:
        return sum(len(v) for v in self.chats.values()) + len(self.images)

    @property
    def paths(self) -> set[str]:
        """The step paths with requests (the image call's is ``image``)."""
        return set(self.chats) | ({IMAGE} if self.images else set())

    def requests(self, path: str) -> list[tuple[Kind, dict[str, Any]]]:
        """The requests the step at ``path`` sent, in order."""
        if path == IMAGE:
            return [("image", body) for body in self.images]
        return [("chat", body) for body in self.chats.get(path, ())]


@dataclass(frozen=True)
class Replay:
    wall_s: float
    cpu_s: float  # the event-loop thread's CPU time over the replay
    calls: int
    gc_s: float = 0.0  # of which in garbage collections (bench/cpu.py)

    @property
    def cpu_ms_per_call(self) -> float:
        return self.cpu_s / self.calls * 1000 if self.calls else 0.0

    @property
    def gc_ms_per_call(self) -> float:
        return self.gc_s / self.calls * 1000 if self.calls else 0.0


def capture(records: Sequence[CallRecord], paths_by_seed: Mapping[int | None, str]) -> Captured:
    """The requests of one run (the simulator's records, in arrival order) by step path."""
    chats: dict[str, list[dict[str, Any]]] = {}
    images: list[dict[str, Any]] = []
    for record in sorted(records, key=lambda r: r.started):
        if record.body is None:
            raise ValueError("the simulator did not keep the request bodies")
        if record.kind == "image":
            images.append(record.body)
        else:
            chats.setdefault(paths_by_seed[record.seed], []).append(record.body)
    return Captured({k: tuple(v) for k, v in chats.items()}, tuple(images))


Send = Callable[[Kind, dict[str, Any]], Awaitable[None]]


async def _node(shape: Shape, path: str, captured: Captured, send: Send) -> None:
    """Send what ran at ``path``: a step's requests in order, a sequential block's children
    one after another, a parallel group's children at once."""
    if shape.is_step(path):
        for kind, body in captured.requests(path):
            await send(kind, body)
        return
    children = shape.children[path]
    if shape.parallel(path):
        await _together(shape, children, captured, send)
        return
    for child in children:
        await _node(shape, child, captured, send)


async def _together(shape: Shape, paths: Sequence[str], captured: Captured, send: Send) -> None:
    async with anyio.create_task_group() as tg:
        for path in paths:
            tg.start_soon(_node, shape, path, captured, send)


async def _run(shape: Shape, captured: Captured, send: Send) -> None:
    """The run's stages one after another (the image and the title call are one stage, sent
    together)."""
    for stage in shape.stages():
        if len(stage) == 1:
            await _node(shape, stage[0], captured, send)
        else:
            await _together(shape, stage, captured, send)


def _sdk_send(client: openai.AsyncOpenAI, limiter: anyio.CapacityLimiter) -> Send:
    async def send(kind: Kind, body: dict[str, Any]) -> None:
        async with limiter:
            if kind == "chat":
                completion = await client.chat.completions.create(**body)
                assert completion.choices[0].message is not None
            else:
                images = await client.images.generate(**body)
                assert images.data and images.data[0].b64_json
                base64.b64decode(images.data[0].b64_json, validate=True)

    return send


def _httpx_send(client: httpx2.AsyncClient, limiter: anyio.CapacityLimiter) -> Send:
    async def send(kind: Kind, body: dict[str, Any]) -> None:
        path = "chat/completions" if kind == "chat" else "images/generations"
        async with limiter:
            response = await client.post(path, json=body)
            response.raise_for_status()
            answer = response.json()
            if kind == "image":
                base64.b64decode(answer["data"][0]["b64_json"], validate=True)

    return send


async def replay(
    client: Client, base_url: str, shape: Shape, captured: Captured, max_concurrency: int
) -> Replay:
    """Send ``captured`` again in the run's structure (``shape``) through a fresh ``client``,
    made before the clock starts (as bench/latency.py makes the project's backends before
    timing its run: making a client loads the TLS trust store, tens of milliseconds, on both
    sides) and closed after it stops. Every captured request must belong to a step of
    ``shape`` (else it would be counted but not sent)."""
    missing = sorted(captured.paths - set(shape.steps))
    if missing:
        raise ValueError(f"requests captured for paths that are no step of the run: {missing}")
    limiter = anyio.CapacityLimiter(max_concurrency)
    if client == "sdk":
        sdk = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0)
        try:
            settle()
            t0 = time.perf_counter()
            with CpuMeter() as meter:
                await _run(shape, captured, _sdk_send(sdk, limiter))
            wall = time.perf_counter() - t0
        finally:
            await sdk.close()
    else:
        async with httpx2.AsyncClient(base_url=base_url.rstrip("/") + "/", timeout=120) as raw:
            settle()
            t0 = time.perf_counter()
            with CpuMeter() as meter:
                await _run(shape, captured, _httpx_send(raw, limiter))
            wall = time.perf_counter() - t0
    return Replay(wall, meter.cpu_s, captured.calls, meter.gc_s)


async def per_request_cpu(base_url: str, bodies: Sequence[dict[str, Any]]) -> list[float]:
    """The bare SDK's event-loop CPU (seconds) for each chat body sent alone, in order (the
    collector settled before each): what the SDK's own work on a request of that size costs."""
    out = []
    async with openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0) as sdk:
        for body in bodies:
            settle()
            with CpuMeter() as meter:
                completion = await sdk.chat.completions.create(**body)
            assert completion.choices[0].message is not None
            out.append(meter.cpu_s)
    return out
