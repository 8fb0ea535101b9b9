"""The benchmark's own logic: the shape of what a run ran and the critical-path bound it gives
for given latencies, the floor's replay in that shape, and the latency simulator (served by
uvicorn on 127.0.0.1 and called through the real openai client). No timing is asserted."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest
from PIL import Image

from image_project.backends.base import ImageRequest, Message, TextRequest
from image_project.backends.openai_backend import OpenAIBackends, openai_backends
from image_project.stages.scoring.cards import CARD_OUTPUT, parse_card
from image_project.stages.scoring.judges import judge_output, parse_scores
from image_project.stages.standard import Brief
from tests.support.pipeline import pipeline_shape

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

if TYPE_CHECKING:  # mypy sees the real modules (bench/ is on its path; see pyproject.toml)
    import floor
    import latency
    import runs
    import simulator
    from shape import Shape
else:
    floor = pytest.importorskip("floor")
    latency = pytest.importorskip("latency")
    runs = pytest.importorskip("runs")
    simulator = pytest.importorskip("simulator")
    Shape = pytest.importorskip("shape").Shape


def test_critical_path_sums_sequential_blocks_and_takes_the_slowest_parallel_child() -> None:
    """Steps are leaves, their prefixes blocks; a prefix that is a parallel group costs its
    slowest child, any other the sum of its children; an action (no latency) costs 0."""
    shape = Shape.of(
        [
            "pipeline/a",
            "pipeline/fan/x",
            "pipeline/fan/y",
            "pipeline/fan/z",
            "pipeline/glue",  # an action
            "pipeline/inner/b",
            "pipeline/inner/p/c",
            "pipeline/inner/p/d",
        ],
        {"pipeline/fan": 3, "pipeline/inner/p": 2},
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
    assert shape.children["pipeline"] == (
        "pipeline/a",
        "pipeline/fan",
        "pipeline/glue",
        "pipeline/inner",
    )
    assert shape.cost("pipeline", lat) == pytest.approx(1.0 + 2.0 + 0.25 + 0.75)
    assert shape.cost("pipeline/inner", lat) == pytest.approx(0.25 + 0.75)
    assert shape.work("pipeline", lat) == pytest.approx(sum(lat.values()))
    # the same paths without the groups: everything one after another
    assert Shape.of(shape.steps, ()).cost("pipeline", lat) == pytest.approx(sum(lat.values()))


def test_with_a_limiter_a_parallel_group_takes_at_least_its_work_over_the_capacity() -> None:
    shape = Shape.of([f"fan/c{i}" for i in range(6)], {"fan": 6})
    lat = {f"fan/c{i}": 1.0 for i in range(6)} | {"fan/c0": 2.5}
    assert shape.cost("fan", lat) == pytest.approx(2.5)  # unlimited: the slowest
    assert shape.cost("fan", lat, capacity=2) == pytest.approx(7.5 / 2)  # the work
    assert shape.cost("fan", lat, capacity=6) == pytest.approx(2.5)
    assert shape.cost("fan", lat, capacity=4) == pytest.approx(2.5)  # 7.5/4 < 2.5


def test_the_run_costs_its_roots_in_turn_but_the_image_and_title_together() -> None:
    shape = Shape.of(["dislike_rewrite", "pipeline/a", "pipeline/b", "image", "title"], ())
    assert shape.stages() == [("dislike_rewrite",), ("pipeline",), ("image", "title")]
    lat = {"dislike_rewrite": 0.5, "pipeline/a": 1.0, "pipeline/b": 2.0, "image": 4.0}
    assert shape.run_cost(lat | {"title": 1.0}) == pytest.approx(0.5 + 3.0 + 4.0)
    assert shape.run_cost(lat | {"title": 5.0}) == pytest.approx(0.5 + 3.0 + 5.0)
    prompt_only = Shape.of(["pipeline/a", "pipeline/b"], ())
    assert prompt_only.stages() == [("pipeline",)]
    assert prompt_only.run_cost(lat) == pytest.approx(3.0)


def test_an_evolution_round_costs_its_slowest_variant_then_judge_then_selector() -> None:
    """A round is a scope run from code: its parts one after another, its variants and its
    judges parallel groups (as the engine announced them), its actions free."""
    round_1 = "p/round_1"
    shape = Shape.of(
        [
            f"{round_1}/variants/variant_G",
            f"{round_1}/variants/variant_H",
            f"{round_1}/dedupe",
            f"{round_1}/judges/j1",
            f"{round_1}/judges/j2",
            f"{round_1}/table",
            f"{round_1}/selector",
            f"{round_1}/survivors",
            "p/round_2/judges/j1",
        ],
        {f"{round_1}/variants": 2, f"{round_1}/judges": 2, "p/round_2/judges": 1},
    )
    lat = {
        f"{round_1}/variants/variant_G": 1.0,
        f"{round_1}/variants/variant_H": 3.0,
        f"{round_1}/judges/j1": 0.5,
        f"{round_1}/judges/j2": 2.0,
        f"{round_1}/selector": 0.25,
        "p/round_2/judges/j1": 9.0,  # another round: not this one's
    }
    assert shape.cost(round_1, lat) == pytest.approx(3.0 + 2.0 + 0.25)
    assert shape.cost(round_1, lat, capacity=1) == pytest.approx(4.0 + 2.5 + 0.25)
    assert shape.cost("p", lat) == pytest.approx(3.0 + 2.0 + 0.25 + 9.0)


def test_a_shape_keeps_the_transcript_order_and_rejects_a_step_with_steps_under_it() -> None:
    shape = Shape.of(["r/b", "r/a/x", "r/c", "r/a/y", "r/b"], {"r/a": 2})
    assert shape.steps == ("r/b", "r/a/x", "r/c", "r/a/y")
    assert shape.roots == ("r",)
    assert shape.children["r"] == ("r/b", "r/a", "r/c")
    assert shape.children["r/a"] == ("r/a/x", "r/a/y")
    assert shape.is_step("r/b") and not shape.is_step("r/a") and shape.parallel("r/a")
    with pytest.raises(ValueError, match="also blocks"):
        Shape.of(["r/a", "r/a/x"], ())


# --------------------------------------------------------------------------- recorded runs


@pytest.fixture
def zero_latency(allow_loopback: None) -> Iterator[tuple[str, simulator.LatencySimulator]]:
    """The simulator with zero latencies, served on loopback: its base URL and itself."""
    sim = simulator.LatencySimulator(chat_median_s=0.0, image_median_s=0.0)
    with sim.serve() as base_url:
        yield base_url, sim


def with_latencies(outcome: runs.RunOutcome, chat: float, image: float) -> runs.RunOutcome:
    """``outcome`` as if every chat call had taken ``chat`` seconds and the image ``image``."""
    records = [
        dataclasses.replace(r, latency_s=image if r.kind == "image" else chat)
        for r in outcome.records
    ]
    return dataclasses.replace(outcome, records=records)


@pytest.mark.anyio
@pytest.mark.parametrize(("refinement", "enclaves"), [("final", 1), ("per_stage", 6)])
async def test_a_standard_run_records_the_shape_of_its_step_tree(
    zero_latency: tuple[str, simulator.LatencySimulator],
    refinement: Literal["final", "per_stage"],
    enclaves: int,
) -> None:
    """The standard pipeline is a static tree: the shape its run records (step paths and
    announced groups) is that tree, leaf for leaf and parallel block for parallel block, so
    its critical path is the tree's. With every call 1 s: six stage drafts one after
    another, and per ToT enclave its 5 drafts at once, its 3 consensus calls at once and the
    final consensus (3 s; 5/2 + 3/2 + 1 = 5 s under a limit of 2 calls)."""
    base_url, sim = zero_latency
    scenario = runs.Scenario(refinement, (f"prompt.refinement={refinement}",))
    outcome = await latency.run_once(scenario, "sequential", base_url, sim)
    shape = outcome.shape
    tree = await pipeline_shape(
        Brief(("a", "b", "c"), "Likes:\n- x"),
        run_seed=latency.SEED,
        refinement=refinement,
        temperature=0.7,
    )
    assert [p for p in shape.steps if p.startswith("pipeline/")] == list(tree.paths)
    assert outcome.groups == tree.groups
    assert shape.stages() == [("dislike_rewrite",), ("pipeline",), ("image", "title")]
    ones = dict.fromkeys(shape.steps, 1.0)
    assert shape.cost("pipeline", ones) == pytest.approx(6 + 3 * enclaves)
    assert shape.cost("pipeline", ones, capacity=2) == pytest.approx(6 + 5 * enclaves)
    # the bench's figure: the filter call, the pipeline, then the slower of image and title
    timed = with_latencies(outcome, chat=1.0, image=2.0)
    calls = len(timed.records)
    assert runs.critical_path(scenario, timed) == pytest.approx(
        (1 + 6 + 3 * enclaves + 2, (calls - 1) * 1.0 + 2.0)
    )
    assert latency.scoring_stage(timed) is None


@pytest.mark.anyio
async def test_an_evolution_run_records_its_rounds_the_same_in_both_modes(
    zero_latency: tuple[str, simulator.LatencySimulator],
) -> None:
    """The scoring flow is code: its groups (cards, judges, each round's variants and
    judges) exist only once the run announces them. Both modes record the same shape (the
    bound comes from the sequential run, the floor replays the concurrent one). With every
    call 1 s: hints, cards, judges, two rounds of (variants, judges), then the final
    stages (draft, ToT enclave, DALL-E draft) = 12 s, plus the filter call and the image."""
    base_url, sim = zero_latency
    scenario = latency.evolution()
    seq = await latency.run_once(scenario, "sequential", base_url, sim)
    con = await latency.run_once(scenario, "concurrent", base_url, sim)
    assert (seq.shape, seq.groups) == (con.shape, con.groups)
    scoring = "pipeline/blackbox_scoring"
    assert {k: v for k, v in seq.groups.items() if k.startswith(scoring)} == {
        f"{scoring}/ideas": 6,
        f"{scoring}/judges": 3,
        f"{scoring}/round_1/variants": 6,
        f"{scoring}/round_1/judges": 3,
        f"{scoring}/round_2/variants": 6,
        f"{scoring}/round_2/judges": 3,
    }
    timed = with_latencies(seq, chat=1.0, image=2.0)
    assert runs.critical_path(scenario, timed) == pytest.approx((1 + 12 + 2, 41 + 2.0))
    stage = latency.scoring_stage(timed)
    assert stage is not None and stage[1] == pytest.approx(7.0)
    # under a limit of 2 calls at a time: ideas 3, judges 1.5, each round 3 + 1.5
    assert timed.shape.cost(scoring, runs.step_latencies(timed), 2) == pytest.approx(14.5)


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
                    messages=(  # words enough for a card that repeats no option 4 times
                        Message(
                            "user",
                            "Pitch a harbour scene at dusk: gulls, wet cobbles, a red sail, "
                            "lamplight in a tavern window, fishermen mending nets, slate roofs, "
                            "a lighthouse beam over the breakwater, low tide and drifting fog",
                        ),
                    ),
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
    are sent again in the run's shape (then image and title together), once through the
    bare SDK and once through raw httpx: the same requests, in a structure-respecting order."""
    seeds = {"dislike_rewrite": 1, "pipeline/a": 2, "pipeline/fan/x": 3, "pipeline/fan/y": 4}
    seeds["title"] = 5
    shape = Shape.of([*list(seeds)[:-1], "image", "title"], {"pipeline/fan": 2})
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
            done = await floor.replay(client, base_url, shape, captured, max_concurrency=4)
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


@pytest.mark.anyio
async def test_the_floor_refuses_requests_of_a_step_the_shape_does_not_have() -> None:
    captured = floor.Captured({"pipeline/a": ({},), "pipeline/gone": ({},)}, ({},))
    with pytest.raises(ValueError, match=r"\['image', 'pipeline/gone'\]"):
        await floor.replay(
            "httpx", "http://127.0.0.1:9/v1", Shape.of(["pipeline/a"], ()), captured, 4
        )


@pytest.mark.anyio
async def test_the_floor_replays_an_evolution_run_in_its_recorded_shape(
    zero_latency: tuple[str, simulator.LatencySimulator],
) -> None:
    """The replay of a run whose scoring steps were run from code: every request once, and a
    round's variants only after round 0's judges have all answered."""
    base_url, sim = zero_latency
    outcome = await latency.run_once(latency.evolution(), "concurrent", base_url, sim)
    by_seed = runs.paths_by_seed(outcome)
    captured = floor.capture(outcome.records, by_seed)
    assert captured.calls == len(outcome.records) == 42
    sim.reset()
    done = await floor.replay("httpx", base_url, outcome.shape, captured, max_concurrency=64)
    assert done.calls == 42
    sent = sorted(json.dumps(r.body, sort_keys=True) for r in sim.records)
    assert sent == sorted(json.dumps(r.body, sort_keys=True) for r in outcome.records)
    paths = [(floor.IMAGE if r.kind == "image" else by_seed[r.seed], r) for r in sim.records]
    judges = [r.finished for p, r in paths if p.startswith(f"{latency.SCORING_STAGE}/judges/")]
    variants = [r.started for p, r in paths if "/round_1/variants/" in p]
    assert len(judges) == 3 and len(variants) == 6 and max(judges) <= min(variants)


def test_the_simulator_refuses_requests_over_its_window_and_its_headers_say_so() -> None:
    sim = simulator.LatencySimulator(chat_median_s=0.0)
    assert sim.window is None, "no limit, no headers"
    sim.set_rate_limit(2, 3600.0)
    window = sim.window
    assert window is not None
    assert window.count() and window.count()
    assert not window.count(), "the third request of the window is refused"
    headers = window.headers()
    assert headers["x-ratelimit-limit-requests"] == "2"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    reset = float(headers["x-ratelimit-reset-requests"].removesuffix("s"))
    assert 0 < reset <= 3600


def test_provenance_calls_code_changes_dirty_but_not_the_results_or_the_docs(
    tmp_path: Path,
) -> None:
    """A bench writes its JSON under bench/results/ (and a reader may edit the pages of docs/)
    while the next bench runs: neither changes the code measured, so neither marks it
    uncommitted."""
    import subprocess

    from provenance import git_commit

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "latency.json").write_text("{}")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "performance.md").write_text("# Performance\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    head, dirty = git_commit(tmp_path)
    assert head is not None and len(head) == 40 and not dirty
    (tmp_path / "bench" / "results" / "latency.json").write_text('{"new": 1}')
    assert git_commit(tmp_path) == (head, False)
    (tmp_path / "docs" / "performance.md").write_text("# Performance, edited\n")
    assert git_commit(tmp_path) == (head, False)
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == (head, True)
