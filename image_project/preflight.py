"""Disk checks made before any model call, so that a disk fault never costs one.

:func:`check_outputs` is run by :func:`image_project.run.state.load_inputs` after the categories and
profile files loaded. It checks what the run will write:

* Every output directory can be created and written: ``image.log_path`` (transcript and log)
  always; for a full run also ``image.generation_path`` and the directories of
  ``prompt.generations_path`` and of the titles manifest. A prompt-only run writes neither
  image nor CSV rows, so those are left alone. Each directory is created (with its parents)
  and a temporary file is really created and removed in it: permission bits say little when
  running as root or on a read-only mount.
* For a full run, an existing titles manifest or generations CSV is a regular file that can be
  opened for appending, is UTF-8 all the way through (the title phase and the novelty reader
  read every row), and has exactly the header the ``records`` phase appends under. Neither
  has to exist (first run); a file with no rows yet is fine.

Every failure is an :class:`~image_project.errors.InputFileError` naming the path, the config
key and what is wrong (for the OS, the exception type and its message). Nothing is left behind
but the (empty) directories created.

The titles manifest may also have the header from before the 4K columns
(:data:`~image_project.artifacts.manifest.MANIFEST_HEADERS`); with ``upscale.enabled`` the 4K
image's directory (``upscale.output_path``) is checked like the others.

:func:`check_upscale` is the 4K image's pre-flight (``upscale.enabled``, a full run): it finds
the upscaler binary (the configured path, ``$REALESRGAN_NCNN_VULKAN_PATH``, ``PATH``) and its
model files, and refuses a run whose image would need an upscaler that is not there when the
Lanczos fallback is off, with a :class:`~image_project.errors.ConfigError` naming the key
(exit 2) before any model call.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from image_project.artifacts.generations import GENERATIONS_FIELDS
from image_project.artifacts.manifest import MANIFEST_FIELDS, MANIFEST_HEADERS
from image_project.config.models import AppConfig
from image_project.errors import ConfigError, InputFileError, UpscaleError

if TYPE_CHECKING:
    from image_project.artifacts.upscale import UpscaleSettings

_PROBE_PREFIX = ".image_project-write-check-"


def _reason(exc: OSError) -> str:
    return f"{type(exc).__name__}: {exc}"


def check_writable_dir(directory: Path, key: str) -> None:
    """Create ``directory`` (with parents) and create and remove a temporary file in it.

    Raises :class:`InputFileError` naming the directory, ``key`` and the OS reason.
    """
    if directory.exists() and not directory.is_dir():
        raise InputFileError(
            directory, f"{key} is not a writable directory (it exists and is not a directory)"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=_PROBE_PREFIX):
            pass
    except OSError as exc:
        raise InputFileError(
            directory, f"{key} is not a writable directory ({_reason(exc)})"
        ) from exc


def check_csv_record_file(
    path: Path,
    key: str,
    what: str,
    fields: Sequence[str],
    *,
    also: Sequence[Sequence[str]] = (),
) -> None:
    """Check an existing CSV that a run appends to; a missing file passes (first run).

    It must be a regular file, open for appending, decode as UTF-8 (a BOM is allowed), parse
    as CSV, and, unless it has no rows yet, have exactly ``fields`` as its header, or one of
    the older headers in ``also`` that the appender still accepts (cells trimmed, as the
    appender compares them). Raises :class:`InputFileError` naming ``path``.
    """
    if not path.exists():
        return
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise InputFileError(path, f"{key}: the {what} is {kind}, expected a CSV file")
    try:
        with open(path, "ab"):
            pass
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(
            path, f"{key}: the {what} cannot be opened for appending ({_reason(exc)})"
        ) from exc
    unmarked = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = unmarked.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start + len(data) - len(unmarked)
        raise InputFileError(
            path,
            f"{key}: the {what} is not valid UTF-8 (byte 0x{data[offset]:02x} at offset "
            f"{offset}); convert it to UTF-8 or move it aside, then run again",
        ) from exc
    try:
        rows = [
            row for row in csv.reader(io.StringIO(text, newline="")) if any(map(str.strip, row))
        ]
    except csv.Error as exc:
        raise InputFileError(path, f"{key}: the {what} is not valid CSV ({exc})") from exc
    if not rows:
        return
    header = [cell.strip() for cell in rows[0]]
    if header != list(fields) and header not in [list(old) for old in also]:
        raise InputFileError(
            path,
            f"{key}: the {what} has the header {header}, expected {list(fields)}; "
            "move the file aside (or fix its header) and run again",
        )


def check_outputs(cfg: AppConfig) -> None:
    """Check every directory and existing record file the run will write (module docstring)."""
    full = cfg.run.mode != "prompt_only"
    manifest = cfg.effective_titles_manifest_path
    manifest_key = (
        "prompt.titles_manifest_path"
        if cfg.prompt.titles_manifest_path is not None
        else "image.generation_path"
    )
    generations = Path(cfg.prompt.generations_path)
    dirs: list[tuple[Path, str]] = [(Path(cfg.image.log_path), "image.log_path")]
    if full:
        dirs += [
            (Path(cfg.image.generation_path), "image.generation_path"),
            (generations.parent, "prompt.generations_path"),
            (manifest.parent, manifest_key),
        ]
        if cfg.upscale.enabled:
            upscale_key = (
                "upscale.output_path"
                if cfg.upscale.output_path is not None
                else "image.generation_path"
            )
            dirs.append((cfg.effective_upscale_path, upscale_key))
    seen: set[str] = set()
    for directory, key in dirs:
        ident = os.path.abspath(directory)
        if ident not in seen:
            seen.add(ident)
            check_writable_dir(directory, key)
    if full:
        check_csv_record_file(
            manifest, manifest_key, "titles manifest", MANIFEST_FIELDS, also=MANIFEST_HEADERS
        )
        check_csv_record_file(
            generations, "prompt.generations_path", "generations CSV", GENERATIONS_FIELDS
        )


def _image_size(size: str) -> tuple[int, int] | None:
    """``image.size`` as ``(width, height)``; None for ``auto`` (known only from the reply)."""
    if size == "auto":
        return None
    width, _, height = size.partition("x")
    return int(width), int(height)


def check_upscale(cfg: AppConfig, env: Mapping[str, str]) -> UpscaleSettings | None:
    """The 4K image's settings for a full run, checked before any model call; None when
    ``upscale.enabled`` is off. (A prompt-only run saves no image: its caller skips this.)

    The upscaler binary is looked up in ``upscale.realesrgan_binary``, then
    ``env["REALESRGAN_NCNN_VULKAN_PATH"]``, then ``env["PATH"]`` (the CLI passes the process
    environment). Raises :class:`ConfigError` naming the key when a configured binary or model
    directory does not exist (or lacks the model files), and when no binary was found, the
    Lanczos fallback is off, and an image of the configured ``image.size`` (any size, for
    ``auto``) would need the upscaler to reach the target."""
    upscale = cfg.upscale
    if not upscale.enabled:
        return None
    # Imported here: it imports Pillow, which only a run that saves an image needs.
    from image_project.artifacts.upscale import (
        BINARY_ENV_VAR,
        BINARY_NAME,
        UpscaleSettings,
        UpscaleTarget,
        choose_method,
        find_upscaler,
    )

    upscaler = find_upscaler(
        binary=upscale.realesrgan_binary,
        model_dir=upscale.model_path,
        model_name=upscale.model_name,
        env=env,
        tile_size=upscale.tile_size,
        tta=upscale.tta,
        timeout_s=upscale.timeout_s,
    )
    width, height = upscale.target_width_px, upscale.target_height_px
    target = UpscaleTarget(
        long_edge=upscale.target_long_edge_px,
        size=(width, height) if width is not None and height is not None else None,
        aspect=upscale.target_aspect_ratio,
    )
    if upscaler is None and not upscale.allow_fallback_resize:
        source = _image_size(cfg.image.size)
        try:
            if source is None:
                raise UpscaleError("image.size is auto, so any size may come back")
            choose_method(source, target, upscaler=False, allow_fallback=False)
        except UpscaleError:
            need = (
                "image.size is auto, so the image may need it"
                if source is None
                else f"a {source[0]}x{source[1]} image (image.size) needs it to reach "
                f"{'x'.join(map(str, target.of(source)))}"
            )
            raise ConfigError(
                "upscale.realesrgan_binary",
                f"no upscaler found (this key is not set, ${BINARY_ENV_VAR} is not set, and "
                f"{BINARY_NAME} is not on PATH), and {need}; set this key to the binary, or "
                "upscale.allow_fallback_resize: true for a plain Lanczos resize, or turn "
                "upscale.enabled off",
            ) from None
    return UpscaleSettings(
        target=target,
        upscaler=upscaler,
        allow_fallback=upscale.allow_fallback_resize,
        directory=cfg.effective_upscale_path,
    )
