"""Why this card, without a browser: the run page of a multi-round run shows every
round as a tree (each card's parent linked, a heatmap of judges' scores per round, the
novelty penalty, every survivor's category, reason and proposer, the selector and its
fallback with its cause), the final pick with the rule that made it; interrupted runs are
called interrupted, a scoring run that failed early is not "Scoring was off"; the gallery's
filters are static pages and prompt-only runs are listed apart. Everything is read from real
offline runs' records."""

from __future__ import annotations

import html
import itertools
import json
import re
from pathlib import Path

import pytest

from image_project.record.run import RunRecord
from image_project.record.scoring import ScoringRecord, pick_rule
from image_project.review.gallery import GALLERY_FILTERS
from image_project.review.site import build_site
from image_project.review.views import page_name
from tests.review.offline_runs import make_round_runs
from tests.support.records import judge, run

SECTION = re.compile(r'<section class="round[^"]*" id="round-(\d+)">(.*?)</section>', re.S)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, RunRecord], Path]:
    work = tmp_path_factory.mktemp("round-runs")
    runs = make_round_runs(work)
    root = build_site(list(runs.values()), work / "site").parent
    return runs, root


def scoring(record: RunRecord) -> ScoringRecord:
    assert isinstance(record.blackbox_scoring, ScoringRecord)
    return record.blackbox_scoring


def page(root: Path, record: RunRecord) -> str:
    return (root / "runs" / f"{page_name(record.generation_id)}.html").read_text(encoding="utf-8")


def test_every_round_is_a_heatmap_with_parents_survivors_and_selectors(
    made: tuple[dict[str, RunRecord], Path],
) -> None:
    runs, root = made
    record = runs["rounds"]
    evolution = scoring(record).evolution
    assert evolution is not None and len(evolution.rounds) == 3
    text = page(root, record)
    sections = dict(SECTION.findall(text))
    assert sorted(sections) == ["0", "1", "2"]
    anchors = set(re.findall(r' id="([^"]+)"', text))
    for r in evolution.rounds:
        body = sections[str(r.index)]
        rows = re.findall(r'<tr id="(r\d+-[^"]+)"', body)
        assert rows == [f"r{r.index}-{c.id}" for c in r.candidates]
        judged = len(r.score_table)
        # judges + median coloured per judged card: the heatmap of this round
        assert body.count('style="background-color') == judged * (len(r.judges) + 1)
        for c in r.candidates:
            if c.kind != "card":
                parent = c.id if c.kind == "parent" else c.parent
                assert f'href="#r{r.index - 1}-{parent}"' in body
                assert f"r{r.index - 1}-{parent}" in anchors
        for s in r.survivors:
            assert s.reason in html.unescape(body)
            assert f'category-{s.category}">{s.category}</span>' in body
            by = "LLM selector" if s.proposed_by == "llm" else "code"
            row = body.split(f'<tr id="r{r.index}-{s.id}"', 1)[1].split("</tr>", 1)[0]
            assert f'class="by">{by}</span>' in row
    round_0, round_1 = evolution.rounds[0], evolution.rounds[1]
    assert round_0.selector is not None and round_0.selector.status == "ok"
    assert round_1.selector is not None and round_1.selector.status == "fallback"
    assert "Fallback to the code choice." not in sections["0"]
    assert "Fallback to the code choice." in sections["1"]
    assert (round_1.selector.warning or "-") in html.unescape(sections["1"])
    assert all(s.proposed_by == "code" for s in round_1.survivors)


def test_the_final_pick_is_starred_in_the_last_round_with_its_rule_and_lineage(
    made: tuple[dict[str, RunRecord], Path],
) -> None:
    runs, root = made
    record = runs["rounds"]
    s = scoring(record)
    text = page(root, record)
    assert text.count(" ★</th>") == 1
    sections = dict(SECTION.findall(text))
    assert f"{s.selected_id} ★" in sections["2"]
    rule = pick_rule(s)
    assert rule.startswith(f"{s.selection_mode}: roll {s.exploration_roll:.3f}")
    assert rule in html.unescape(text)
    assert s.evolution is not None
    lineage = [c.id for _, c in s.evolution.history(s.selected_id or "")]
    assert lineage[-1] == s.selected_id and len(lineage) == 3
    shown = text.split("Its way through the rounds: ", 1)[1].split("</p>", 1)[0]
    assert [part.split(" ")[0] for part in html.unescape(shown).split(" -> ")] == lineage


def test_an_interrupted_run_is_interrupted_and_shows_its_rounds_so_far(
    made: tuple[dict[str, RunRecord], Path],
) -> None:
    runs, root = made
    record = runs["interrupted"]
    assert record.error is not None and record.error.type == "interrupted"
    text = page(root, record)
    assert "Run interrupted" in text and "Run failed" not in text
    assert "No card was selected: the run was interrupted in phase pipeline" in text
    sections = dict(SECTION.findall(text))
    assert sorted(sections) == ["0", "1"]
    assert "Not judged: the run was interrupted in phase pipeline." in sections["1"]
    gallery = (root / "index.html").read_text(encoding="utf-8")
    card = gallery.split(f'href="runs/{page_name(record.generation_id)}.html"', 1)[0]
    assert card.rsplit("<li ", 1)[1].startswith('class="card run-interrupted')
    assert "interrupted in pipeline" in gallery


def test_a_scoring_run_that_failed_before_scoring_is_not_scoring_off(
    made: tuple[dict[str, RunRecord], Path],
) -> None:
    runs, root = made
    failed = page(root, runs["failed_early"])
    assert "Scoring was off" not in failed
    assert "No scoring record: the run failed in phase concept_filter" in failed
    assert "Scoring was off for this run." in page(root, runs["prompt_only"])


def test_gallery_filters_are_static_pages_and_prompt_only_runs_are_listed_apart(
    made: tuple[dict[str, RunRecord], Path],
) -> None:
    runs, root = made
    cards = {}
    for name, file, label in GALLERY_FILTERS:
        text = (root / file).read_text(encoding="utf-8")
        for _, other, _ in GALLERY_FILTERS:
            assert f'href="{other}"' in text or other == file
        assert f'aria-current="page">{label} (' in text
        gallery = (
            text.split('<ul class="gallery">', 1)[1].split("</ul>", 1)[0]
            if ('<ul class="gallery">' in text)
            else ""
        )
        cards[name] = sorted(re.findall(r'<h2><a href="runs/([^"]+)\.html"', gallery))
    ids = {k: page_name(r.generation_id) for k, r in runs.items()}
    assert cards["all"] == sorted([ids["rounds"], ids["interrupted"], ids["failed_early"]])
    assert cards["image"] == [ids["rounds"]]
    assert cards["failed"] == [ids["failed_early"]]
    assert cards["interrupted"] == [ids["interrupted"]]
    assert cards["prompt_only"] == []
    for name in ("all", "prompt_only"):
        text = (root / dict((n, f) for n, f, _ in GALLERY_FILTERS)[name]).read_text("utf-8")
        listed = text.split('<table class="prompt-runs">', 1)[1]
        assert f'href="runs/{ids["prompt_only"]}.html"' in listed
    assert "1 failed, 1 interrupted." in (root / "index.html").read_text(encoding="utf-8")


def test_selector_and_survivor_text_is_escaped(
    made: tuple[dict[str, RunRecord], Path], tmp_path: Path
) -> None:
    runs, _ = made
    data = json.loads(runs["rounds"].model_dump_json())
    rounds = data["blackbox_scoring"]["evolution"]["rounds"]
    rounds[0]["survivors"][0]["reason"] = "<script>alert('reason')</script>"
    rounds[0]["selector"]["summary"] = "<img src=x onerror=alert(1)>"
    rounds[1]["selector"]["warning"] = "<b>bold</b> & co"
    hostile = RunRecord.model_validate(data)
    root = build_site([hostile], tmp_path / "site").parent
    text = page(root, hostile)
    assert "<script>" not in text and "<img src=x" not in text and "<b>bold" not in text
    assert "&lt;script&gt;alert(&#39;reason&#39;)&lt;/script&gt;" in text
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; co" in text


def test_the_panel_page_does_not_colour_zero_counts(tmp_path: Path) -> None:
    records = [run(1, [judge("strict", {"A": 80, "B": 20}), judge("warm", None, status="refused")])]
    root = build_site(records, tmp_path / "site").parent
    panel = (root / "panel.html").read_text(encoding="utf-8")
    assert '<td class="status-refused">1</td>' in panel
    assert re.search(r'class="status-[a-z_]+">0<', panel) is None
    assert '<td class="zero">0</td>' in panel


def test_history_follows_the_parent_chain_back_to_the_first_card(
    made: tuple[dict[str, RunRecord], Path],
) -> None:
    runs, _ = made
    evolution = scoring(runs["rounds"]).evolution
    assert evolution is not None
    for r in evolution.rounds:
        for c in r.candidates:
            chain = evolution.history(c.id)
            assert chain[-1][1].id == c.id and chain[0][1].kind == "card"
            assert [x.index for x, _ in chain] == list(
                range(chain[0][0].index, chain[-1][0].index + 1)
            )
            for (_, older), (_, newer) in itertools.pairwise(chain):
                assert older.id == (newer.id if newer.kind == "parent" else newer.parent)
    assert evolution.history("nosuchcard") == ()


def test_tau_labels_are_white_on_the_dark_ends_of_the_matrix() -> None:
    from matplotlib.figure import Figure

    from image_project.analysis.panel import panel_stats
    from image_project.review.plots import _agreement

    a, b = {"A": 80, "B": 20, "C": 50}, {"A": 10, "B": 90, "C": 40}
    stats = panel_stats([run(1, [judge("one", a), judge("two", a), judge("three", b)])])
    fig = Figure()
    _agreement(fig, stats)
    colours = {t.get_text(): t.get_color() for t in fig.axes[0].texts}
    assert colours["1.00"] == "white" and colours["-1.00"] == "white"
