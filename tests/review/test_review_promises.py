"""docs/review.md's promises that no other review test keeps: the image copy skipped only
when the copy there has the source's size and modification time, no file of the site
written through a planted link, nothing in the output directory deleted, unknown template
variables as errors, symbolic links in the image folder resolved before the folder check,
the heatmap's colours, what a gallery card shows, and the panel figures of a multi-round
run taken from its last round."""

from __future__ import annotations

import ast
import html
import io
import os
import re
from pathlib import Path

import jinja2
import pytest
from PIL import Image

from image_project.analysis.panel import panel_stats
from image_project.analysis.table import stats_command
from image_project.cli import command as cli
from image_project.record.run import RunError, RunRecord
from image_project.record.scoring import ScoringRecord
from image_project.review import plots
from image_project.review.gallery import GALLERY_FILTERS
from image_project.review.plots import PLOTS
from image_project.review.site import _environment, build_site
from image_project.review.views import heat_style, page_name
from tests.review.offline_runs import make_offline_runs, make_round_runs
from tests.support.records import judge, run


def jpeg(path: Path, colour: str = "teal") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 24), colour).save(path, format="JPEG")
    return path


def test_an_image_is_copied_again_only_when_its_size_or_time_differs(tmp_path: Path) -> None:
    source = jpeg(tmp_path / "out" / "a.jpg")
    record = run(1, scoring=False, image_path=str(source))
    build_site([record], tmp_path / "site")
    copy = tmp_path / "site" / "images" / f"{page_name('run001')}.jpg"
    # Same size and modification time as the source, other bytes: left as it is.
    stand_in = bytes(len(source.read_bytes()))
    copy.write_bytes(stand_in)
    stat = source.stat()
    os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    build_site([record], tmp_path / "site")
    assert copy.read_bytes() == stand_in
    # The source touched (another modification time): copied again.
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    build_site([record], tmp_path / "site")
    assert copy.read_bytes() == source.read_bytes()


def test_no_file_of_the_site_is_written_through_a_planted_link(tmp_path: Path) -> None:
    a = {"A": 80, "B": 20, "C": 50}
    image = jpeg(tmp_path / "out" / "a.jpg")
    records = [run(1, [judge("strict", a), judge("warm", a)], image_path=str(image))]
    victim = tmp_path / "victim.txt"
    victim.write_text("do not overwrite\n", encoding="utf-8")
    site = tmp_path / "site"
    planted = [
        site / "index.html",
        *(site / file for _, file, _ in GALLERY_FILTERS),
        site / "panel.html",
        site / "runs" / "run001.html",
        site / "images" / "run001.jpg",
        site / "static" / "style.css",
        *(site / "plots" / plot.filename for plot in PLOTS),
    ]
    for link in dict.fromkeys(planted):
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(victim)
    build_site(records, site)
    assert victim.read_text(encoding="utf-8") == "do not overwrite\n"
    for path in planted:
        assert not path.is_symlink() and path.is_file(), path


def test_building_the_site_deletes_nothing_in_its_directory(tmp_path: Path) -> None:
    site = tmp_path / "site"
    build_site([run(1, scoring=False)], site)
    (site / "notes.txt").write_text("mine\n", encoding="utf-8")
    (site / "images" / "old.jpg").write_bytes(b"old")
    build_site([run(2, scoring=False)], site)
    assert (site / "runs" / "run001.html").is_file()  # a run no longer selected
    assert (site / "runs" / "run002.html").is_file()
    assert (site / "notes.txt").read_text(encoding="utf-8") == "mine\n"
    assert (site / "images" / "old.jpg").read_bytes() == b"old"


def test_an_unknown_template_variable_is_an_error() -> None:
    env = _environment()
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ run.nosuchfield }}").render(run={})
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("run.html").render(root="../")  # no ``run``


def test_a_link_in_the_image_folder_to_a_file_outside_it_is_not_published(
    tmp_path: Path,
) -> None:
    images = tmp_path / "output" / "images"
    outside = jpeg(tmp_path / "private" / "holiday.jpg")
    link = images / "linked_image.jpg"
    images.mkdir(parents=True)
    link.symlink_to(outside)
    root = build_site(
        [run(1, scoring=False, image_path=str(link))], tmp_path / "site", image_dirs=[images]
    ).parent
    assert list((root / "images").iterdir()) == []
    page = (root / "runs" / "run001.html").read_text(encoding="utf-8")
    assert "image not available (not under the image folder" in page


def _lightness(style: str) -> int:
    found = re.search(r"hsl\(212, 70%, (\d+)%\)", style)
    assert found is not None, style
    return int(found.group(1))


def test_the_heatmap_is_a_darker_blue_for_a_higher_score_and_grey_without_one() -> None:
    lightness = [_lightness(heat_style(score)) for score in range(0, 101, 10)]
    assert lightness == sorted(lightness, reverse=True) and len(set(lightness)) == len(lightness)
    assert "#eeeeee" in heat_style(None)


@pytest.fixture(scope="module")
def offline_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[RunRecord], str]:
    work = tmp_path_factory.mktemp("offline-runs")
    records = make_offline_runs(work)
    index = build_site(records, work / "site")
    return records, index.read_text(encoding="utf-8")


def _card(gallery: str, record: RunRecord) -> tuple[str, str]:
    """The gallery card of ``record``: its HTML, and its text without tags."""
    start = gallery.index(f'href="runs/{page_name(record.generation_id)}.html"')
    card = gallery[gallery.rindex("<li ", 0, start) : gallery.index("</li>", start)]
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", card)).split())
    return card, text


def test_a_gallery_card_shows_title_concepts_date_seed_and_the_selected_card(
    offline_site: tuple[list[RunRecord], str],
) -> None:
    records, gallery = offline_site
    scored = next(
        r for r in records if r.succeeded and isinstance(r.blackbox_scoring, ScoringRecord)
    )
    scoring = scored.blackbox_scoring
    assert isinstance(scoring, ScoringRecord) and scoring.selected_card is not None
    card, text = _card(gallery, scored)
    assert scored.title_generation is not None and scored.title_generation.title in text
    assert scored.selected_concepts
    for concept in scored.selected_concepts:
        assert concept in text
    assert f"seed {scored.seed}" in text and scored.created_at[:10] in text
    hook = " ".join(scoring.selected_card.hook.split())
    assert f"card {scoring.selected_id} : {hook} {scoring.selection_mode}" in text
    assert "status-" not in card  # a run that succeeded shows no status
    failed = next(r for r in records if not r.succeeded)
    assert failed.error is not None
    card, text = _card(gallery, failed)
    assert f"failed: {failed.error.type} in {failed.error.phase}" in text
    assert 'class="status status-failed">failed<' in card


def test_the_panel_figures_of_a_multi_round_run_are_its_last_rounds(tmp_path: Path) -> None:
    record = make_round_runs(tmp_path)["rounds"]
    scoring = record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord) and scoring.evolution is not None
    first, *_, last = scoring.evolution.rounds
    stats = {j.judge: j for j in panel_stats([record]).judges}

    def scores(results: tuple[object, ...], judge_id: str) -> list[int]:
        (result,) = [r for r in results if getattr(r, "id", None) == judge_id]
        return sorted((getattr(result, "scores", None) or {}).values())

    for judge_id, judged in stats.items():
        assert judged.scores is not None and judged.counts.total == 1
        assert sorted(judged.scores.scores) == scores(last.judges, judge_id)
        assert sorted(judged.scores.scores) != scores(first.judges, judge_id)


def test_review_writes_the_20_newest_runs_into_review_beside_the_log_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "out" / "logs"
    logs.mkdir(parents=True)
    for n in range(1, 22):
        record = run(n, scoring=False)
        (logs / f"{record.generation_id}_transcript.json").write_text(
            record.model_dump_json(), encoding="utf-8"
        )
    sets = ["--set", f"image.log_path={logs}"]
    assert cli.main(["runs", "import", str(logs), *sets], env={}) == 0
    capsys.readouterr()
    assert cli.main(["review", *sets], env={}) == 0
    site = tmp_path / "out" / "review"
    assert str(site / "index.html") in capsys.readouterr().out
    pages = sorted(p.stem for p in (site / "runs").glob("*.html"))
    assert pages == [f"run{n:03d}" for n in range(2, 22)]


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_a_failed_run_page_shows_every_part_of_its_error(tmp_path: Path) -> None:
    error = RunError(
        type="ServerError",
        message="upstream 503 zebra-4f1",
        phase="image",
        step="image",
        path="image",
        status=503,
        attempts=4,
        reason="overloaded walrus-9c2",
    )
    record = run(1, scoring=False).model_copy(update={"error": error})
    root = build_site([record], tmp_path / "site").parent
    text = _text((root / "runs" / "run001.html").read_text(encoding="utf-8"))
    assert "Run failed" in text
    assert "error ServerError: upstream 503 zebra-4f1 phase image step image (image)" in text
    assert "status 503 after 4 attempts reason overloaded walrus-9c2" in text


def test_the_judges_table_shows_each_judges_settings_status_attempts_order_and_error(
    tmp_path: Path,
) -> None:
    ok = judge("strict", {"A": 80, "B": 20, "C": 50}, order=("C", "A", "B"), model="m-zebra")
    ok = ok.model_copy(update={"temperature": 0.3, "rubric": "strict", "profile": "hints"})
    refused = judge("warm", None, status="refused", order=("B", "C", "A"), model="m-walrus")
    refused = refused.model_copy(update={"attempts": 3})
    root = build_site([run(1, [ok, refused])], tmp_path / "site").parent
    text = _text((root / "runs" / "run001.html").read_text(encoding="utf-8"))
    assert "strict m-zebra 0.3 strict hints ok 1 C A B" in text
    assert "warm m-walrus 0.0 default raw refused 3 B C A refused from warm" in text


def test_the_plots_use_no_pyplot_state() -> None:
    """The review's modules draw on ``matplotlib.figure.Figure`` (the Agg canvas); none
    imports ``matplotlib.pyplot``, whose global figures and display backend a library must
    not touch."""
    folder = Path(plots.__file__).parent
    imported: list[str] = []
    for module in folder.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported += [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                imported += [a.name for a in node.names]
    assert "matplotlib.figure" in imported or "matplotlib.figure.Figure" in imported
    assert [name for name in imported if name.startswith("matplotlib.pyplot")] == []


def test_a_judge_id_is_one_judge_across_runs_with_every_model_it_ran_on() -> None:
    a = {"A": 80, "B": 20, "C": 50}
    records = [
        run(1, [judge("strict", a, model="m-zebra")]),
        run(2, [judge("strict", a, model="m-walrus")]),
        run(3, [judge("strict", a, model="m-zebra")]),
    ]
    (strict,) = panel_stats(records).judges
    assert strict.models == ("m-walrus", "m-zebra") and strict.counts.total == 3
    out = io.StringIO()
    stats_command(records, out)
    row = next(line for line in out.getvalue().splitlines() if line.startswith("strict "))
    assert row.split()[1] == "m-walrus,m-zebra"
