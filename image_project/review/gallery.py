"""The gallery's static pages: one per filter (all, with image, failed, interrupted, prompt
only), linked from each other so filtering needs no script, built from the run views of
:mod:`.views`."""

from __future__ import annotations

from dataclasses import dataclass

from image_project.review.views import RunView


@dataclass(frozen=True)
class GalleryFilter:
    """One gallery filter: its page, its link text and how many runs it holds."""

    name: str
    file: str
    label: str
    count: int
    current: bool


@dataclass(frozen=True)
class GalleryPage:
    """One static gallery page: the runs shown as cards, the prompt-only runs (a compact
    list under the cards: they have no image to show) and the filter links."""

    name: str
    file: str
    label: str
    cards: tuple[RunView, ...]
    prompt_runs: tuple[RunView, ...]
    filters: tuple[GalleryFilter, ...]
    failed: int
    interrupted: int


GALLERY_FILTERS: tuple[tuple[str, str, str], ...] = (
    ("all", "index.html", "all"),
    ("image", "index-image.html", "with image"),
    ("failed", "index-failed.html", "failed"),
    ("interrupted", "index-interrupted.html", "interrupted"),
    ("prompt_only", "index-prompt-only.html", "prompt only"),
)
"""(name, file, link text) of each gallery page: static pages linked from each other, so
filtering needs no script."""


def _prompt_only(view: RunView) -> bool:
    return view.run_mode == "prompt_only" and view.succeeded


def _matches(name: str, view: RunView) -> bool:
    if name == "all":
        return True
    if name == "image":
        return view.image is not None
    if name == "prompt_only":
        return _prompt_only(view)
    return view.status == name


def gallery_pages(views: tuple[RunView, ...] | list[RunView]) -> tuple[GalleryPage, ...]:
    """The gallery pages of ``views`` (in the order given), one per :data:`GALLERY_FILTERS`
    entry. Runs that made only a prompt (and succeeded) are not cards: they are listed
    compactly under the cards of ``all`` and on their own ``prompt only`` page."""
    counts = {name: sum(1 for v in views if _matches(name, v)) for name, _, _ in GALLERY_FILTERS}
    pages = []
    for name, file, label in GALLERY_FILTERS:
        chosen = tuple(v for v in views if _matches(name, v))
        pages.append(
            GalleryPage(
                name=name,
                file=file,
                label=label,
                cards=tuple(v for v in chosen if not _prompt_only(v)),
                prompt_runs=tuple(v for v in chosen if _prompt_only(v)),
                filters=tuple(
                    GalleryFilter(n, f, lab, counts[n], n == name) for n, f, lab in GALLERY_FILTERS
                ),
                failed=counts["failed"],
                interrupted=counts["interrupted"],
            )
        )
    return tuple(pages)
