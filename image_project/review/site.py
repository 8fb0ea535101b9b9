"""The static review site: a gallery of runs, one page per run (score heatmap, judge
statuses, errors) and a judge-panel page (the figures of :mod:`image_project.analysis`
with their plots).

Layout of ``out_dir``::

    index.html            gallery, newest first (index-image.html, index-failed.html,
                          index-interrupted.html, index-prompt-only.html: its filters)
    panel.html            judge panel across the runs shown
    runs/<id>.html        one page per run (<id>: views.page_name, one per generation id)
    images/<id>.<ext>     each run's image, copied from where the run saved it
    images/<id>.4k.jpg    its 4K image (``upscale.enabled``), copied likewise
    plots/*.png           the panel plots
    static/style.css      the only stylesheet

Images are **copied** into the site (a file copy, skipped when an identical-looking copy —
same size and modification time — is already there): links into the run's output directory
would break as soon as the site is served over http (a server serves only what is under its
root) or moved. Only image files the project wrote are copied (under the configured image
folders, an image type, decodable by Pillow); a transcript's ``image_path`` naming anything
else is shown as "image not available" with the reason. Every link is relative, nothing is loaded from the network, so the site works
opened from disk and served by any static server. Templates autoescape everything.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import IO

import jinja2

from image_project.analysis.panel import PanelStats, panel_stats
from image_project.artifacts.atomic import atomic_write_bytes, atomic_write_text
from image_project.errors import preview
from image_project.record.calls import CALL_COLUMNS
from image_project.record.run import RunRecord
from image_project.record.scoring import JUDGE_STATUSES
from image_project.review.gallery import gallery_pages
from image_project.review.plots import write_plots
from image_project.review.views import (
    RunView,
    page_name,
    run_view,
    upscale_view,
)

_Progress = Callable[[str], None]
_Skipped = Callable[[str, str], None]

DEFAULT_MAX_IMAGE_PIXELS = 70_000_000
"""The largest image (width x height) the site publishes by default
(``review.max_image_pixels``): above the largest the project writes (an 8192x8192 4K
image, 67.1 million pixels), far below what exhausts memory when decoded."""


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("image_project.review", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


_IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp"})
"""The image types a run saves (and the only ones the site publishes)."""
_PILLOW_FORMATS = frozenset({"JPEG", "PNG", "WEBP"})


def _unavailable(reason: str) -> tuple[None, str]:
    return None, f"image not available ({reason})"


def _publishable(
    source: Path, wanted: str, image_dirs: Sequence[Path] | None, max_pixels: int
) -> str | None:
    """Why ``source`` must not be published, or None when it may: the site copies only image
    files the project wrote — under one of ``image_dirs`` (symbolic links resolved), with an
    image suffix, at most ``max_pixels`` pixels, and decoded in full by Pillow as that kind
    of image. A transcript is data from outside (``runs import``), so its ``image_path`` is
    never trusted to name a safe file."""
    resolved = source.resolve()
    if image_dirs is not None and not any(
        resolved.is_relative_to(folder.resolve()) for folder in image_dirs
    ):
        return f"not under the image folder: {wanted}"
    if not resolved.is_file():
        return f"image file not found: {wanted}"
    if resolved.suffix.lower() not in _IMAGE_SUFFIXES:
        return f"not an image file type ({resolved.suffix or 'no suffix'}): {wanted}"
    return _decodable(resolved, wanted, max_pixels)


def _decodable(resolved: Path, wanted: str, max_pixels: int) -> str | None:
    """Why the image file cannot be published (too many pixels, not an image of a type the
    project writes, not decodable to its last pixel), or None. Any exception of the decoder
    is a reason, never a crash: the file is data from outside."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            # The pixel bound is ours (checked from the header, before any decoding).
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(resolved) as image:
                kind = image.format
                width, height = image.size
                if width * height > max_pixels:
                    return _too_big(width, height, max_pixels, wanted)
                if kind not in _PILLOW_FORMATS:
                    return f"not an image type the project writes ({kind}): {wanted}"
                image.verify()  # the container: chunk order and checksums (PNG)
            with Image.open(resolved) as image:
                image.load()  # every pixel: verify() checks nothing of a JPEG's data
    except Image.DecompressionBombError:
        return f"declares too many pixels (a decompression bomb?): {wanted}"
    except Exception as exc:
        why = f"{type(exc).__name__}: {preview(str(exc), 80)}"
        return f"not an image Pillow can read ({why}): {wanted}"
    return None


def _too_big(width: int, height: int, max_pixels: int, wanted: str) -> str:
    return (
        f"{width}x{height} is {width * height:,} pixels, more than review.max_image_pixels "
        f"({max_pixels:,}): {wanted}"
    )


def _replace_with_copy(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` through a temporary file renamed over it: whatever
    ``target`` was (a file, a symbolic link to anywhere) is replaced, never written
    through."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        shutil.copystat(source, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _copy_image(
    record: RunRecord,
    out_dir: Path,
    base: Path,
    path: str | None = None,
    tag: str = "",
    image_dirs: Sequence[Path] | None = None,
    max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
) -> tuple[str | None, str | None]:
    """Copy the run's image (or the one at ``path``: its 4K image, named with ``tag``, which
    starts with a ``.``, never in a :func:`page_name`, so that no run's image name is another
    run's 4K image name) into
    ``out_dir/images``: (site-relative path, None), or (None, why there is no image) — None,
    None for a run that was not meant to have one. Only a file :func:`_publishable` allows
    is copied; anything else is "image not available" with the reason."""
    wanted = record.image_path if path is None else path
    if wanted is None:
        return None, None
    source = Path(wanted)
    if not source.is_absolute():
        source = base / source
    problem = _publishable(source, wanted, image_dirs, max_pixels)
    if problem is not None:
        return _unavailable(problem)
    source = source.resolve()
    name = page_name(record.generation_id) + tag + source.suffix.lower()
    target = out_dir / "images" / name
    stat = source.stat()
    try:
        there = target.lstat()  # the link itself, never what it points at
    except FileNotFoundError:
        there = None
    if not (
        there is not None
        and not target.is_symlink()
        and target.is_file()
        and there.st_size == stat.st_size
        and there.st_mtime == stat.st_mtime
    ):
        _replace_with_copy(source, target)
    return f"images/{name}", None


def _write(path: Path, text: str) -> None:
    atomic_write_text(path, text)


def _copy_static(out_dir: Path) -> None:
    source = resources.files("image_project.review").joinpath("static", "style.css")
    atomic_write_bytes(out_dir / "static" / "style.css", source.read_bytes())


def _run_views(
    records: Sequence[RunRecord],
    out_dir: Path,
    base: Path,
    progress: _Progress | None,
    image_dirs: Sequence[Path] | None,
    max_pixels: int,
    skipped: _Skipped | None,
) -> list[RunView]:
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    views = []
    for n, record in enumerate(records, start=1):
        image, missing = _copy_image(
            record, out_dir, base, image_dirs=image_dirs, max_pixels=max_pixels
        )
        if missing is not None and skipped is not None:
            skipped(record.generation_id, missing)
        upscale = None
        if record.upscale is not None:
            copied = _copy_image(
                record, out_dir, base, record.upscale.path, ".4k", image_dirs, max_pixels
            )
            if copied[1] is not None and skipped is not None:
                skipped(f"{record.generation_id} (4K)", copied[1])
            upscale = upscale_view(record, *copied)
        views.append(run_view(record, image, missing, upscale))
        if progress is not None:
            progress(f"image {n}/{len(records)}: {record.generation_id}")
    return views


def _panel_page(
    env: jinja2.Environment, stats: PanelStats, out_dir: Path, progress: _Progress | None
) -> None:
    plots = write_plots(stats, out_dir / "plots", progress)
    _write(
        out_dir / "panel.html",
        env.get_template("panel.html").render(
            root="",
            stats=stats,
            statuses=JUDGE_STATUSES,
            plots=[(plot, f"plots/{path.name}") for plot, path in plots],
        ),
    )


def build_site(
    records: Sequence[RunRecord],
    out_dir: str | Path,
    *,
    image_base: str | Path | None = None,
    image_dirs: Sequence[str | Path] | None = None,
    progress: _Progress | None = None,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    skipped: _Skipped | None = None,
) -> Path:
    """Write the review site of ``records`` (shown in the order given: pass them newest
    first) into ``out_dir`` and return the path of its ``index.html``. Relative
    ``image_path`` values are resolved against ``image_base`` (default: the current
    directory, where the run was started). ``progress`` is called with one line per image,
    page and plot written. Files already in ``out_dir`` that this site does not write are
    left alone. ``image_dirs`` are the folders the project writes images into
    (``image.generation_path``, the 4K ``upscale.output_path``; relative ones against
    ``image_base``): an image outside them is not copied. The CLI always passes them; None
    skips only that folder check (the image-type checks still apply). An image of more than
    ``max_image_pixels`` pixels is not copied either; ``skipped`` is called with the run id
    and the reason for every image not published."""
    out = Path(out_dir)
    base = Path(image_base) if image_base is not None else Path.cwd()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    _copy_static(out)
    env = _environment()
    dirs = None
    if image_dirs is not None:
        dirs = [d if d.is_absolute() else base / d for d in map(Path, image_dirs)]
    views = _run_views(records, out, base, progress, dirs, max_image_pixels, skipped)
    run_page = env.get_template("run.html")
    for n, view in enumerate(views, start=1):
        html = run_page.render(root="../", run=view, columns=CALL_COLUMNS)
        _write(out / "runs" / f"{view.page}.html", html)
        if progress is not None:
            progress(f"page {n}/{len(views)}: runs/{view.page}.html")
    stats = panel_stats(records)
    _panel_page(env, stats, out, progress)
    gallery = env.get_template("index.html")
    for page in gallery_pages(views):
        _write(out / page.file, gallery.render(root="", page=page, stats=stats))
    return out / "index.html"


def review_command(
    records: Sequence[RunRecord],
    out_dir: str | Path,
    last: int | None = None,
    *,
    image_base: str | Path | None = None,
    image_dirs: Sequence[str | Path] | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
) -> int:
    """``image-project review [--last N] [--out DIR]``: the site of the ``last`` newest of
    ``records`` (newest first, as the store returns them; all when ``last`` is None), with
    progress on ``err`` and where the site is on ``out``. Exit code 0, or 1 (nothing
    written) when there is no run; a ``last`` below 1 raises ``ValueError``. ``out`` and
    ``err`` default to the standard streams as they are at the call. Every image not
    published is named with its reason on ``err`` and counted in the summary on ``out``."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    if last is not None and last < 1:
        raise ValueError(f"--last: got {last}, must be an int >= 1")
    chosen = list(records[:last] if last is not None else records)
    if not chosen:
        out.write("No runs to review.\n")
        return 1

    def progress(line: str, err: IO[str] = err) -> None:
        err.write(f"  {line}\n")
        err.flush()

    err.write(f"Writing the review site of {len(chosen)} runs to {out_dir}\n")
    skips: list[str] = []

    def skipped(run: str, why: str) -> None:
        skips.append(run)
        progress(f"image of {run} skipped: {why}")

    index = build_site(
        chosen,
        out_dir,
        image_base=image_base,
        image_dirs=image_dirs,
        progress=progress,
        max_image_pixels=max_image_pixels,
        skipped=skipped,
    )
    out.write(f"Review site: {index.resolve()}\n")
    if skips:
        out.write(
            f"{len(skips)} of {len(chosen)} runs' images not published ({', '.join(skips)}): "
            "the reason is on each run's page\n"
        )
    out.write(f"Open it in a browser, or serve it: python -m http.server -d {Path(out_dir)} 8000\n")
    return 0
