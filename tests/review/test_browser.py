"""The review site in a real browser: headless Chromium (the system's, driven by Playwright)
opens every kind of page of a site rendered from real offline runs, served from 127.0.0.1 by
a server this test starts and stops, and from disk. Every image must have loaded, no
request may fail and the console must stay free of errors. Screenshots go to pytest's tmp dir;
with ``IMAGE_PROJECT_SCREENSHOTS=DIR`` set, the ones docs/review.md shows are also copied
into DIR under stable names (``IMAGE_PROJECT_SCREENSHOTS=docs python -m pytest
tests/review/test_browser.py`` renews them).

Skipped locally when Chromium is absent; under CI (env ``CI`` set) that is a failure."""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    BrowserContext,
    ConsoleMessage,
    Page,
    Request,
    Response,
    sync_playwright,
)

from image_project.record.calls import run_calls
from image_project.record.run import RunRecord
from image_project.record.scoring import ScoringRecord
from image_project.review.gallery import GALLERY_FILTERS
from image_project.review.site import build_site
from image_project.review.views import page_name
from tests.review.offline_runs import make_offline_runs, make_protocol_run, make_round_runs
from tests.support.records import run

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = "chromium is not installed (apt-get install chromium); .ci/run installs it"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}, and CI must run the browser test")
        pytest.skip(reason)
    return found


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Site:
    root: Path
    records: list[RunRecord]
    url: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    work = tmp_path_factory.mktemp("review-runs")
    records = make_offline_runs(work)
    root = build_site(records, work / "site").parent
    with served(root) as url:
        yield Site(root, records, url)


@contextlib.contextmanager
def served(root: Path) -> Iterator[str]:
    """``root`` served over http from 127.0.0.1 while the block runs: its URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@dataclass
class RoundSite:
    root: Path
    runs: dict[str, RunRecord]
    url: str


LONG = "Supercalifragilistic" * 12


@pytest.fixture(scope="module")
def round_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoundSite]:
    """The site of :func:`make_round_runs`' runs, plus a run whose title and concept are one
    long token each."""
    work = tmp_path_factory.mktemp("review-rounds")
    # In a thread of its own: Playwright's sync API may already run an event loop here.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        runs = pool.submit(make_round_runs, work).result()
    long = run(99, scoring=False, title=LONG, concepts=[LONG + "-concept"])
    root = build_site([*runs.values(), long], work / "site").parent
    with served(root) as url:
        yield RoundSite(root, runs, url)


@dataclass
class CallsSite:
    root: Path
    record: RunRecord
    url: str


@pytest.fixture(scope="module")
def calls_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CallsSite]:
    """The site of one run whose judges use every protocol, the ``reasoned`` judge's first
    answer rejected and re-asked."""
    work = tmp_path_factory.mktemp("review-calls")
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        record = pool.submit(make_protocol_run, work, reask=True).result()
    root = build_site([record], work / "site").parent
    with served(root) as url:
        yield CallsSite(root, record, url)


def keep_screenshot(path: Path, name: str) -> None:
    """Copy a screenshot to ``$IMAGE_PROJECT_SCREENSHOTS/name`` when that is set."""
    target = os.environ.get("IMAGE_PROJECT_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(target) / name)


@dataclass
class Problems:
    console: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    executable = chromium_path()
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=executable,
            headless=True,
            args=CHROMIUM_FLAGS,
        )
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()


def open_page(browser: BrowserContext, url: str, screenshot: Path) -> tuple[Page, Problems]:
    problems = Problems()
    page = browser.new_page()

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.console.append(message.text)

    def response(reply: Response) -> None:
        if reply.status >= 400:
            problems.failed.append(f"{reply.status} {reply.url}")

    def failed(request: Request) -> None:
        problems.failed.append(f"{request.failure} {request.url}")

    page.on("console", console)
    page.on("pageerror", lambda error: problems.console.append(str(error)))
    page.on("requestfailed", failed)
    page.on("response", response)
    reply = page.goto(url, wait_until="load")
    assert reply is None or reply.ok, url  # file:// pages have no response status
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 0
    return page, problems


def images(page: Page) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = page.evaluate(
        "Array.from(document.images).map(i => "
        "({src: i.currentSrc || i.src, complete: i.complete, width: i.naturalWidth}))"
    )
    return found


def assert_clean(page: Page, problems: Problems, min_images: int) -> None:
    loaded = images(page)
    assert len(loaded) >= min_images, loaded
    assert all(i["complete"] and i["width"] > 0 for i in loaded), loaded
    assert problems.console == [] and problems.failed == []
    page.close()


def test_the_gallery_loads_every_image(site: Site, browser: BrowserContext, tmp_path: Path) -> None:
    page, problems = open_page(browser, site.url + "index.html", tmp_path / "gallery.png")
    # Three runs made an image; the failed one shows its error instead of a broken image.
    assert page.locator(".gallery .card").count() == 4
    assert page.locator(".gallery .card.failed").count() == 1
    assert "failed: RequestRejectedError in image" in page.inner_text(".card.failed")
    assert_clean(page, problems, min_images=3)


def test_a_scoring_run_page_shows_the_heatmap(
    site: Site, browser: BrowserContext, tmp_path: Path
) -> None:
    record = next(r for r in site.records if r.succeeded and r.blackbox_scoring.enabled)
    url = f"{site.url}runs/{page_name(record.generation_id)}.html"
    page, problems = open_page(browser, url, tmp_path / "run.png")
    # 6 cards x (3 judges + median) coloured cells; one selected row; three judges ok.
    assert page.locator("table.heatmap tbody tr").count() == 6
    assert page.locator("table.heatmap td[style]").count() == 6 * 4
    assert page.locator("table.heatmap tr.selected").count() == 1
    assert page.locator("table.judges td.status-ok").count() == 3
    assert_clean(page, problems, min_images=1)


def test_a_failed_run_page_shows_its_error(
    site: Site, browser: BrowserContext, tmp_path: Path
) -> None:
    record = next(r for r in site.records if not r.succeeded)
    url = f"{site.url}runs/{page_name(record.generation_id)}.html"
    page, problems = open_page(browser, url, tmp_path / "failed.png")
    error = page.inner_text("section.error")
    assert "RequestRejectedError: no such model" in error and "image" in error
    assert_clean(page, problems, min_images=0)


def test_the_panel_page_shows_its_plots(
    site: Site, browser: BrowserContext, tmp_path: Path
) -> None:
    page, problems = open_page(browser, site.url + "panel.html", tmp_path / "panel.png")
    assert page.locator(".plots img").count() == 4
    assert "Krippendorff's alpha (interval)" in page.inner_text("main")
    assert_clean(page, problems, min_images=4)


def test_the_site_works_opened_from_disk(
    site: Site, browser: BrowserContext, tmp_path: Path
) -> None:
    for name in ("index.html", "panel.html"):
        page, problems = open_page(browser, (site.root / name).as_uri(), tmp_path / "disk.png")
        assert_clean(page, problems, min_images=3)


def test_a_run_page_shows_and_links_its_4k_image(
    site: Site, browser: BrowserContext, tmp_path: Path
) -> None:
    record = next(r for r in site.records if r.upscale is not None)
    page_id = page_name(record.generation_id)
    page, problems = open_page(browser, f"{site.url}runs/{page_id}.html", tmp_path / "4k.png")
    link = page.locator("section.upscale a.download")
    assert link.get_attribute("href") == f"../images/{page_id}.4k.jpg"
    assert link.inner_text() == "2048x1365 JPEG"
    sizes = page.evaluate("Array.from(document.images).map(i => [i.naturalWidth, i.naturalHeight])")
    assert [2048, 1365] in sizes and [1536, 1024] in sizes  # the 4K image and the image
    assert_clean(page, problems, min_images=2)


def test_the_multi_round_run_page_shows_why_this_card(
    round_site: RoundSite, browser: BrowserContext, tmp_path: Path
) -> None:
    record = round_site.runs["rounds"]
    url = f"{round_site.url}runs/{page_name(record.generation_id)}.html"
    shot = tmp_path / "rounds.png"
    page, problems = open_page(browser, url, shot)
    keep_screenshot(shot, "review_run_rounds.png")
    assert page.locator("section.round").count() == 3
    assert page.locator("section.round table.heatmap").count() == 3
    assert page.locator("section.round.final tr.selected").count() == 1
    assert page.locator("p.fallback").count() == 1
    assert "Fallback to the code choice." in page.inner_text("#round-1")
    assert page.locator("td.why .category").count() == 6  # 3 survivors in rounds 0 and 1
    assert "Picked by the rule explore" in page.inner_text("section.pick")
    # A parent link jumps to the parent's row of the previous round.
    page.locator("#round-2 td.from a").first.click()
    assert page.evaluate("location.hash").startswith("#r1-")
    assert_clean(page, problems, min_images=1)


def test_failed_and_interrupted_run_pages(
    site: Site, round_site: RoundSite, browser: BrowserContext, tmp_path: Path
) -> None:
    failed = next(r for r in site.records if not r.succeeded)
    shot = tmp_path / "failed.png"
    page, problems = open_page(
        browser, f"{site.url}runs/{page_name(failed.generation_id)}.html", shot
    )
    keep_screenshot(shot, "review_run_failed.png")
    assert page.inner_text("section.error h2") == "Run failed"
    assert_clean(page, problems, min_images=0)
    interrupted = round_site.runs["interrupted"]
    shot = tmp_path / "interrupted.png"
    page, problems = open_page(
        browser, f"{round_site.url}runs/{page_name(interrupted.generation_id)}.html", shot
    )
    keep_screenshot(shot, "review_run_interrupted.png")
    assert page.inner_text("section.error h2") == "Run interrupted"
    assert "Not judged: the run was interrupted" in page.inner_text("#round-1")
    assert_clean(page, problems, min_images=0)


def test_gallery_filters_are_links_and_long_tokens_stay_inside_cards(
    round_site: RoundSite, browser: BrowserContext, tmp_path: Path
) -> None:
    shot = tmp_path / "gallery.png"
    page, problems = open_page(browser, round_site.url + "index.html", shot)
    keep_screenshot(shot, "review_gallery.png")
    overflowing = page.evaluate(
        "Array.from(document.querySelectorAll('.gallery .card')).filter("
        "c => c.scrollWidth > c.clientWidth).length"
    )
    assert overflowing == 0
    assert page.locator("table.prompt-runs tbody tr").count() == 1
    page.locator("p.filters a", has_text="interrupted").click()
    page.wait_for_load_state("load")
    assert page.url.endswith("index-interrupted.html")
    assert page.locator(".gallery .card").count() == 1
    assert page.locator(".gallery .card.run-interrupted").count() == 1
    assert_clean(page, problems, min_images=0)


def test_every_page_type_works_served_and_opened_from_disk(
    site: Site, round_site: RoundSite, browser: BrowserContext, tmp_path: Path
) -> None:
    """Every gallery filter page, the panel page and every run page (scoring, failed, no
    scoring with a 4K image, multi-round, interrupted, failed early, prompt only), over http
    and from disk: every image loads, nothing fails to load, the console has no error."""
    pages = [(site.root, site.url, f"runs/{page_name(r.generation_id)}.html") for r in site.records]
    pages += [(round_site.root, round_site.url, file) for _, file, _ in GALLERY_FILTERS]
    pages += [(round_site.root, round_site.url, "panel.html")]
    pages += [
        (round_site.root, round_site.url, f"runs/{page_name(r.generation_id)}.html")
        for r in round_site.runs.values()
    ]
    for root, url, name in pages:
        for where in (url + name, (root / name).as_uri()):
            page, problems = open_page(browser, where, tmp_path / "page.png")
            assert_clean(page, problems, min_images=0)


def test_the_run_page_lists_every_call_collapsed_and_opens_one(
    calls_site: CallsSite, browser: BrowserContext, tmp_path: Path
) -> None:
    record = calls_site.record
    scoring = record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord)
    why = next(j for j in scoring.judges if j.protocol == "reasoned")
    duel = next(j for j in scoring.judges if j.protocol == "pairwise")
    url = f"{calls_site.url}runs/{page_name(record.generation_id)}.html"
    page, problems = open_page(browser, url, tmp_path / "run.png")
    calls = page.locator("section.calls details.call")
    assert calls.count() == len(run_calls(record)) > 50
    assert page.locator("section.calls details.call[open]").count() == 0
    opened = []
    for judge in (why, duel):
        call = page.locator("section.calls details.call").filter(
            has=page.locator(".col-path", has_text=judge.path)
        )
        assert call.count() == 1 and not call.locator("pre.answer").is_visible()
        call.locator("summary").click()  # what a reader does: open it
        assert call.evaluate("e => e.open") and call.locator("pre.answer").is_visible()
        opened.append(call)
    reasoned, pairwise = (c.inner_text() for c in opened)
    assert "Rejected answer 1 of 1: expected a JSON object" in reasoned
    assert opened[0].locator("table.rationales tbody tr").count() == len(why.rationales or {})
    first, second, winner = (duel.comparisons or ())[0]
    assert f"Pairwise choice: shown {first} then {second}; {winner} won" in pairwise
    assert page.locator("section.calls details.call[open]").count() == 2
    # The calls section from its heading down to the second opened call.
    top, bottom = (
        page.locator("section.calls").evaluate("e => e.getBoundingClientRect().top + scrollY"),
        opened[1].evaluate("e => e.getBoundingClientRect().bottom + scrollY"),
    )
    shot = tmp_path / "calls.png"
    page.screenshot(
        path=str(shot),
        full_page=True,
        clip={"x": 0, "y": top, "width": 1280, "height": bottom - top},
    )
    keep_screenshot(shot, "review_run_calls.png")
    assert_clean(page, problems, min_images=1)
