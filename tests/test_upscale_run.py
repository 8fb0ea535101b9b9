"""The 4K image in whole runs (README "Upscale"): an offline run with ``upscale.enabled``
writes a 3840-long-edge captioned JPEG, records it (transcript, manifest, summary, progress,
phase time) and the review site shows and links it; a missing upscaler without the fallback
exits 2 before any model call; the upscaler binary's result and failure; and the records
phase's all-or-nothing writes cover the 4K image.

The CLI runs in-process (``cli.main``) with an explicit environment: without ``PATH`` no
realesrgan-ncnn-vulkan can be found, whatever is installed on the machine.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from PIL import Image, ImageChops, ImageOps, ImageStat

from image_project.artifacts.upscale import BINARY_ENV_VAR
from image_project.backends.base import ImageRequest, TextRequest
from image_project.backends.factory import Backends
from image_project.backends.offline.image import OfflineImageBackend
from image_project.cli.command import main
from image_project.config.models import AppConfig
from image_project.errors import UpscaleError
from image_project.preflight import check_upscale
from image_project.run.driver import run_generation
from image_project.run.state import RunFailed
from image_project.seeding import derive_seed
from image_project.testing import FakeImageBackend, FunctionTextBackend, last_user_text
from tests.artifacts.test_manifest_4k_columns import old_manifest
from tests.artifacts.test_upscale import POSIX_ONLY, fake_upscaler
from tests.test_app import make_cfg
from tests.test_cli import write_config

REPO = Path(__file__).resolve().parents[1]
ON = ("upscale.enabled=true",)
FALLBACK = (*ON, "upscale.allow_fallback_resize=true")


def cli(tmp: Path, *args: str, env: dict[str, str] | None = None) -> int:
    sets = [part for item in args for part in ("--set", item)]
    return main(["--config", str(write_config(tmp)), *sets], env=env or {}, root=REPO)


def transcript(tmp: Path) -> dict[str, Any]:
    (path,) = (tmp / "out" / "logs").glob("*_transcript.json")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def manifest_rows(tmp: Path) -> list[dict[str, str]]:
    with (tmp / "out" / "images" / "titles_manifest.csv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def quantization_of(image: Image.Image, **save: Any) -> object:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", **save)
    with Image.open(buffer) as encoded:
        return getattr(encoded, "quantization", None)


# --------------------------------------------------------------------------- whole runs


def test_an_offline_run_writes_a_captioned_4k_jpeg_and_the_review_site_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(tmp_path, "prompt.random_seed=42", *FALLBACK) == 0
    out, err = capsys.readouterr()
    data = transcript(tmp_path)
    gid = data["generation_id"]
    up = data["upscale"]
    path = tmp_path / "out" / "images" / f"{gid}_image_4k.jpg"
    assert up == {
        "path": str(path),
        "bytes": path.stat().st_size,
        "size": "3840x2560",
        "source_size": "1536x1024",
        "method": "lanczos_resize",
        "upscaler": None,
        "model": None,
    }
    # The summary, the progress lines and the records phase's time say so.
    assert f"  Image 4K    {path} (3840x2560, lanczos_resize, {up['bytes']:,} bytes)" in out
    assert "✓ upscale: 1536x1024 -> 3840x2560 by lanczos_resize (" in err
    assert re.search(rf"✓ records: image #001, [\d,]+ bytes; 4K image {up['bytes']:,} bytes", err)
    phases = data["timing"]["phases_s"]
    assert 0 < phases["upscale"] <= phases["records"]

    with Image.open(path) as image:
        assert (image.format, image.size) == ("JPEG", (3840, 2560))
        quality_95 = quantization_of(Image.new("RGB", (8, 8)), quality=95)
        assert quality_95 and getattr(image, "quantization", None) == quality_95
        big = image.convert("RGB")
    # The caption was put on after the resize: against the uncaptioned offline image (it is
    # deterministic) brought to 3840x2560 the same way, only the bottom strip differs.
    raw = anyio.run(
        OfflineImageBackend().generate,
        ImageRequest(
            prompt=data["final_image_prompt"],
            model="offline-image-1",
            size="1536x1024",
            quality="high",
            seed=derive_seed(42, "image"),
        ),
    )
    with Image.open(io.BytesIO(raw.data)) as original:
        plain = ImageOps.fit(original.convert("RGB"), (3840, 2560), Image.Resampling.LANCZOS)
    diff = ImageChops.difference(plain, big)
    assert max(ImageStat.Stat(diff.crop((0, 0, 3840, 1280))).mean) < 6  # JPEG noise only
    assert sum(ImageStat.Stat(diff.crop((0, 2490, 3840, 2560))).mean) / 3 > 20  # the strip

    (row,) = manifest_rows(tmp_path)
    assert (row["upscaled_path"], row["upscaled_size"], row["upscale_method"]) == (
        str(path),
        "3840x2560",
        "lanczos_resize",
    )

    # The review site (from the run store) copies the 4K file and shows and links it.
    site = tmp_path / "site"
    assert main(["review", "--config", str(tmp_path / "my_config.yaml"), "--out", str(site)]) == 0
    copied = site / "images" / f"{gid}.4k.jpg"
    assert copied.read_bytes() == path.read_bytes()
    page = (site / "runs" / f"{gid}.html").read_text(encoding="utf-8")
    assert f'<a class="download" href="../images/{gid}.4k.jpg">3840x2560 JPEG</a>' in page
    assert f'<img src="../images/{gid}.4k.jpg"' in page
    assert "lanczos_resize from 1536x1024" in page
    gallery = (site / "index.html").read_text(encoding="utf-8")
    assert f'href="images/{gid}.4k.jpg">4K (3840x2560)</a>' in gallery


@pytest.mark.parametrize(
    ("extra", "env", "message"),
    [
        ((), {}, "no upscaler found (this key is not set, $REALESRGAN_NCNN_VULKAN_PATH is not"),
        (
            ("upscale.allow_fallback_resize=true", "upscale.realesrgan_binary=/nowhere/esrgan"),
            {},
            "got /nowhere/esrgan, which does not exist",
        ),
        ((), {BINARY_ENV_VAR: "/nowhere/esrgan"}, "$REALESRGAN_NCNN_VULKAN_PATH names"),
    ],
    ids=["not_found", "configured_path_missing", "variable_path_missing"],
)
def test_a_missing_upscaler_without_the_fallback_exits_2_before_any_call(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    env: dict[str, str],
    message: str,
) -> None:
    assert cli(tmp_path, *ON, *extra, env=env) == 2
    out, err = capsys.readouterr()
    assert err.startswith("configuration error: upscale.realesrgan_binary: ")
    assert message in err
    assert out == ""  # not even the backend line: no run started
    assert not (tmp_path / "out").exists()  # no transcript, log, image or row


def test_a_prompt_only_run_needs_no_upscaler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(tmp_path, *ON, "run.mode=prompt_only") == 0
    assert transcript(tmp_path)["upscale"] is None
    assert "Image 4K" not in capsys.readouterr().out


# --------------------------------------------------------------------------- the binary


@POSIX_ONLY
@pytest.mark.subprocess
def test_a_run_with_the_upscaler_binary_records_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = fake_upscaler(tmp_path / "bin")
    small = ("image.size=64x48", "upscale.target_long_edge_px=256")
    assert cli(tmp_path, *ON, *small, env={"PATH": str(binary.parent)}) == 0
    up = transcript(tmp_path)["upscale"]
    assert (up["method"], up["size"], up["source_size"]) == ("realesrgan", "256x192", "64x48")
    assert (up["upscaler"], up["model"]) == (str(binary.resolve()), "realesrgan-x4plus")
    with Image.open(up["path"]) as image:
        assert image.size == (256, 192)
    assert "(256x192, realesrgan," in capsys.readouterr().out


# --------------------------------------------------------------------------- all or nothing


def answer(request: TextRequest) -> str:
    system = next((m.content for m in request.messages if m.role == "system"), "")
    user = last_user_text(request)
    if "rewrite art concepts" in system:
        start = user.index("[")
        return json.dumps({"concepts": json.loads(user[start : user.index("]", start) + 1])})
    if "title" in system.lower():
        return "Quiet Harbor Light"
    return "A lantern over a teal harbour at dusk."


def run_cfg(tmp: Path, *extra: str) -> AppConfig:
    """tests/test_app.py's config, at seed 5, one refinement-free pass and small images."""
    small = ("prompt.random_seed=5", "prompt.refinement=none", "image.size=64x48")
    return make_cfg(tmp, *small, "upscale.target_long_edge_px=128", *extra)


def fake_backends() -> Backends:
    return Backends(
        text=FunctionTextBackend(answer),
        image=FakeImageBackend(),
        provider="offline",
        description="fake backends",
    )


def snapshot(tmp: Path) -> dict[Path, bytes]:
    """Every file but lock files (empty by design) and the run store (keeps failed runs)."""
    return {
        p: p.read_bytes()
        for p in tmp.rglob("*")
        if p.is_file() and p.suffix != ".lock" and p.name != "runs.sqlite"
    }


@pytest.mark.anyio
@pytest.mark.parametrize("manifest", ["none", "old", "current"])
async def test_a_failed_records_phase_leaves_no_4k_image_and_the_manifest_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manifest: str
) -> None:
    cfg = run_cfg(tmp_path, *FALLBACK)
    if manifest == "old":  # written before the 4K columns: this run would upgrade its header
        (tmp_path / "images").mkdir()
        old_manifest(tmp_path / "images" / "titles_manifest.csv")
    elif manifest == "current":
        await run_generation(cfg, fake_backends())
    before = snapshot(tmp_path)

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("image_project.run.records.append_generation_row", disk_full)
    with pytest.raises(RunFailed) as info:
        await run_generation(run_cfg(tmp_path, *FALLBACK, "prompt.random_seed=6"), fake_backends())
    assert info.value.phase == "records"
    assert info.value.record.upscale is None
    after = snapshot(tmp_path)
    assert sorted(p.suffix for p in after.keys() - before.keys()) == [".json", ".log"]
    assert {p: b for p, b in after.items() if p in before} == before


@POSIX_ONLY
@pytest.mark.anyio
@pytest.mark.subprocess
async def test_an_upscaler_that_fails_fails_the_run_in_records_and_writes_nothing(
    tmp_path: Path,
) -> None:
    binary = fake_upscaler(tmp_path / "bin", "fail")
    cfg = run_cfg(tmp_path / "run", *ON)
    settings = check_upscale(cfg, {"PATH": str(binary.parent)})
    with pytest.raises(RunFailed) as info:
        await run_generation(cfg, fake_backends(), upscale=settings)
    assert info.value.phase == "records" and info.value.error.type == "UpscaleError"
    assert isinstance(info.value.__cause__, UpscaleError)
    assert (
        "exited with status 3; stderr tail: vkCreateInstance failed -9" in info.value.error.message
    )
    assert not list((tmp_path / "run").rglob("*.jpg"))
    assert not (tmp_path / "run" / "images" / "titles_manifest.csv").exists()
    assert not (tmp_path / "run" / "generations.csv").exists()
