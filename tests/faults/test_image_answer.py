"""An image answer that is not a readable image: the real ``openai`` client against the local
scripted server, which answers the image call with base64 of bytes that are no image (an HTML
error page, a PNG cut short, a PNG with a damaged byte).

The image is decoded and checked in phase ``image``, right after the call: the run fails
there with a message saying what the bytes are (the title call, which goes alongside the
image call, is recorded or cut off, never written as a title); the image step is recorded
with the error and the run's error names it. Before, the bytes were
only decoded when the captioned JPEG was written, in phase ``records``, after the title
call, and the message showed Pillow's ``<_io.BytesIO object at 0x…>``."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from PIL import Image

from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from tests.faults.common import http_backends, images, make_cfg, read_rows, transcripts
from tests.support import RecordingSleep
from tests.support.openai_server import OpenAIServer, Reply, image_response

pytestmark = pytest.mark.anyio


def noisy_png() -> bytes:
    rng = random.Random(5)
    buffer = io.BytesIO()
    Image.frombytes("RGB", (64, 64), rng.randbytes(64 * 64 * 3)).save(buffer, format="PNG")
    return buffer.getvalue()


def damaged(data: bytes) -> bytes:
    middle = len(data) // 2  # inside the pixel data (IDAT), whose checksum then fails
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


PNG = noisy_png()
PAYLOADS = {
    "html_error_page": b"<html><body><h1>502 Bad Gateway</h1></body></html>",
    "png_cut_short": PNG[: len(PNG) // 2],
    "png_damaged": damaged(PNG),
}


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
async def test_an_undecodable_image_fails_in_phase_image(
    tmp_path: Path, allow_loopback: None, payload: str
) -> None:
    data = PAYLOADS[payload]
    with OpenAIServer(offline=True) as server:
        server.rule(lambda r: r.is_image, Reply(body=image_response(data)))
        async with http_backends(server, RecordingSleep()) as backends:
            with pytest.raises(RunFailed) as caught:
                await run_generation(make_cfg(tmp_path), backends)
        requests = server.requests

    # The image was not retried.
    assert sum(r.is_image for r in requests) == 1
    message = str(caught.value)
    assert message.startswith(
        "run failed in phase image at image: ModelOutputError: undecodable_image: "
        f"the image backend answered with data that is not a readable image ({len(data):,} bytes"
    ), message
    assert "BytesIO" not in message and "0x" not in message

    (t,) = transcripts(tmp_path)
    error = t["error"]
    assert (error["type"], error["phase"], error["path"], error["reason"]) == (
        "ModelOutputError",
        "image",
        "image",
        "undecodable_image",
    )
    assert error["output_preview"] == repr(data[:32])
    image = next(s for s in t["steps"] if s["type"] == "image")
    after = t["steps"][t["steps"].index(image) + 1 :]
    assert all(s["path"].startswith("title") for s in after), after  # the title's, if any
    assert image["received_bytes"] == len(data) and image["attempts"] == 1
    assert (image["error"]["type"], image["error"]["reason"]) == (
        "ModelOutputError",
        "undecodable_image",
    )
    assert t["usage"]["image_calls"] == 1  # it answered (and was paid for)
    assert t["title_generation"] is None and t["image_path"] is None
    assert images(tmp_path) == [] and read_rows(tmp_path / "out" / "generations.csv") == []
