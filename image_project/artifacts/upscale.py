"""The 4K deliverable: the run's image brought to a target size, captioned again and saved as
``<directory>/<generation_id>_image_4k.jpg`` (JPEG quality 95).

Target size (:meth:`UpscaleTarget.of`):

* an explicit ``(width, height)``, when given;
* else, with an aspect ratio ``r`` (width / height), the long edge is ``long_edge`` and the
  short edge follows from ``r`` (landscape for ``r >= 1``, portrait below);
* else the image's own aspect ratio, with its long edge ``long_edge``.

Method (:func:`choose_method`), for an image of size ``S`` and a target size ``T``:

* ``copy`` — ``S == T``, or no explicit size or ratio and ``S``'s long edge is already at least
  ``long_edge``: the captioned base JPEG is copied byte for byte (its size stays ``S``);
* ``lanczos_fit`` — ``S`` is at least ``T`` in both dimensions: centre-cropped to ``T``'s
  aspect ratio and resized down with Lanczos (Pillow's ``ImageOps.fit``);
* ``realesrgan`` — otherwise, with an upscaler binary: one x4 pass of the binary into a
  temporary PNG (:func:`run_upscaler`), then a Lanczos fit to ``T``;
* ``lanczos_resize`` — otherwise, when the fallback is allowed: a Lanczos fit straight to
  ``T`` (larger, but no new detail);
* otherwise :class:`~image_project.errors.UpscaleError`. The run's pre-flight check (in
  :mod:`image_project.preflight`) refuses such a configuration before any model call; this is
  only reached when the image came back smaller than the configured size.

The binary (:func:`find_upscaler`, realesrgan-ncnn-vulkan's command line: ``-i IN -o OUT -n
MODEL -s 4 -t TILE -m MODELS [-x]``) is the configured path, else
``$REALESRGAN_NCNN_VULKAN_PATH``, else ``realesrgan-ncnn-vulkan`` on ``PATH``; its model
directory (configured, else ``models/`` beside the binary) must hold ``<model>.param`` and
``<model>.bin``. A problem found there raises :class:`~image_project.errors.ConfigError`
naming the ``upscale.*`` key to fix. At run time the binary gets ``timeout_s``; a non-zero exit, a
timeout or no readable output is an :class:`~image_project.errors.UpscaleError` ending with
the tails of its output.

The caption is put on **after** the final resize, by the same layout as the base image's
(:func:`~image_project.artifacts.image.caption_layout`: strip, padding and font sizes are
fractions of the image), so it covers the same share of the 4K image and reads the same.

Like every artifact function these are plain and synchronous: the run calls them through
``anyio.to_thread.run_sync``. :func:`run_upscaler` calls ``check`` (the run passes
``anyio.from_thread.check_cancelled``) while it waits for the binary, and kills the binary
when ``check`` raises, so an interrupt does not wait for a long upscale. The binary runs in
a process group of its own (POSIX), and it is the whole group that is killed: a wrapper
script's children (which hold its output pipes) go with it, so a timeout ends the upscale
at the timeout, not when the last child lets go of the pipes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageOps

from image_project.artifacts.atomic import atomic_write_bytes
from image_project.artifacts.image import save_captioned_frame
from image_project.errors import ConfigError, UpscaleError
from image_project.record.upscale import UpscaleMethodName

BINARY_NAME = "realesrgan-ncnn-vulkan"
BINARY_ENV_VAR = "REALESRGAN_NCNN_VULKAN_PATH"
UPSCALE_QUALITY = 95
_SCALE = 4
_POLL_S = 0.2
"""How often :func:`run_upscaler` wakes to call ``check`` while the binary runs."""
_TAIL_CHARS = 1500


def upscaled_path(directory: Path, generation_id: str) -> Path:
    """``<directory>/<generation_id>_image_4k.jpg``."""
    return directory / f"{generation_id}_image_4k.jpg"


@dataclass(frozen=True)
class UpscaleTarget:
    """What size the 4K image should have: ``size`` (width, height) when explicit, else the
    long edge ``long_edge`` with the aspect ratio ``aspect`` (width / height) or, without
    one, the image's own."""

    long_edge: int = 3840
    size: tuple[int, int] | None = None
    aspect: float | None = None

    @property
    def explicit(self) -> bool:
        """An explicit size or aspect ratio was asked for (a copy then needs the exact size)."""
        return self.size is not None or self.aspect is not None

    def of(self, source: tuple[int, int]) -> tuple[int, int]:
        """The target size for an image of size ``source``."""
        if self.size is not None:
            return self.size
        if self.aspect is not None:
            if self.aspect >= 1:
                return self.long_edge, max(1, round(self.long_edge / self.aspect))
            return max(1, round(self.long_edge * self.aspect)), self.long_edge
        width, height = source
        scale = self.long_edge / max(width, height)
        return max(1, round(width * scale)), max(1, round(height * scale))


@dataclass(frozen=True)
class Upscaler:
    """The external upscaler, found and checked (:func:`find_upscaler`)."""

    binary: Path
    model_name: str
    model_dir: Path
    tile_size: int = 0
    tta: bool = False
    timeout_s: float = 600.0

    def command(self, source: Path, target: Path) -> list[str]:
        """The command line of one x4 pass from ``source`` into ``target`` (PNG)."""
        command = [
            str(self.binary),
            "-i",
            str(source),
            "-o",
            str(target),
            "-n",
            self.model_name,
            "-s",
            str(_SCALE),
            "-t",
            str(self.tile_size),
            "-m",
            str(self.model_dir),
        ]
        return [*command, "-x"] if self.tta else command


@dataclass(frozen=True)
class UpscaleSettings:
    """Everything the records phase needs to make the 4K image: the target, the upscaler
    (None when none was found), whether a plain Lanczos resize may stand in for it, and the
    directory the JPEG goes to."""

    target: UpscaleTarget
    upscaler: Upscaler | None
    allow_fallback: bool
    directory: Path


@dataclass(frozen=True)
class Upscaled:
    """The image at its final size, before the caption: ``frame`` is None for ``copy``
    (the captioned base JPEG is copied instead)."""

    method: UpscaleMethodName
    source_size: tuple[int, int]
    size: tuple[int, int]
    frame: Image.Image | None


@dataclass(frozen=True)
class SavedUpscale:
    """The 4K JPEG as written."""

    path: Path
    bytes: int
    size: tuple[int, int]
    method: UpscaleMethodName
    source_size: tuple[int, int]


def _show(size: tuple[int, int]) -> str:
    return f"{size[0]}x{size[1]}"


def choose_method(
    source: tuple[int, int], target: UpscaleTarget, *, upscaler: bool, allow_fallback: bool
) -> UpscaleMethodName:
    """How an image of size ``source`` reaches ``target`` (module docstring); raises
    :class:`UpscaleError` when it needs an upscaler and there is neither one nor the
    fallback."""
    size = target.of(source)
    if source == size or (not target.explicit and max(source) >= target.long_edge):
        return "copy"
    if source[0] >= size[0] and source[1] >= size[1]:
        return "lanczos_fit"
    if upscaler:
        return "realesrgan"
    if allow_fallback:
        return "lanczos_resize"
    raise UpscaleError(
        f"a {_show(source)} image needs an upscaler to reach {_show(size)}, and no "
        f"{BINARY_NAME} was found (upscale.realesrgan_binary, ${BINARY_ENV_VAR}, PATH) and "
        "upscale.allow_fallback_resize is false"
    )


def _executable(path: Path, named: str) -> Path:
    """``path`` resolved, if it is an executable file; else a :class:`ConfigError` for
    ``upscale.realesrgan_binary`` saying how it was ``named``."""
    problem = None
    if not path.exists():
        problem = "does not exist"
    elif not path.is_file():
        problem = "is not a file"
    elif not os.access(path, os.X_OK):
        problem = "is not executable (chmod +x it)"
    if problem is not None:
        raise ConfigError(
            "upscale.realesrgan_binary",
            f"{named} {path}, which {problem}; point it at the {BINARY_NAME} executable, or "
            "turn upscale.enabled off",
        )
    return path.resolve()


def find_upscaler(
    *,
    binary: Path | None,
    model_dir: Path | None,
    model_name: str,
    env: Mapping[str, str],
    tile_size: int = 0,
    tta: bool = False,
    timeout_s: float = 600.0,
) -> Upscaler | None:
    """The upscaler binary: ``binary`` (the configured path), else ``env[BINARY_ENV_VAR]``,
    else :data:`BINARY_NAME` on ``env["PATH"]``; None when none is configured or found.

    A configured path or variable that names no executable file, and a found binary whose
    model directory (``model_dir``, else ``models/`` beside the binary) lacks
    ``<model_name>.param`` or ``<model_name>.bin``, raise :class:`ConfigError` naming the key
    to fix."""
    if binary is not None:
        found = _executable(binary, "got")
    elif env.get(BINARY_ENV_VAR, "").strip():
        named = Path(env[BINARY_ENV_VAR].strip()).expanduser()
        found = _executable(named, f"not set, and ${BINARY_ENV_VAR} names")
    else:
        on_path = shutil.which(BINARY_NAME, path=env.get("PATH", ""))
        if on_path is None:
            return None
        found = Path(on_path).resolve()
    if model_dir is not None:
        if not model_dir.is_dir():
            what = "does not exist" if not model_dir.exists() else "is not a directory"
            raise ConfigError("upscale.model_path", f"the model directory {model_dir} {what}")
        models = model_dir.resolve()
    else:
        models = found.parent / "models"
    missing = [
        f"{model_name}{suffix}"
        for suffix in (".param", ".bin")
        if not (models / f"{model_name}{suffix}").is_file()
    ]
    if missing:
        raise ConfigError(
            "upscale.model_path",
            f"the model directory {models} (for {found}) has no {' or '.join(missing)}; set "
            "upscale.model_path to the directory holding the model files, or "
            "upscale.model_name to a model that is there",
        )
    return Upscaler(
        binary=found,
        model_name=model_name,
        model_dir=models,
        tile_size=tile_size,
        tta=tta,
        timeout_s=timeout_s,
    )


def output_tail(data: bytes | None, limit: int = _TAIL_CHARS) -> str:
    """The last ``limit`` characters of a process's output, decoded leniently and stripped
    (``(none)`` when empty)."""
    text = (data or b"").decode("utf-8", errors="replace").strip()
    if not text:
        return "(none)"
    return text if len(text) <= limit else "…" + text[-limit:]


def _failure(upscaler: Upscaler, what: str, out: bytes | None, err: bytes | None) -> UpscaleError:
    return UpscaleError(
        f"{upscaler.binary} {what}; stderr tail: {output_tail(err)}; "
        f"stdout tail: {output_tail(out)}"
    )


_REAP_S = 5.0
"""How long the output of a killed upscaler is still read: only something that left its
process group (and holds its pipes) can keep them open that long; it is not waited for."""


def _kill(process: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """Kill the upscaler's whole process group (the binary alone where there are none) and
    reap it; its output so far (empty when something outside the group keeps the pipes
    open past :data:`_REAP_S`)."""
    if os.name == "posix":
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    process.kill()
    try:
        return process.communicate(timeout=_REAP_S)
    except subprocess.TimeoutExpired:
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        process.wait()
        return b"", b""


def run_upscaler(
    upscaler: Upscaler, image: Image.Image, check: Callable[[], None] | None = None
) -> Image.Image:
    """One x4 pass of ``upscaler`` over ``image`` (through temporary PNGs, removed
    afterwards); the result, decoded, as RGB.

    ``check`` is called every :data:`_POLL_S` seconds while the binary runs; when it raises
    (a cancelled run), the binary is killed and the exception goes on. A binary that cannot
    be started, exits non-zero, outlives ``timeout_s`` or writes no readable image raises
    :class:`UpscaleError` with the tails of its output."""
    with tempfile.TemporaryDirectory(prefix="image_project-upscale-") as tmp:
        source, target = Path(tmp) / "input.png", Path(tmp) / f"output_x{_SCALE}.png"
        image.convert("RGB").save(source, format="PNG")
        try:
            process = subprocess.Popen(
                upscaler.command(source, target),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=os.name == "posix",
            )
        except OSError as exc:
            raise UpscaleError(
                f"{upscaler.binary} could not be started ({type(exc).__name__}: {exc})"
            ) from exc
        deadline = time.monotonic() + upscaler.timeout_s
        try:
            while True:
                try:
                    out, err = process.communicate(timeout=_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    if check is not None:
                        check()
                    if time.monotonic() > deadline:
                        out, err = _kill(process)
                        raise _failure(
                            upscaler, f"did not finish within {upscaler.timeout_s:g} s", out, err
                        ) from None
        except BaseException:
            if process.returncode is None:
                _kill(process)
            raise
        if process.returncode != 0:
            raise _failure(upscaler, f"exited with status {process.returncode}", out, err)
        try:
            with Image.open(target) as result:
                result.load()
                return result.convert("RGB")
        except (OSError, ValueError, Image.DecompressionBombError) as exc:
            raise _failure(
                upscaler, f"left no readable image at {target.name} ({exc})", out, err
            ) from exc


def upscale_frame(
    frame: Image.Image, settings: UpscaleSettings, check: Callable[[], None] | None = None
) -> Upscaled:
    """``frame`` (the uncaptioned image) at its final size, by the method
    :func:`choose_method` picks; the caption is added when it is saved
    (:func:`save_upscaled`)."""
    source = (frame.width, frame.height)
    upscaler = settings.upscaler
    method = choose_method(
        source,
        settings.target,
        upscaler=upscaler is not None,
        allow_fallback=settings.allow_fallback,
    )
    if method == "copy":
        return Upscaled(method, source, source, None)
    size = settings.target.of(source)
    rgb = frame.convert("RGB")
    if method == "realesrgan":
        assert upscaler is not None
        rgb = run_upscaler(upscaler, rgb, check)
    if rgb.size != size:
        rgb = ImageOps.fit(rgb, size, method=Image.Resampling.LANCZOS)
    return Upscaled(method, source, size, rgb)


def save_upscaled(
    upscaled: Upscaled,
    path: Path,
    *,
    base_image: Path,
    caption: str,
    font_path: Path | None = None,
) -> SavedUpscale:
    """Write the 4K JPEG atomically: the captioned base image's bytes for ``copy``, else
    the frame with ``caption`` put on at its final size, JPEG quality
    :data:`UPSCALE_QUALITY`."""
    if upscaled.frame is None:
        atomic_write_bytes(path, base_image.read_bytes())
    else:
        save_captioned_frame(
            upscaled.frame, path, caption, font_path=font_path, quality=UPSCALE_QUALITY
        )
    return SavedUpscale(
        path=path,
        bytes=path.stat().st_size,
        size=upscaled.size,
        method=upscaled.method,
        source_size=upscaled.source_size,
    )
