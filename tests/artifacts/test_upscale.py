"""The 4K image (artifacts/upscale.py): target sizes, the choice of method, the Lanczos fit
and fallback, the upscaler binary (found, checked, run, failing, timing out, cancelled) and
the caption put on after the resize at a size that reads the same.

The binary is never the real realesrgan-ncnn-vulkan: :func:`fake_upscaler` writes a small
stand-in script (this interpreter, Pillow) that records its arguments and writes an x4 PNG,
or fails, hangs or writes nothing as asked. Tests that start it are marked ``subprocess``.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import threading
from pathlib import Path

import pytest
from PIL import Image

from image_project.artifacts.image import caption_layout, caption_text, save_captioned_frame
from image_project.artifacts.upscale import (
    BINARY_ENV_VAR,
    BINARY_NAME,
    Upscaler,
    UpscaleSettings,
    UpscaleTarget,
    choose_method,
    find_upscaler,
    run_upscaler,
    save_upscaled,
    upscale_frame,
    upscaled_path,
)
from image_project.errors import ConfigError, UpscaleError

MODEL = "realesrgan-x4plus"
POSIX_ONLY = pytest.mark.skipif(sys.platform == "win32", reason="the stand-in is a #! script")

FAKE = """#!{python}
# A stand-in for realesrgan-ncnn-vulkan, written by tests/artifacts/test_upscale.py.
import json, os, sys, threading
from pathlib import Path

MODE = {mode!r}
args = sys.argv[1:]
with Path(__file__).with_name("calls.jsonl").open("a") as log:
    log.write(json.dumps({{"argv": args, "pid": os.getpid()}}) + "\\n")
if MODE == "fail":
    print("realesrgan: loading the model", flush=True)
    print("vkCreateInstance failed -9", file=sys.stderr, flush=True)
    sys.exit(3)
if MODE == "hang":
    threading.Event().wait()
if MODE == "nothing":
    sys.exit(0)
values, rest = {{}}, list(args)
while rest:
    flag = rest.pop(0)
    if flag != "-x":
        values[flag] = rest.pop(0)
from PIL import Image

scale = int(values["-s"])
with Image.open(values["-i"]) as image:
    image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST).save(
        values["-o"], format="PNG"
    )
"""


def fake_upscaler(directory: Path, mode: str = "ok", *, models: bool = True) -> Path:
    """An executable stand-in binary in ``directory`` (with ``models/<MODEL>.param|.bin``
    beside it unless ``models`` is false). ``mode``: ``ok`` (x4 PNG), ``fail`` (exit 3 with
    output), ``hang`` (never ends), ``nothing`` (exit 0, no file)."""
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / BINARY_NAME
    binary.write_text(FAKE.format(python=sys.executable, mode=mode), encoding="utf-8")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    if models:
        (directory / "models").mkdir(exist_ok=True)
        for suffix in (".param", ".bin"):
            (directory / "models" / f"{MODEL}{suffix}").write_bytes(b"weights")
    return binary


def calls(binary: Path) -> list[dict[str, object]]:
    log = binary.with_name("calls.jsonl")
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def upscaler(
    binary: Path, *, tile_size: int = 0, tta: bool = False, timeout_s: float = 600.0
) -> Upscaler:
    found = find_upscaler(
        binary=binary,
        model_dir=None,
        model_name=MODEL,
        env={},
        tile_size=tile_size,
        tta=tta,
        timeout_s=timeout_s,
    )
    assert found is not None
    return found


def gradient(width: int, height: int) -> Image.Image:
    image = Image.new("RGBA", (width, height))
    image.putdata(
        [
            (x * 255 // width, y * 255 // height, 90, 255)
            for y in range(height)
            for x in range(width)
        ]
    )
    return image


# --------------------------------------------------------------------------- target and method


@pytest.mark.parametrize(
    ("target", "source", "expected"),
    [
        (UpscaleTarget(), (1536, 1024), (3840, 2560)),
        (UpscaleTarget(), (1024, 1536), (2560, 3840)),
        (UpscaleTarget(), (1024, 1024), (3840, 3840)),
        (UpscaleTarget(aspect=16 / 9), (1536, 1024), (3840, 2160)),
        (UpscaleTarget(aspect=9 / 16), (1536, 1024), (2160, 3840)),
        (UpscaleTarget(long_edge=1920, aspect=1.0), (640, 480), (1920, 1920)),
        (UpscaleTarget(size=(3000, 2000), aspect=None), (1536, 1024), (3000, 2000)),
    ],
)
def test_the_target_size(
    target: UpscaleTarget, source: tuple[int, int], expected: tuple[int, int]
) -> None:
    assert target.of(source) == expected


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        ((3840, 2560), UpscaleTarget(), "copy"),  # exactly there
        ((4096, 2048), UpscaleTarget(), "copy"),  # long edge already >= 3840, no size asked
        ((3000, 2000), UpscaleTarget(size=(3000, 2000)), "copy"),  # exactly the asked size
        ((4096, 4096), UpscaleTarget(aspect=16 / 9), "lanczos_fit"),  # larger: crop and fit
        ((4096, 2560), UpscaleTarget(size=(3840, 2160)), "lanczos_fit"),
        ((1536, 1024), UpscaleTarget(), "realesrgan"),
        ((4096, 2048), UpscaleTarget(aspect=1.0), "realesrgan"),  # too short for 3840x3840
    ],
)
def test_the_method_follows_the_reference_cases(
    source: tuple[int, int], target: UpscaleTarget, expected: str
) -> None:
    assert choose_method(source, target, upscaler=True, allow_fallback=False) == expected


def test_without_an_upscaler_the_fallback_resizes_or_the_upscale_fails() -> None:
    small = (1536, 1024)
    target = UpscaleTarget()
    assert choose_method(small, target, upscaler=False, allow_fallback=True) == "lanczos_resize"
    with pytest.raises(UpscaleError, match=r"1536x1024 image needs an upscaler to reach 3840x2560"):
        choose_method(small, target, upscaler=False, allow_fallback=False)
    # Copying and fitting down need no upscaler.
    assert choose_method((4000, 3000), target, upscaler=False, allow_fallback=False) == "copy"


def test_the_fallback_resizes_to_the_target_and_a_fit_crops_to_its_ratio() -> None:
    settings = UpscaleSettings(UpscaleTarget(long_edge=160), None, True, Path("unused"))
    resized = upscale_frame(gradient(64, 48), settings)
    assert (resized.method, resized.source_size, resized.size) == (
        "lanczos_resize",
        (64, 48),
        (160, 120),
    )
    assert resized.frame is not None and resized.frame.size == (160, 120)
    assert resized.frame.mode == "RGB"

    square = UpscaleSettings(UpscaleTarget(size=(160, 90)), None, False, Path("unused"))
    fitted = upscale_frame(gradient(200, 200), square)
    assert fitted.method == "lanczos_fit" and fitted.frame is not None
    assert fitted.frame.size == (160, 90)
    # Centre crop: the middle column of the source (red 127) is the middle of the result.
    middle = fitted.frame.getpixel((80, 45))
    assert isinstance(middle, tuple) and abs(middle[0] - 127) <= 3


def test_a_copy_is_the_captioned_image_byte_for_byte(tmp_path: Path) -> None:
    base = tmp_path / "images" / "g_image.jpg"
    save_captioned_frame(gradient(96, 64), base, "#001 - Copy")
    settings = UpscaleSettings(UpscaleTarget(long_edge=96), None, False, tmp_path / "4k")
    upscaled = upscale_frame(gradient(96, 64), settings)
    assert upscaled.method == "copy" and upscaled.frame is None
    target = upscaled_path(settings.directory, "g")
    saved = save_upscaled(upscaled, target, base_image=base, caption="#001 - Copy")
    assert target == tmp_path / "4k" / "g_image_4k.jpg"
    assert target.read_bytes() == base.read_bytes()
    assert (saved.bytes, saved.size, saved.method) == (base.stat().st_size, (96, 64), "copy")


# --------------------------------------------------------------------------- the caption


def test_the_caption_reads_the_same_at_4k() -> None:
    """The 4K image's caption is the base image's, scaled with the image: the same lines,
    and the strip, the font, the text's width and its shadow grow by the same factor."""
    text = caption_text(12, "Lanterns Over The Quiet Harbour")
    base, big = caption_layout((1536, 1024), text), caption_layout((3840, 2560), text)
    scale = 2560 / 1024
    assert big.lines == base.lines
    assert big.font_size / base.font_size == pytest.approx(scale, rel=0.04)
    assert (2560 - big.strip_top) / (1024 - base.strip_top) == pytest.approx(scale, rel=0.04)
    width = [box[2] - box[0] for box in (base.boxes[0], big.boxes[0])]
    assert width[1] / width[0] == pytest.approx(scale, rel=0.04)
    assert (base.shadow, big.shadow) == (1, 2)


def test_the_4k_image_is_captioned_after_the_resize(tmp_path: Path) -> None:
    flat = Image.new("RGB", (64, 48), (200, 160, 90))
    settings = UpscaleSettings(UpscaleTarget(long_edge=256), None, True, tmp_path)
    upscaled = upscale_frame(flat, settings)
    base = tmp_path / "base.jpg"
    save_captioned_frame(flat, base, "#003 - Flat")
    saved = save_upscaled(upscaled, tmp_path / "big.jpg", base_image=base, caption="#003 - Flat")
    with Image.open(saved.path) as out:
        assert (out.format, out.size) == ("JPEG", (256, 192))
        rgb = out.convert("RGB")
    # The strip is where the 4K layout puts it (the base's, scaled up, would be 4x as tall:
    # a 64x48 image's caption is at its minimum sizes).
    strip_top = caption_layout((256, 192), "#003 - Flat").strip_top
    base_strip = 48 - caption_layout((64, 48), "#003 - Flat").strip_top
    assert 192 - strip_top < 4 * base_strip / 2
    above, inside = rgb.getpixel((2, strip_top - 3)), rgb.getpixel((2, strip_top + 3))
    assert isinstance(above, tuple) and isinstance(inside, tuple)
    assert all(abs(a - b) <= 6 for a, b in zip(above, (200, 160, 90), strict=True))
    assert sum(above) > sum(inside) + 100  # the translucent strip starts there


# --------------------------------------------------------------------------- finding the binary


def test_a_configured_binary_that_is_missing_or_unusable_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as missing:
        find_upscaler(binary=tmp_path / "nope", model_dir=None, model_name=MODEL, env={})
    assert missing.value.key == "upscale.realesrgan_binary"
    assert f"got {tmp_path / 'nope'}, which does not exist" in str(missing.value)
    plain = tmp_path / "plain"
    plain.write_text("not executable", encoding="utf-8")
    plain.chmod(0o644)
    if os.access(plain, os.X_OK):  # root can run anything with an x bit; not this file
        pytest.skip("running as a user who may execute any file")
    with pytest.raises(ConfigError, match="is not executable"):
        find_upscaler(binary=plain, model_dir=None, model_name=MODEL, env={})
    with pytest.raises(ConfigError, match="is not a file"):
        find_upscaler(binary=tmp_path, model_dir=None, model_name=MODEL, env={})


@POSIX_ONLY
def test_the_binary_is_the_configured_one_then_the_variable_then_path(tmp_path: Path) -> None:
    configured = fake_upscaler(tmp_path / "configured")
    named = fake_upscaler(tmp_path / "named")
    on_path = fake_upscaler(tmp_path / "bin")
    env = {BINARY_ENV_VAR: str(named), "PATH": str(on_path.parent)}

    def found(binary: Path | None, environ: dict[str, str]) -> Path | None:
        result = find_upscaler(binary=binary, model_dir=None, model_name=MODEL, env=environ)
        return None if result is None else result.binary

    assert found(configured, env) == configured.resolve()
    assert found(None, env) == named.resolve()
    assert found(None, {"PATH": env["PATH"]}) == on_path.resolve()
    assert found(None, {}) is None
    with pytest.raises(ConfigError) as bad:
        found(None, {BINARY_ENV_VAR: str(tmp_path / "gone")})
    assert bad.value.key == "upscale.realesrgan_binary"
    assert f"${BINARY_ENV_VAR} names {tmp_path / 'gone'}, which does not exist" in str(bad.value)


@POSIX_ONLY
def test_the_model_files_must_be_there(tmp_path: Path) -> None:
    bare = fake_upscaler(tmp_path / "bare", models=False)
    with pytest.raises(ConfigError) as nothing:
        find_upscaler(binary=bare, model_dir=None, model_name=MODEL, env={})
    assert nothing.value.key == "upscale.model_path"
    assert f"{MODEL}.param or {MODEL}.bin" in str(nothing.value)
    with pytest.raises(ConfigError, match=r"model directory .* does not exist"):
        find_upscaler(binary=bare, model_dir=tmp_path / "none", model_name=MODEL, env={})
    own = tmp_path / "own_models"
    own.mkdir()
    (own / "anime.param").write_bytes(b"p")
    with pytest.raises(ConfigError, match=r"has no anime\.bin"):
        find_upscaler(binary=bare, model_dir=own, model_name="anime", env={})
    (own / "anime.bin").write_bytes(b"b")
    found = find_upscaler(binary=bare, model_dir=own, model_name="anime", env={})
    assert found is not None and found.model_dir == own.resolve()


# --------------------------------------------------------------------------- running the binary


@POSIX_ONLY
@pytest.mark.subprocess
def test_the_binary_upscales_x4_and_the_result_is_fitted_to_the_target(tmp_path: Path) -> None:
    binary = fake_upscaler(tmp_path / "bin")
    settings = UpscaleSettings(
        UpscaleTarget(long_edge=64), upscaler(binary, tile_size=64, tta=True), False, tmp_path
    )
    upscaled = upscale_frame(gradient(16, 12), settings)
    assert upscaled.method == "realesrgan" and upscaled.frame is not None
    assert upscaled.frame.size == (64, 48)  # exactly x4: no further fit needed
    (call,) = calls(binary)
    argv = call["argv"]
    assert isinstance(argv, list)
    assert argv[argv.index("-n") + 1] == MODEL and argv[argv.index("-s") + 1] == "4"
    assert argv[argv.index("-t") + 1] == "64" and "-x" in argv
    assert argv[argv.index("-m") + 1] == str((tmp_path / "bin" / "models").resolve())
    # The temporary PNGs are gone.
    assert not Path(argv[argv.index("-i") + 1]).parent.exists()

    # x4 of 16x12 is 64x48; a 100x75 target is then reached by a Lanczos fit.
    wider = UpscaleSettings(UpscaleTarget(size=(100, 75)), upscaler(binary), False, tmp_path)
    fitted = upscale_frame(gradient(16, 12), wider)
    assert fitted.method == "realesrgan" and fitted.frame is not None
    assert fitted.frame.size == (100, 75)


@POSIX_ONLY
@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("mode", "message"),
    [
        (
            "fail",
            r"exited with status 3; stderr tail: vkCreateInstance failed -9; stdout tail: "
            r"realesrgan: loading the model",
        ),
        ("nothing", r"left no readable image at output_x4\.png"),
    ],
)
def test_a_failing_binary_is_an_upscale_error_with_its_output(
    tmp_path: Path, mode: str, message: str
) -> None:
    binary = fake_upscaler(tmp_path / "bin", mode)
    with pytest.raises(UpscaleError, match=message) as info:
        run_upscaler(upscaler(binary), gradient(8, 8))
    assert str(binary.resolve()) in str(info.value)


@POSIX_ONLY
@pytest.mark.subprocess
def test_a_binary_that_outlives_its_timeout_is_killed(tmp_path: Path) -> None:
    binary = fake_upscaler(tmp_path / "bin", "hang")
    with pytest.raises(UpscaleError, match=r"did not finish within 0\.3 s"):
        run_upscaler(upscaler(binary, timeout_s=0.3), gradient(8, 8))
    (call,) = calls(binary)
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(int(str(call["pid"])), 0)


class Stop(Exception):
    pass


@POSIX_ONLY
@pytest.mark.subprocess
def test_a_cancelled_run_kills_the_binary(tmp_path: Path) -> None:
    """``check`` raising (as ``anyio.from_thread.check_cancelled`` does in a cancelled run)
    kills the binary at once: here once the stand-in has started and is hanging."""
    binary = fake_upscaler(tmp_path / "bin", "hang")

    def check() -> None:
        if calls(binary):
            raise Stop

    with pytest.raises(Stop):
        run_upscaler(upscaler(binary, timeout_s=600), gradient(8, 8), check)
    (call,) = calls(binary)
    with pytest.raises(ProcessLookupError):
        os.kill(int(str(call["pid"])), 0)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (gone, or a zombie nobody reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat_file = Path(f"/proc/{pid}/stat")
    return stat_file.exists() and stat_file.read_text().split(")")[-1].split()[0] == "Z"


@POSIX_ONLY
@pytest.mark.subprocess
def test_a_timeout_kills_a_wrapper_scripts_children_holding_its_pipes(tmp_path: Path) -> None:
    """A wrapper script whose child keeps stdout open: the timeout kills the whole process
    group, so the call ends at the timeout instead of when the child lets go of the pipes
    (the thread's bound only ends a broken test)."""
    binary = fake_upscaler(tmp_path / "bin", "ok")
    child_pid = tmp_path / "child.pid"
    binary.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {child_pid}\nwait\n", encoding="utf-8")
    failure: list[BaseException] = []

    def call() -> None:
        try:
            run_upscaler(upscaler(binary, timeout_s=2.0), gradient(8, 8))
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(60.0)
    pid = int(child_pid.read_text().strip())
    try:
        assert not worker.is_alive(), "the upscale outlived its timeout: the child was not killed"
        assert _gone(pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
        worker.join(60.0)
    (exc,) = failure
    assert isinstance(exc, UpscaleError) and "did not finish within 2 s" in str(exc)
