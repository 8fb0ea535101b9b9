"""docs/upscale.md: a run interrupted while the upscaler binary works kills the binary and
writes nothing (no image, no 4K image, no manifest or generations row), its transcript
saying it was interrupted in phase ``records``.

The stand-in binary (tests/artifacts/test_upscale.py) records its pid and hangs; the test
cancels the run once the binary's start is recorded, told so by the run's own cancellation
check (no sleep)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.from_thread
import pytest

from image_project.preflight import check_upscale
from image_project.run.driver import run_generation
from tests.artifacts.test_upscale import POSIX_ONLY, calls, fake_upscaler
from tests.test_upscale_run import ON, fake_backends, run_cfg

pytestmark = [POSIX_ONLY, pytest.mark.subprocess, pytest.mark.anyio]


async def test_an_interrupt_during_the_upscale_kills_the_binary_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = fake_upscaler(tmp_path / "bin", "hang")
    out = tmp_path / "run"
    cfg = run_cfg(out, *ON, "upscale.timeout_s=30")  # a broken kill fails, never hangs
    settings = check_upscale(cfg, {"PATH": str(binary.parent)})
    started = anyio.Event()
    check: Callable[[], None] = anyio.from_thread.check_cancelled

    def checked() -> None:
        """The run's cancellation check, polled while the binary runs: once the binary has
        started, tell the test (from the worker thread) before checking."""
        if calls(binary) and not started.is_set():
            anyio.from_thread.run_sync(started.set)
        check()

    monkeypatch.setattr(anyio.from_thread, "check_cancelled", checked)
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            await run_generation(cfg, fake_backends(), upscale=settings)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await started.wait()
        scope.cancel()

    (call,) = calls(binary)
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(int(str(call["pid"])), 0)
    assert not list(out.rglob("*.jpg"))
    assert not (out / "images" / "titles_manifest.csv").exists()
    assert not (out / "generations.csv").exists()
    (transcript,) = (out / "logs").glob("*_transcript.json")
    data = json.loads(transcript.read_text(encoding="utf-8"))
    assert (data["error"]["type"], data["error"]["phase"]) == ("interrupted", "records")
    assert data["upscale"] is None and data["image_path"] is None
