"""The title call runs alongside the image call (both need only the final prompt); a failure in
either cancels the other and is attributed to its own phase. No sleeps: the fakes wait on
events the other call sets, so a run that did not overlap the two would never finish (the
``fail_after`` guard turns that into a failure)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from image_project.backends.base import ImageReply, ImageRequest, TextRequest
from image_project.backends.factory import Backends
from image_project.errors import ServerError
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.testing import FakeImageBackend, FunctionTextBackend
from tests.test_app import answer, leftover_files, make_cfg, system_text, transcript

pytestmark = pytest.mark.anyio

GUARD_S = 30  # only reached when the calls do not overlap (a deadlock by construction)


def is_title(request: TextRequest) -> bool:
    return "title" in system_text(request).lower()


class GatedImage(FakeImageBackend):
    """Answers only once ``gate`` is set (never, if nobody sets it); ``fail`` then raises."""

    def __init__(self, gate: anyio.Event, fail: Exception | None = None) -> None:
        super().__init__()
        self.gate = gate
        self.fail = fail

    async def generate(self, request: ImageRequest) -> ImageReply:
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return await super().generate(request)


def backends(text: FunctionTextBackend, image: FakeImageBackend) -> Backends:
    return Backends(text=text, image=image, provider="offline", description="fake backends")


async def test_the_image_call_waits_for_the_title_call_and_the_run_finishes(
    tmp_path: Path,
) -> None:
    titled = anyio.Event()

    def text(request: TextRequest) -> str:
        if is_title(request):
            titled.set()  # the image call is in flight, waiting for this
        return answer(request)

    with anyio.fail_after(GUARD_S):
        result = await run_generation(
            make_cfg(tmp_path), backends(FunctionTextBackend(text), GatedImage(titled))
        )
    record = result.record
    assert record.error is None and record.title_generation is not None
    assert record.title_generation.title == "Quiet Harbor Light"
    assert [s.path for s in record.steps][-2:] == ["image", "title"]  # the order is declared
    assert set(record.timing.phases_s) >= {"image", "title", "records"}


async def test_a_failing_title_fails_in_phase_title_and_cuts_off_the_image(
    tmp_path: Path,
) -> None:
    def text(request: TextRequest) -> str:
        if is_title(request):
            raise ServerError("the title service fell over", status=503, attempts=1)
        return answer(request)

    with anyio.fail_after(GUARD_S), pytest.raises(RunFailed) as caught:
        await run_generation(
            make_cfg(tmp_path), backends(FunctionTextBackend(text), GatedImage(anyio.Event()))
        )
    assert caught.value.phase == "title"
    assert str(caught.value).startswith("run failed in phase title at title: ServerError")
    data = transcript(tmp_path)
    error = data["error"]
    assert (error["phase"], error["path"], error["type"]) == ("title", "title", "ServerError")
    assert "image" in error["cancelled_paths"]
    (image,) = [s for s in data["steps"] if s["type"] == "image"]
    assert image["error"]["type"] == "cancelled"
    assert image["error"]["message"] == "the title call failed, so the run stopped"
    assert data["title_generation"] is None and data["image_path"] is None
    assert leftover_files(tmp_path) == []


async def test_a_failing_image_fails_in_phase_image_and_cuts_off_the_title(
    tmp_path: Path,
) -> None:
    asked = anyio.Event()
    never = anyio.Event()

    async def text(request: TextRequest) -> str:
        if is_title(request):
            asked.set()  # now the image may fail
            await never.wait()
        return answer(request)

    image = GatedImage(asked, fail=ServerError("the image service fell over", status=500))
    with anyio.fail_after(GUARD_S), pytest.raises(RunFailed) as caught:
        await run_generation(make_cfg(tmp_path), backends(FunctionTextBackend(text), image))
    assert caught.value.phase == "image"
    data = transcript(tmp_path)
    error = data["error"]
    assert (error["phase"], error["path"], error["type"]) == ("image", "image", "ServerError")
    assert error["cancelled_paths"] == ["title"]
    assert not [s for s in data["steps"] if s["path"] == "title"]  # cut off, not answered
    assert data["title_generation"] is None and data["image_path"] is None
    assert leftover_files(tmp_path) == []


async def test_the_sequential_mode_makes_the_title_call_after_the_image(tmp_path: Path) -> None:
    order: list[str] = []

    def text(request: TextRequest) -> str:
        if is_title(request):
            order.append("title")
        return answer(request)

    class Recorded(FakeImageBackend):
        async def generate(self, request: ImageRequest) -> ImageReply:
            order.append("image")
            return await super().generate(request)

    await run_generation(
        make_cfg(tmp_path, "run.concurrency=sequential"),
        backends(FunctionTextBackend(text), Recorded()),
    )
    assert order == ["image", "title"]


async def test_an_interrupt_once_the_image_is_done_is_attributed_to_the_title(
    tmp_path: Path,
) -> None:
    image_done = anyio.Event()

    def emit(line: str) -> None:
        if "✓ image from" in line:
            image_done.set()

    with anyio.fail_after(GUARD_S), anyio.CancelScope() as scope:

        async def text(request: TextRequest) -> str:
            if is_title(request):
                await image_done.wait()
                scope.cancel()  # the interrupt, while the title call is in flight
                await anyio.sleep_forever()
            return answer(request)

        await run_generation(
            make_cfg(tmp_path), backends(FunctionTextBackend(text), FakeImageBackend()), emit=emit
        )
    error = transcript(tmp_path)["error"]
    assert (error["type"], error["phase"]) == ("interrupted", "title")
    assert error["cancelled_paths"] == ["title"]
