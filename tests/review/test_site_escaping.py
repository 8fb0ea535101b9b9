"""Every page of the review site shows record text as text, never as markup: real offline
runs of every kind (one round and several, the LLM selector and its fallback, failed,
interrupted, prompt-only, a 4K image, every judging protocol, context injectors, novelty)
have every string field of their records replaced with hostile HTML, go through the real
store (``runs import``, then ``image-project review``), and every page written is parsed (the
run pages' model calls with their prompts, answers, rejected answers and judges' rationales
and choices included): no element or attribute may come from the records, and every hostile
text a page shows must read back whole. A second test reads the templates and the package's Python and refuses
what would switch escaping off for record data (``| safe``, ``Markup(``, ``autoescape``)."""

from __future__ import annotations

import ast
import re
import shutil
import types
import typing
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from image_project.cli import command as cli
from image_project.record.run import RunRecord
from image_project.review.plots import PLOTS
from tests.review.offline_runs import (
    make_offline_runs,
    make_protocol_run,
    make_round_runs,
)

PACKAGE = Path(__file__).resolve().parents[2] / "image_project"
TEMPLATES = PACKAGE / "review" / "templates"


def hostile(n: int, tag: str) -> str:
    """Hostile text number ``n``: a ``javascript:`` URL, a tag and an attribute breaking out
    of a double-quoted attribute, a script, an attribute breaking out of a single-quoted
    one, an svg and a comment, then its marker ``[tag n]`` (last, so a value the site cuts
    short loses its marker with it). No ``/`` before the marker but in ``</script>``, no
    edge whitespace (cards strip it), 150 characters at most (a card's item takes 200)."""
    return (
        f'javascript:alert({n})//"><img src=x onerror=alert({n})><script>alert({n})</script>'
        f"' onmouseover='alert({n})' <svg onload=alert({n})><!-- [{tag}{n}]"
    )


def hostile_file_name(n: int, tag: str) -> str:
    """A file name (no ``/``) holding a tag and both attribute break-outs, and the marker."""
    return f"\"><img src=x onerror=alert({n})>' onmouseover='alert({n})' [{tag}{n}]"


URLS = frozenset({"href", "src", "srcset", "action", "formaction", "poster", "cite", "data"})
"""The attributes a browser reads as a URL."""
MARKER = re.compile(r"\[[HF]\d+\]")

KEPT: dict[str, str] = {
    "RunRecord.created_at": (
        "a timestamp column of the store: an import refuses a value that is not ISO 8601, "
        "so no other text reaches the site through the store"
    ),
    "RunRecord.generation_id": (
        "checked against the generation-id pattern where it enters (runs import refuses any "
        "other), so each copy keeps a valid id of its own (Hostile.record)"
    ),
    "RunRecord.image_path": "a real file under a hostile name, or hostile text (Hostile.image)",
    "UpscaleRecord.path": "a real file under a hostile name, or hostile text (Hostile.image)",
}
"""Fields whose records keep their value, with why. Besides these only fields typed as a
fixed vocabulary (a ``Literal``: statuses, kinds, modes) keep theirs, and the error type
``interrupted``, which is how a record says it was interrupted."""


def _literal(annotation: object) -> bool:
    if typing.get_origin(annotation) is Literal:
        return True
    return any(_literal(a) for a in typing.get_args(annotation))


def _optional_str(annotation: object) -> bool:
    args = typing.get_args(annotation)
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return union and str in args and type(None) in args and len(args) == 2


@dataclass
class Hostile:
    """Replaces every string of a record with hostile text: the same original text by the
    same hostile text everywhere (so ids still refer to each other), each hostile text
    remembering the fields it was put in. ``fill`` also puts hostile text in every
    ``str | None`` field that is None (an error's step, path and reason, a judge's
    error, a selector's summary, ...). ``meta_keys`` keeps the keys of a step's ``meta``
    (``role``, ``judge_id``, ``order``: the names the site reads its facts by), so that
    their hostile values are shown; without it the keys are hostile too, and the site
    finds none of the facts (and must still render).
    """

    tag: str
    fill: bool
    images: Path
    meta_keys: bool = False
    texts: dict[str, str] = field(default_factory=dict)
    fields: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def text(self, original: str, where: str) -> str:
        made = self.texts.setdefault(original, hostile(len(self.texts), self.tag))
        self.fields[made].add(where)
        return made

    def image(self, original: str | None, where: str) -> str | None:
        """The image file the run saved, copied under a hostile name into :attr:`images`
        (so it is published, with the title in its ``alt``); with :attr:`fill`, hostile
        text instead, for every run (so the page says why there is no image, quoting it)."""
        if self.fill:
            return self.text(original or f"(no image: {where})", where)
        if original is None:
            return None
        name = hostile_file_name(len(self.texts), self.tag) + Path(original).suffix
        self.images.mkdir(parents=True, exist_ok=True)
        copy = str(self.images / name)
        shutil.copyfile(original, copy)
        self.texts[f"(file) {original}"] = copy
        self.fields[copy].add(where)
        return copy

    def record(self, record: RunRecord) -> RunRecord:
        swapped = self._model(record)
        assert isinstance(swapped, RunRecord)
        return RunRecord.model_validate_json(swapped.model_dump_json())

    def _model(self, model: BaseModel) -> BaseModel:
        changes: dict[str, object] = {}
        for name, info in type(model).model_fields.items():
            where = f"{type(model).__name__}.{name}"
            value = getattr(model, name)
            if where == "RunRecord.generation_id":
                changes[name] = f"{value}-{self.tag.lower()}"
            elif where in ("RunRecord.image_path", "UpscaleRecord.path"):
                changes[name] = self.image(value, where)
            elif where in KEPT or (where == "RunError.type" and value == "interrupted"):
                continue
            elif value is None and self.fill and _optional_str(info.annotation):
                changes[name] = self.text(f"(none: {where})", where)
            else:
                changes[name] = self._swap(value, where, _literal(info.annotation))
        return model.model_copy(update=changes)

    def _swap(self, value: Any, where: str, literal: bool) -> Any:
        if isinstance(value, BaseModel):
            return self._model(value)
        if isinstance(value, str):
            return value if literal else self.text(value, where)
        if isinstance(value, (tuple, list)):
            return type(value)(self._swap(v, where, literal) for v in value)
        if isinstance(value, dict):
            keep = self.meta_keys and where == "ChatEvent.meta"
            return {
                (k if keep else self._swap(k, f"{where}{{}}", literal)): self._swap(
                    v, where, literal
                )
                for k, v in value.items()
            }
        return value


def real_records(work: Path) -> list[RunRecord]:
    """Nine real offline runs: every kind the site has a page or a branch for."""
    records = make_offline_runs(work / "one-round")
    records += list(make_round_runs(work / "rounds").values())
    records.append(make_protocol_run(work / "protocols"))
    assert len(records) == 9
    return records


class Page(HTMLParser):
    """One page as the browser reads it: its elements with their attributes, its text
    (character references decoded) and attribute values, its comments."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.texts: list[str] = []
        self.comments: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, attrs))
        self.texts.extend(v for _, v in attrs if v is not None)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self.texts.append(data)

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    def intact(self, texts: dict[str, set[str]]) -> set[str]:
        """Those of ``texts`` (by marker) the page holds whole, in one text or attribute
        value."""
        return {
            t
            for chunk in self.texts
            for m in MARKER.findall(chunk)
            for t in texts.get(m, ())
            if t in chunk
        }


def template_markup() -> tuple[set[str], set[str]]:
    """The element and attribute names the templates write themselves."""
    tags: set[str] = set()
    attrs: set[str] = set()
    for template in TEMPLATES.glob("*.html"):
        source = template.read_text(encoding="utf-8")
        tags |= {t.lower() for t in re.findall(r"<([A-Za-z][A-Za-z0-9]*)", source)}
        attrs |= {a.lower() for a in re.findall(r"\s([A-Za-z][A-Za-z-]*)=\"", source)}
    return tags, attrs


@dataclass(frozen=True)
class Site:
    root: Path
    hostile: tuple[Hostile, ...]

    def pages(self) -> list[Path]:
        return sorted(self.root.rglob("*.html"))

    def fields_of(self, text: str) -> set[str]:
        return set().union(*(h.fields.get(text, set()) for h in self.hostile))

    def by_marker(self) -> dict[str, set[str]]:
        texts: defaultdict[str, set[str]] = defaultdict(set)
        for t in (t for h in self.hostile for t in h.fields):
            texts[MARKER.findall(t)[-1]].add(t)
        return texts


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    work = tmp_path_factory.mktemp("escaping")
    records = real_records(work)
    images = work / "hostile-images"
    plain = Hostile("H", fill=False, images=images, meta_keys=True)
    filled = Hostile("F", fill=True, images=images)
    logs = work / "hostile-logs"
    logs.mkdir()
    for n, record in enumerate([*map(plain.record, records), *map(filled.record, records)]):
        (logs / f"{n:02d}_transcript.json").write_text(record.model_dump_json(), encoding="utf-8")
    store = f"sqlite:///{work / 'store.sqlite'}"
    assert cli.main(["runs", "import", str(logs), "--store", store], env={}) == 0
    out = work / "site"
    places = [f"image.generation_path={images}", f"upscale.output_path={images}"]
    args = ["review", "--store", store, "--out", str(out), "--last", "100"]
    with warnings.catch_warnings():
        # A judge id of 150 characters leaves a plot no room: matplotlib says its layout
        # collapsed and draws it anyway. What the plots show is not what this file tests.
        warnings.filterwarnings("ignore", "constrained_layout not applied", UserWarning)
        assert cli.main([*args, *(a for p in places for a in ("--set", p))], env={}) == 0
    return Site(out, (plain, filled))


def check_page(path: Path, site: Site, texts: dict[str, set[str]]) -> tuple[set[str], int]:
    """Fail on any element, attribute, comment or ``javascript:`` URL on the page that the
    templates do not write, on an image outside the site, and on hostile text shown but not
    whole. Returns the hostile texts shown and the number of images whose alt text is one."""
    tags, attrs = template_markup()
    captions = {p.caption for p in PLOTS}
    html = path.read_text(encoding="utf-8")
    page = Page(html)
    where = path.relative_to(site.root).as_posix()
    elements = [t for t, _ in page.elements if t not in tags or t in ("script", "svg")]
    assert not elements, (where, "elements the templates do not write", elements)
    named = [(t, n) for t, a in page.elements for n, _ in a if n not in attrs or n.startswith("on")]
    assert not named, (where, "attributes the templates do not write", named)
    assert not page.comments, (where, "comments", page.comments)
    alts = 0
    for tag, a in page.elements:
        for name, value in a:
            url = (value or "").strip().lower()
            assert not (name in URLS and url.startswith("javascript:")), (where, tag, name)
        if tag == "img":
            src, alt = dict(a)["src"] or "", dict(a).get("alt") or ""
            assert (path.parent / src).resolve().is_relative_to(site.root), (where, src)
            assert (path.parent / src).is_file(), (where, src)
            hostile_alt = any(t in alt for m in MARKER.findall(alt) for t in texts.get(m, ()))
            assert alt in captions or hostile_alt, (where, alt)
            alts += hostile_alt
    intact = page.intact(texts)
    whole = {m for t in intact for m in MARKER.findall(t)}
    assert whole == set(MARKER.findall(html)), (where, "hostile text shown cut", whole)
    return intact, alts


def test_every_page_shows_every_hostile_field_as_text(site: Site) -> None:
    pages = site.pages()
    names = {p.relative_to(site.root).as_posix() for p in pages}
    gallery = {"index.html", "index-image.html", "index-failed.html", "index-interrupted.html"}
    assert gallery | {"index-prompt-only.html", "panel.html"} <= names
    assert len([n for n in names if n.startswith("runs/")]) == 18
    texts = site.by_marker()
    shown: set[str] = set()
    alts = 0
    for path in pages:
        intact, images = check_page(path, site, texts)
        shown |= intact
        alts += images
    assert alts > 0, "no run image with a hostile alt text"
    fields = set().union(*(site.fields_of(t) for t in shown))
    missing = SHOWN - fields
    assert not missing, f"fields never shown as text (so never tested): {sorted(missing)}"
    held = set().union(*(f for h in site.hostile for f in h.fields.values()))
    untouched = (SHOWN | CARRIED) - held
    assert not untouched, f"fields the records never held hostile: {sorted(untouched)}"


SHOWN = {
    "BackendInfo.provider",
    "CandidateRecord.id",
    "ChatEvent.created_at",
    "ChatEvent.meta",
    "ChatEvent.path",
    "ChatEvent.prompt",
    "ChatEvent.response",
    "ChatEvent.response_model",
    "ChatEvent.system_prompt",
    "ChatParams.backend",
    "ChatParams.model",
    "ContextRecord.date_used",
    "ContextRecord.guidance",
    "IdeaCard.hook",
    "ImageEvent.created_at",
    "ImageEvent.format",
    "ImageEvent.model",
    "ImageEvent.path",
    "ImageEvent.prompt",
    "ImageEvent.quality",
    "ImageEvent.revised_prompt",
    "ImageEvent.size",
    "InjectorRecord.module",
    "InjectorRecord.name",
    "InjectorRecord.reason",
    "InjectorRecord.metadata",
    "JudgeResult.comparisons",
    "JudgeResult.error",
    "JudgeResult.id",
    "JudgeResult.model",
    "JudgeResult.order",
    "JudgeResult.profile",
    "JudgeResult.protocol",
    "JudgeResult.rationales",
    "JudgeResult.rationales{}",
    "JudgeResult.rubric",
    "JudgeResult.warning",
    "Reask.error",
    "Reask.response",
    "RoundCandidate.id",
    "RoundCandidate.parent",
    "RunError.cancelled_paths",
    "RunError.message",
    "RunError.output_preview",
    "RunError.path",
    "RunError.phase",
    "RunError.reason",
    "RunError.step",
    "RunError.type",
    "RunRecord.final_image_prompt",
    "RunRecord.image_path",
    "RunRecord.selected_concepts",
    "ScoringRecord.aggregation",
    "ScoringRecord.normalise",
    "ScoringRecord.selected_id",
    "SelectorRecord.model",
    "SelectorRecord.summary",
    "SelectorRecord.warning",
    "StepError.message",
    "StepError.reason",
    "StepError.type",
    "Survivor.reason",
    "TitleRecord.title",
    "UpscaleRecord.path",
    "UpscaleRecord.size",
    "UpscaleRecord.source_size",
}
"""The record fields the pages show: each must be among those shown, hostile, on some
page of the site (a field dropped from the pages is taken out of here). The run page's
model calls show a step's path, prompts, answer, model, start and ``meta`` (its role; a
judge's id and the cards it was shown, read by key), every rejected answer with its
reason, a step's error, the image call's request, and its judge's protocol, rationales,
pairwise choice and warning."""

CARRIED = {
    "IdeaCard.narrative",
    "JudgeResult.output_preview",
}
"""Fields the records hold, hostile like the rest, that no page shows today: a page that
starts showing one is tested as it is."""


ESCAPING_OFF = re.compile(
    r"\|\s*safe\b"  # {{ x | safe }}, {{ x|safe }}
    r"|\{%-?\s*filter\s+safe\b"  # {% filter safe %}
    r"|\{%-?\s*autoescape\s+false\b"  # {% autoescape false %}
    r"|\bautoescape\s*=\s*(?!True\b)"  # Environment(autoescape=False / a function)
    r"|\bMarkup\b|\bmarkupsafe\b|__html__",  # text marked as HTML that needs no escaping
    re.IGNORECASE,
)

ALLOWED: dict[tuple[str, str], str] = {}
"""Lines that may match :data:`ESCAPING_OFF`: (file under image_project/, the line
stripped) -> why. Only a fixed string the code makes may be let through, never record data;
there is none: every value the templates print is escaped, fixed ones too."""


def _sources() -> list[Path]:
    return sorted([*TEMPLATES.rglob("*"), *PACKAGE.rglob("*.py")])


def test_no_template_or_code_turns_escaping_off() -> None:
    found = []
    seen = set()
    environments = []
    for path in (p for p in _sources() if p.is_file()):
        name = path.relative_to(PACKAGE).as_posix()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if ESCAPING_OFF.search(line):
                if (name, line.strip()) in ALLOWED:
                    seen.add((name, line.strip()))
                else:
                    found.append(f"{name}:{n}: {line.strip()}")
    assert not found, "escaping turned off for what a page shows:\n" + "\n".join(found)
    assert seen == set(ALLOWED), f"allowed lines no longer there: {set(ALLOWED) - seen}"
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(func, "attr", None) == "Environment":
                on = [k.value for k in node.keywords if k.arg == "autoescape"]
                ok = [v.value for v in on if isinstance(v, ast.Constant)] == [True]
                environments.append((path.name, node.lineno, ok))
    assert environments and all(ok for _, _, ok in environments), environments
