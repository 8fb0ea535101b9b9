"""The floor under bench/latency.py: the very requests of a project run, replayed without the
project, in the same call structure, against the same simulator.

A run's requests are captured server-side (the simulator keeps each request's JSON body,
:attr:`simulator.CallRecord.body`) and matched to the run's steps by the API seed each step
sends. :func:`replay` then sends them again in the run's structure: ``dislike_rewrite``, the
step tree (a sequential block in order, a parallel block at once under a
``CapacityLimiter`` of ``backend.max_concurrency``; a step's re-asks one after the other),
then the image call and the title call together. Two clients:

* ``sdk``: a bare ``openai.AsyncOpenAI`` (SDK retries off), ``chat.completions.create`` /
  ``images.generate`` with the captured body as keyword arguments, typed responses, the
  image's base64 decoded; nothing else (no retry layer, pacing, records or logs);
* ``httpx``: the SDK's own HTTP client (``httpx2``) posting the captured JSON and reading
  the JSON answer: the cheapest a Python client over this transport gets.

Nothing local is replayed (no records phase: bench/latency.py adds the run's measured local
time to the floor when it compares). The CPU figure is the event-loop thread's CPU time
(``time.thread_time``) over the replay, the same measure as the project's run: work the
project hands to worker threads (decoding and encoding the image) is not in it.
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

from image_project.engine import ActionStep, ChatStep, Deferred, Node

if TYPE_CHECKING:
    from simulator import CallRecord

__all__ = ["Captured", "Replay", "capture", "replay"]

Client = Literal["sdk", "httpx"]
CLIENTS: tuple[Client, ...] = ("sdk", "httpx")


@dataclass(frozen=True)
class Captured:
    """A run's requests by step path (chat, in the order sent) plus its image request(s)."""

    chats: Mapping[str, tuple[dict[str, Any], ...]]
    images: tuple[dict[str, Any], ...]

    @property
    def calls(self) -> int:
        return sum(len(v) for v in self.chats.values()) + len(self.images)


@dataclass(frozen=True)
class Replay:
    wall_s: float
    cpu_s: float  # the event-loop thread's CPU time over the replay
    calls: int

    @property
    def cpu_ms_per_call(self) -> float:
        return self.cpu_s / self.calls * 1000 if self.calls else 0.0


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


Send = Callable[[Literal["chat", "image"], dict[str, Any]], Awaitable[None]]


async def _node(node: Node, path: str, captured: Captured, send: Send) -> None:
    if isinstance(node, ChatStep):
        for body in captured.chats.get(path, ()):
            await send("chat", body)
        return
    if isinstance(node, ActionStep):
        return
    if isinstance(node, Deferred):
        await _deferred(path, captured, send)
        return
    children = [
        (child, f"{path}/{name}") for name, child in zip(node.child_names, node.nodes, strict=True)
    ]
    if not node.parallel:
        for child, child_path in children:
            await _node(child, child_path, captured, send)
        return
    async with anyio.create_task_group() as tg:
        for child, child_path in children:
            tg.start_soon(_node, child, child_path, captured, send)


async def _deferred(path: str, captured: Captured, send: Send) -> None:
    """A :class:`Deferred` node (an evolution round), whose tree is only known from the calls
    captured under its path (as bench/latency.py's ``deferred_cost`` reads it): its parts in
    the order they were first sent, one after another; a part that is itself a call sends
    its requests in order, a part with calls below it sends them all at once."""
    prefix = path + "/"
    parts: dict[str, list[str]] = {}
    for step in captured.chats:  # arrival order
        if step.startswith(prefix):
            parts.setdefault(step[len(prefix) :].split("/", 1)[0], []).append(step)
    for name, steps in parts.items():
        if steps == [f"{prefix}{name}"]:
            for body in captured.chats[steps[0]]:
                await send("chat", body)
            continue
        async with anyio.create_task_group() as tg:
            for step in steps:
                tg.start_soon(_send_all, captured.chats[step], send)


async def _send_all(bodies: Sequence[dict[str, Any]], send: Send) -> None:
    for body in bodies:
        await send("chat", body)


async def _run(tree: Node, captured: Captured, send: Send) -> None:
    for body in captured.chats.get("dislike_rewrite", ()):
        await send("chat", body)
    await _node(tree, "pipeline", captured, send)

    async def images() -> None:
        for body in captured.images:
            await send("image", body)

    async def title() -> None:
        for body in captured.chats.get("title", ()):
            await send("chat", body)

    async with anyio.create_task_group() as tg:  # the image and the title go together
        tg.start_soon(images)
        tg.start_soon(title)


def _sdk_send(client: openai.AsyncOpenAI, limiter: anyio.CapacityLimiter) -> Send:
    async def send(kind: Literal["chat", "image"], body: dict[str, Any]) -> None:
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
    async def send(kind: Literal["chat", "image"], body: dict[str, Any]) -> None:
        path = "chat/completions" if kind == "chat" else "images/generations"
        async with limiter:
            response = await client.post(path, json=body)
            response.raise_for_status()
            answer = response.json()
            if kind == "image":
                base64.b64decode(answer["data"][0]["b64_json"], validate=True)

    return send


async def replay(
    client: Client, base_url: str, tree: Node, captured: Captured, max_concurrency: int
) -> Replay:
    """Send ``captured`` again in the run's structure through a fresh ``client``, made before
    the clock starts (as bench/latency.py makes the project's backends before timing its run:
    making a client loads the TLS trust store, tens of milliseconds, on both sides) and
    closed after it stops."""
    limiter = anyio.CapacityLimiter(max_concurrency)
    if client == "sdk":
        sdk = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0)
        try:
            t0, c0 = time.perf_counter(), time.thread_time()
            await _run(tree, captured, _sdk_send(sdk, limiter))
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        finally:
            await sdk.close()
    else:
        async with httpx2.AsyncClient(base_url=base_url.rstrip("/") + "/", timeout=120) as raw:
            t0, c0 = time.perf_counter(), time.thread_time()
            await _run(tree, captured, _httpx_send(raw, limiter))
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    return Replay(wall, cpu, captured.calls)
