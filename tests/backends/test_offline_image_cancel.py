"""The offline image drawing can be cancelled: the caller is released at once and the drawing
in its worker thread stops at its next check instead of finishing the picture (a 4096x4096
one takes seconds). Checking never changes the picture."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import anyio
import pytest

from image_project.backends.base import ImageRequest
from image_project.backends.offline import drawing as offline_drawing
from image_project.backends.offline.image import OfflineImageBackend

pytestmark = pytest.mark.anyio


async def test_a_cancelled_drawing_releases_the_caller_and_stops_at_its_next_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drawing = threading.Event()  # the worker thread is inside the drawing
    resume = threading.Event()  # let it go on, once the caller has been released
    ended: list[BaseException | None] = []
    done = threading.Event()
    render = offline_drawing.render

    def watched(
        size: tuple[int, int],
        names: list[str],
        layout: str,
        rng: random.Random,
        check: Callable[[], None],
    ) -> bytes:
        def paused_check() -> None:
            if not drawing.is_set():
                drawing.set()
                assert resume.wait(timeout=30)
            check()

        try:
            data = render(size, names, layout, rng, paused_check)
        except BaseException as exc:
            ended.append(exc)
            raise
        else:
            ended.append(None)
            return data
        finally:
            done.set()

    monkeypatch.setattr(offline_drawing, "render", watched)
    request = ImageRequest("a teal harbour at dusk", size="512x512", seed=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(OfflineImageBackend().generate, request)
        assert await anyio.to_thread.run_sync(drawing.wait, 30)
        tg.cancel_scope.cancel()
    # The caller is back while the drawing is still paused in its thread (abandoned).
    assert not done.is_set()
    resume.set()
    assert await anyio.to_thread.run_sync(done.wait, 30)
    (outcome,) = ended
    assert isinstance(outcome, anyio.get_cancelled_exc_class()), "the drawing ran to its end"


def test_the_checks_do_not_change_the_picture_and_come_often() -> None:
    calls = 0

    def count() -> None:
        nonlocal calls
        calls += 1

    def draw(check: Callable[[], None] | None) -> bytes:
        names = ["teal", "crimson", "ochre"]
        if check is None:
            return offline_drawing.render((640, 480), names, "close_up", random.Random(3))
        return offline_drawing.render((640, 480), names, "close_up", random.Random(3), check)

    assert draw(count) == draw(None)
    # Before each gradient and glow, between the finishing passes, before each PNG chunk.
    assert calls >= 10
