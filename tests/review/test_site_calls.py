"""The run page's model calls: every call of the run (each chat step, the image call, the
call that failed the run, the calls an interrupt cut off), in the record's order, each a
``<details>`` collapsed by default whose summary starts with its path; opened, its request,
every rejected answer with its reason, its answer and, for a judge's call, the rationales
or the pairwise choice its judge's record holds. Real offline runs, the site built from
their records, the pages parsed."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from image_project.record.events import ChatEvent, ImageEvent
from image_project.record.run import RunRecord
from image_project.record.scoring import ScoringRecord
from image_project.review.site import build_site
from image_project.review.views import page_name
from tests.review.offline_runs import make_protocol_run, make_round_runs


@dataclass
class CallElement:
    attrs: dict[str, str | None]
    summary: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.summary[0]

    @property
    def text(self) -> str:
        return "\n".join(self.body)


class CallsPage(HTMLParser):
    """The ``details.call`` elements of a run page: their attributes, the texts of their
    summary (one per column) and of their body (character references decoded)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.calls: list[CallElement] = []
        self.section = False
        self.depth = 0  # open <details> inside the current call
        self.in_summary = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "section" and found.get("class") == "calls":
            self.section = True
        if tag == "details" and "call" in (found.get("class") or "").split():
            assert self.section, "a call outside the calls section"
            self.calls.append(CallElement(found))
            self.depth += 1
        elif tag == "summary" and self.depth:
            self.in_summary = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "details" and self.depth:
            self.depth -= 1
        elif tag == "summary":
            self.in_summary = False
        elif tag == "section":
            self.section = False

    def handle_data(self, data: str) -> None:
        if self.depth and data.strip():
            call = self.calls[-1]
            (call.summary if self.in_summary else call.body).append(data)


@dataclass(frozen=True)
class Pages:
    root: Path
    protocols: RunRecord
    rounds: dict[str, RunRecord]

    def calls(self, record: RunRecord) -> list[CallElement]:
        page = self.root / "runs" / f"{page_name(record.generation_id)}.html"
        return CallsPage(page.read_text(encoding="utf-8")).calls


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Pages:
    work = tmp_path_factory.mktemp("site-calls")
    protocols = make_protocol_run(work / "protocols")
    rounds = make_round_runs(work / "rounds")
    index = build_site([protocols, *rounds.values()], work / "site")
    return Pages(index.parent, protocols, rounds)


def recorded(record: RunRecord) -> list[str]:
    return [s.path for s in record.steps if isinstance(s, ChatEvent | ImageEvent)]


def test_every_call_is_listed_with_its_path_and_collapsed(pages: Pages) -> None:
    for record in [pages.protocols, *pages.rounds.values()]:
        calls = pages.calls(record)
        paths = recorded(record)
        if record.error is not None and record.error.requests is not None:
            paths.append(record.error.path or "")  # the call that failed the run
        if record.error is not None:
            paths += list(record.error.cancelled_paths)  # the calls cut off
        assert [c.path for c in calls] == paths, record.generation_id
        assert all("open" not in c.attrs for c in calls), "a call opened by default"
        assert len({c.attrs["id"] for c in calls}) == len(calls)
    assert len(pages.calls(pages.protocols)) > 50
    cut = pages.calls(pages.rounds["interrupted"])[-3:]
    assert all(c.summary[-1] == "cut off" for c in cut)
    (failed,) = pages.calls(pages.rounds["failed_early"])
    assert failed.summary[-1] == "failed the run: ServerError"


def test_an_opened_call_shows_its_request_and_answer(pages: Pages) -> None:
    record = pages.protocols
    calls = {c.path: c for c in pages.calls(record)}
    for step in record.chat_steps[:3]:
        body = calls[step.path].text
        assert step.prompt.splitlines()[0] in body
        assert step.response is not None and step.response in body
        if step.system_prompt is not None:
            assert step.system_prompt.splitlines()[0] in body
    image = record.image_step
    assert image is not None and image.prompt in calls[image.path].text


def test_a_judges_call_shows_its_rationales_and_pairwise_choice(pages: Pages) -> None:
    record = pages.protocols
    scoring = record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord)
    calls = {c.path: c for c in pages.calls(record)}
    why = next(j for j in scoring.judges if j.protocol == "reasoned")
    assert why.rationales
    body = calls[why.path].body
    assert f"Judge {why.id} (reasoned): status ok" in body
    for card, rationale in why.rationales.items():
        assert body[body.index(card) + 1] == rationale  # the rationale table's row
    duel = next(j for j in scoring.judges if j.protocol == "pairwise")
    duels = [s for s in record.chat_steps if s.meta.get("judge_id") == duel.id]
    assert len(duels) == len(duel.comparisons or ()) == 30
    for step, (first, second, winner) in zip(duels, duel.comparisons or (), strict=True):
        assert step.meta["order"] == [first, second]
        choice = f"Pairwise choice: shown {first} then {second}; {winner} won"
        assert choice in calls[step.path].body
        assert calls[step.path].summary[3] == "pairwise"  # the protocol column


def test_a_call_shows_every_rejected_answer_with_its_reason(pages: Pages) -> None:
    record = pages.rounds["rounds"]
    step = next(s for s in record.chat_steps if s.reasks)
    call = next(c for c in pages.calls(record) if c.path == step.path)
    total = len(step.reasks)
    assert total == 2
    for n, reask in enumerate(step.reasks, start=1):
        head = f"Rejected answer {n} of {total}: {reask.error}"
        at = call.body.index(head)
        assert call.body[at + 2] == reask.response  # after the note of what was kept
    assert step.error is not None
    assert call.summary[-1] == f"error: {step.error.reason}"
    assert "outcome-error" in (call.attrs["class"] or "").split()
