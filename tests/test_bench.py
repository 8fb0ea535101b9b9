"""The benchmark's own logic: the critical-path bound and the latency simulator (served by
uvicorn on 127.0.0.1 and called through the real openai client). No timing is asserted."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from PIL import Image

from image_project.backends.base import ImageRequest, Message, TextRequest
from image_project.backends.openai_backend import OpenAIBackends, openai_backends
from image_project.engine import ActionStep, Block, ChatStep, walk
from image_project.stages.scoring.cards import CARD_OUTPUT, parse_card
from image_project.stages.scoring.judges import judge_output, parse_scores

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

if TYPE_CHECKING:  # mypy sees the real modules (bench/ is on its path; see pyproject.toml)
    import floor
    import latency
    import simulator
else:
    floor = pytest.importorskip("floor")
    latency = pytest.importorskip("latency")
    simulator = pytest.importorskip("simulator")


def chat(name: str) -> ChatStep:
    return ChatStep(name=name, prompt=name, temperature=0)


def test_critical_path_sums_sequential_blocks_and_takes_the_slowest_parallel_child() -> None:
    tree = Block(
        name="pipeline",
        nodes=[
            chat("a"),
            Block(name="fan", parallel=True, nodes=[chat("x"), chat("y"), chat("z")]),
            ActionStep(name="glue", fn=lambda ctx: None),
            Block(
                name="inner",
                nodes=[chat("b"), Block(name="p", parallel=True, nodes=[chat("c"), chat("d")])],
            ),
        ],
    )
    lat = {
        "pipeline/a": 1.0,
        "pipeline/fan/x": 0.5,
        "pipeline/fan/y": 2.0,
        "pipeline/fan/z": 1.5,
        "pipeline/inner/b": 0.25,
        "pipeline/inner/p/c": 0.75,
        "pipeline/inner/p/d": 0.5,
    }
    assert latency.cost(tree, "pipeline", lat) == pytest.approx(1.0 + 2.0 + 0.25 + 0.75)


def test_with_a_limiter_a_parallel_block_takes_at_least_its_work_over_the_capacity() -> None:
    fan = Block(name="fan", parallel=True, nodes=[chat(f"c{i}") for i in range(6)])
    lat = {f"fan/c{i}": 1.0 for i in range(6)} | {"fan/c0": 2.5}
    assert latency.cost(fan, "fan", lat) == pytest.approx(2.5)  # unlimited: the slowest
    assert latency.cost(fan, "fan", lat, capacity=2) == pytest.approx(7.5 / 2)  # the work
    assert latency.cost(fan, "fan", lat, capacity=6) == pytest.approx(2.5)
    assert latency.cost(fan, "fan", lat, capacity=4) == pytest.approx(2.5)  # 7.5/4 < 2.5


def test_call_keyed_latency_ignores_the_text_but_not_the_step() -> None:
    sim = simulator.LatencySimulator(latency_key="call")

    def body(seed: int | None, text: str, **extra: object) -> bytes:
        return json.dumps({"model": "m", "seed": seed, "messages": [text], **extra}).encode()

    assert sim.latency_for("chat", body(1, "card A won")) == sim.latency_for(
        "chat", body(1, "card W won")
    )
    assert sim.latency_for("chat", body(1, "x")) != sim.latency_for("chat", body(2, "x"))
    # no seed: the content is all there is
    assert sim.latency_for("chat", body(None, "a")) != sim.latency_for("chat", body(None, "b"))
    image = {"model": "img", "size": "1024x1024", "quality": "low"}
    assert sim.latency_for("image", json.dumps({**image, "prompt": "a"}).encode()) == (
        sim.latency_for("image", json.dumps({**image, "prompt": "b"}).encode())
    )
    with pytest.raises(ValueError, match="latency_key"):
        simulator.LatencySimulator(latency_key="nope").latency_for("chat", b"{}")


def test_simulated_latency_is_a_function_of_the_request_body() -> None:
    sim = simulator.LatencySimulator(chat_median_s=0.4, image_median_s=2.0)
    a, b = b'{"messages": [1]}', b'{"messages": [2]}'
    assert sim.latency_for("chat", a) == sim.latency_for("chat", a)
    assert sim.latency_for("chat", a) != sim.latency_for("chat", b)
    draws = [sim.latency_for("chat", str(i).encode()) for i in range(300)]
    assert min(draws) >= 0.1 and max(draws) <= 1.6  # clipped to [0.25, 4] x median
    assert 0.3 < sorted(draws)[150] < 0.5  # the median is near 0.4
    assert simulator.LatencySimulator(chat_median_s=0).latency_for("chat", a) == 0.0


@asynccontextmanager
async def real_client(base_url: str) -> AsyncIterator[OpenAIBackends]:
    """The project's OpenAI adapter (the real ``openai`` client) pointed at ``base_url``."""
    backends = openai_backends(
        api_key="sk-test", text_model="m", image_model="gpt-image-test", base_url=base_url
    )
    try:
        yield backends
    finally:
        await backends.aclose()


@pytest.mark.anyio
async def test_simulator_serves_the_real_client_schema_valid_json_and_images(
    allow_loopback: None,
) -> None:
    sim = simulator.LatencySimulator(chat_median_s=0.0, image_median_s=0.0)
    with sim.serve() as base_url:
        async with real_client(base_url) as backends:
            card = await backends.text.complete(
                TextRequest(
                    messages=(Message("user", "Pitch a harbour scene at dusk"),),
                    temperature=0.9,
                    seed=5,
                    json_schema=CARD_OUTPUT.schema,
                )
            )
            scores = judge_output(("B", "A"))
            number = await backends.text.complete(
                TextRequest(
                    messages=(Message("user", "score"),), temperature=0, json_schema=scores.schema
                )
            )
            image = await backends.image.generate(
                ImageRequest(prompt="p", model="gpt-image-test", size="64x48", quality="low")
            )
    assert parse_card(card.text or "").hook
    assert set(parse_scores(number.text or "", ("B", "A"))) == {"A", "B"}
    with Image.open(io.BytesIO(image.data)) as img:
        assert img.size == (64, 48)
    assert [r.kind for r in sim.records] == ["chat", "chat", "image"]
    assert sim.records[0].seed == 5 and sim.records[0].structured


@pytest.mark.anyio
async def test_the_simulator_in_its_own_process_records_resets_and_switches_keys(
    allow_loopback: None,
) -> None:
    sim = simulator.RemoteSimulator(chat_median_s=0.001, image_median_s=0.0)
    with sim.serve() as base_url:
        async with real_client(base_url) as backends:

            async def ask(text: str) -> None:
                await backends.text.complete(
                    TextRequest(messages=(Message("user", text),), temperature=0, seed=11)
                )

            await ask("first")
            await ask("second")
            by_body = [r.latency_s for r in sim.records]
            sim.reset()
            assert sim.records == []
            sim.latency_key = "call"
            await ask("first")
            await ask("second")
            records = sim.records
            by_call = [r.latency_s for r in records]
    assert by_body[0] != by_body[1]  # different text, different draw
    assert by_call[0] == by_call[1]  # same model and seed: the same call
    assert [(r.kind, r.seed) for r in records] == [("chat", 11), ("chat", 11)]
    assert all(r.started <= r.finished for r in records)


@pytest.mark.anyio
async def test_the_floor_replays_a_captured_run_in_its_structure_through_both_clients(
    allow_loopback: None,
) -> None:
    """A run's requests, captured by the simulator and mapped to step paths by their seeds,
    are sent again in the tree's structure (then image and title together), once through the
    bare SDK and once through raw httpx: the same requests, in a structure-respecting order."""
    tree = Block(
        name="pipeline",
        nodes=[chat("a"), Block(name="fan", parallel=True, nodes=[chat("x"), chat("y")])],
    )
    seeds = {"dislike_rewrite": 1, "pipeline/a": 2, "pipeline/fan/x": 3, "pipeline/fan/y": 4}
    seeds["title"] = 5
    sim = simulator.LatencySimulator(chat_median_s=0.0, image_median_s=0.0)
    with sim.serve() as base_url:
        async with real_client(base_url) as backends:
            for path, seed in seeds.items():
                await backends.text.complete(
                    TextRequest(messages=(Message("user", path),), temperature=0, seed=seed)
                )
            await backends.image.generate(
                ImageRequest(prompt="p", model="gpt-image-test", size="64x48", quality="low")
            )
        captured = floor.capture(sim.records, {s: p for p, s in seeds.items()})
        assert captured.calls == 6 and set(captured.chats) == set(seeds)
        for client in floor.CLIENTS:
            sim.reset()
            done = await floor.replay(client, base_url, tree, captured, max_concurrency=4)
            assert done.calls == 6 and done.cpu_s > 0
            order = [r.seed for r in sorted(sim.records, key=lambda r: r.started)]
            assert order[:2] == [1, 2] and set(order[2:4]) == {3, 4}, order
            assert set(order[4:]) == {5, None}, order  # the title and the image, together
            assert [r.body for r in sim.records if r.seed == 2] == list(
                captured.chats["pipeline/a"]
            )


def test_capture_needs_the_request_bodies() -> None:
    record = simulator.CallRecord("chat", 1, 0.0, 0.0, 0.0, False)
    with pytest.raises(ValueError, match="bodies"):
        floor.capture([record], {1: "title"})


def test_an_evolution_round_costs_its_slowest_variant_then_judge_then_selector() -> None:
    lat = {
        "p/round_1/variants/variant_G": 1.0,
        "p/round_1/variants/variant_H": 3.0,
        "p/round_1/judges/j1": 0.5,
        "p/round_1/judges/j2": 2.0,
        "p/round_1/selector": 0.25,
        "p/round_2/judges/j1": 9.0,  # another round: not this one's
    }
    assert latency.deferred_cost("p/round_1", lat) == pytest.approx(3.0 + 2.0 + 0.25)
    assert latency.deferred_cost("p/round_1", lat, capacity=1) == pytest.approx(4.0 + 2.5 + 0.25)
    tree = latency.tree_for(latency.evolution())
    names = [path for path, _ in walk(tree) if "/round_" in path]
    assert names[-2:] == ["pipeline/blackbox_scoring/round_1", "pipeline/blackbox_scoring/round_2"]
