"""run_generation with fake backends: determinism, failure hygiene, prompt-only, modes."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import anyio
import pytest

from image_project.backends.base import TextBackend, TextRequest
from image_project.backends.factory import Backends
from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from image_project.errors import BackendTimeoutError
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.testing import FakeImageBackend, FunctionTextBackend, last_user_text

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[1]


def make_cfg(tmp: Path, *extra: str) -> AppConfig:
    return load_config(
        root=REPO,
        env={},
        overrides=[
            f"image.generation_path={tmp / 'images'}",
            f"image.log_path={tmp / 'logs'}",
            f"prompt.generations_path={tmp / 'generations.csv'}",
            "prompt.random_seed=1234",
            *extra,
        ],
    )


def system_text(request: TextRequest) -> str:
    return next((m.content for m in request.messages if m.role == "system"), "")


def answer(request: TextRequest) -> str:
    """Deterministic, role-aware fake answers."""
    system, user = system_text(request), last_user_text(request)
    if "rewrite art concepts" in system:
        start = user.index("[")
        return json.dumps({"concepts": json.loads(user[start : user.index("]", start) + 1])})
    if "title" in system.lower():
        return "Quiet Harbor Light"
    digest = hashlib.sha256(user.encode()).hexdigest()[:10]
    return f"Answer {digest}: lantern, harbor, teal dusk."


def backends(text: TextBackend) -> Backends:
    return Backends(
        text=text, image=FakeImageBackend(), provider="offline", description="fake backends"
    )


def transcript(tmp: Path) -> dict[str, Any]:
    (path,) = (tmp / "logs").glob("*_transcript.json")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def leftover_files(tmp: Path) -> list[Path]:
    """Anything a failed run left behind besides its transcript, its log and the run store
    (which keeps failed runs too)."""
    return [
        p
        for p in tmp.rglob("*")
        if p.is_file() and p.suffix not in (".json", ".log") and p.name != "runs.sqlite"
    ]


def untimed_steps(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in s.items() if k not in ("created_at", "latency_ms")} for s in data["steps"]
    ]


async def test_same_seed_gives_same_concepts_steps_and_prompts(tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        tmp = tmp_path / name
        await run_generation(make_cfg(tmp), backends(FunctionTextBackend(answer)))
        runs.append(transcript(tmp))
    first, second = runs
    assert first["seed"] == second["seed"] == 1234
    assert first["selected_concepts"] == second["selected_concepts"]
    assert untimed_steps(first) == untimed_steps(second)
    assert first["final_image_prompt"] == second["final_image_prompt"]


async def test_transcript_has_documented_keys_and_ordered_unique_paths(tmp_path: Path) -> None:
    await run_generation(make_cfg(tmp_path), backends(FunctionTextBackend(answer)))
    data = transcript(tmp_path)
    for key in (
        "generation_id",
        "seed",
        "created_at",
        "backend",
        "selected_concepts",
        "steps",
        "final_image_prompt",
        "image_path",
        "title_generation",
        "blackbox_scoring",
        "usage",
        "timing",
        "schema_version",
        "image_bytes",
        "error",
    ):
        assert key in data
    assert data["error"] is None
    assert data["blackbox_scoring"] == {"enabled": False}
    paths = [s["path"] for s in data["steps"]]
    assert len(paths) == len(set(paths))
    assert (
        paths[0] == "dislike_rewrite"
        and paths[1] == "pipeline/initial_prompt/draft"
        and paths[-2:] == ["image", "title"]
    )
    chats = [s for s in data["steps"] if s["type"] == "chat"]
    assert data["usage"]["model_calls"] == len(chats) == len(paths) - 1
    assert data["usage"]["image_calls"] == 1
    assert data["title_generation"]["title"] == "Quiet Harbor Light"


async def test_concurrent_and_sequential_runs_record_the_same_transcript(tmp_path: Path) -> None:
    async def slow_answer(request: TextRequest) -> str:
        await anyio.sleep(rng.random() * 0.003)
        return answer(request)

    rng = random.Random(0)
    results = {}
    for mode in ("sequential", "concurrent"):
        tmp = tmp_path / mode
        await run_generation(
            make_cfg(tmp, f"run.concurrency={mode}"), backends(FunctionTextBackend(slow_answer))
        )
        results[mode] = transcript(tmp)
    assert untimed_steps(results["sequential"]) == untimed_steps(results["concurrent"])
    assert (
        results["sequential"]["final_image_prompt"] == results["concurrent"]["final_image_prompt"]
    )


async def test_failure_mid_stage_writes_transcript_and_no_records(tmp_path: Path) -> None:
    def failing(request: TextRequest) -> str:
        if "working title" in last_user_text(request):
            raise RuntimeError("the model service fell over")
        return answer(request)

    with pytest.raises(RunFailed) as info:
        await run_generation(make_cfg(tmp_path), backends(FunctionTextBackend(failing)))
    assert info.value.phase == "pipeline"
    data = transcript(tmp_path)
    assert data["error"]["type"] == "RuntimeError"
    assert data["error"]["phase"] == "pipeline"
    assert data["error"]["path"] == "pipeline/section_2b_title_and_story/draft"
    assert [s["path"] for s in data["steps"]][-1] == "pipeline/section_2_choice/draft"
    assert not (tmp_path / "generations.csv").exists()
    assert leftover_files(tmp_path) == []


async def test_prompt_only_makes_no_image_and_no_rows(tmp_path: Path) -> None:
    image = FakeImageBackend()
    result = await run_generation(
        make_cfg(tmp_path, "run.mode=prompt_only"),
        Backends(
            text=FunctionTextBackend(answer), image=image, provider="offline", description="fake"
        ),
    )
    assert result.record.image_path is None and result.record.final_image_prompt
    assert image.requests == []
    assert not (tmp_path / "generations.csv").exists()
    assert transcript(tmp_path)["run_mode"] == "prompt_only"


def snapshot(tmp: Path) -> dict[Path, bytes]:
    """Every file but the lock files, which hold nothing and stay on disk by design, and the
    run store, which records failed runs too (tests/store checks what it holds)."""
    return {
        p: p.read_bytes()
        for p in tmp.rglob("*")
        if p.is_file() and p.suffix != ".lock" and p.name != "runs.sqlite"
    }


@pytest.mark.parametrize("first_run", [True, False], ids=["first_run", "after_one_run"])
async def test_failing_generations_append_undoes_the_image_and_the_manifest_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_run: bool
) -> None:
    if not first_run:
        await run_generation(make_cfg(tmp_path), backends(FunctionTextBackend(answer)))
    manifest = tmp_path / "images" / "titles_manifest.csv"
    before = snapshot(tmp_path)
    assert (manifest in before) is not first_run

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("image_project.run.records.append_generation_row", disk_full)
    with pytest.raises(RunFailed) as info:
        await run_generation(
            make_cfg(tmp_path, "prompt.random_seed=99"), backends(FunctionTextBackend(answer))
        )
    assert info.value.phase == "records"
    after = snapshot(tmp_path)
    # Only the failed run's transcript and log are new; every record file is byte-identical.
    assert sorted(p.suffix for p in after.keys() - before.keys()) == [".json", ".log"]
    assert {p: b for p, b in after.items() if p in before} == before


async def test_a_step_that_times_out_after_rejected_answers_keeps_them_in_the_record(
    tmp_path: Path,
) -> None:
    """The dislike rewrite: two answers rejected by its gates, the third request timed out.
    The run's error says it was the third request and keeps both rejected answers."""
    calls = 0

    def fn(request: TextRequest) -> str:
        nonlocal calls
        if "rewrite art concepts" not in system_text(request):
            return answer(request)
        calls += 1
        if calls <= 2:
            return json.dumps({"concepts": ["x"]})  # the wrong count: rejected
        raise BackendTimeoutError("the request timed out (attempt 1 of 1)", attempts=1)

    with pytest.raises(RunFailed) as caught:
        await run_generation(make_cfg(tmp_path), backends(FunctionTextBackend(fn)))
    error = caught.value.error
    assert error.path == "dislike_rewrite" and error.type == "BackendTimeoutError"
    assert error.requests == 3 and len(error.reasks) == 2
    assert "request 3 of the step; 2 earlier answer(s) rejected" in error.message
    data = transcript(tmp_path)
    assert data["error"]["requests"] == 3
    assert [r["response"] for r in data["error"]["reasks"]] == ['{"concepts": ["x"]}'] * 2
