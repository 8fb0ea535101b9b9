"""``runs stats`` over real offline runs of a panel of three judges on one offline model
and one judge on another: the offline backend gives judges on one model a shared error
(backends/offline/rubric.py), and the table prints the same-model group's effective number
of judges with its interval."""

from __future__ import annotations

import io
from pathlib import Path

import anyio

from image_project.analysis import panel_stats, stats_command
from image_project.app import run_generation
from image_project.backends.factory import make_backends
from image_project.record import ScoringRecord
from image_project.review import build_site, records_from_transcripts
from image_project.summary import record_lines
from tests.review.offline_runs import offline_cfg

MIXED = (
    "prompt.scoring.enabled=true",
    "run.mode=prompt_only",
    "prompt.scoring.judges=[{id: a, rubric: strict}, {id: b, rubric: strict}, "
    "{id: c, rubric: strict}, {id: ref, rubric: strict, model: offline-other}]",
)


async def _runs(out: Path, count: int) -> None:
    for seed in range(count):
        cfg = offline_cfg(out, 100 + seed, *MIXED)
        await run_generation(cfg, make_backends(cfg, {}))


def test_runs_stats_prints_the_same_model_groups_effective_judges(tmp_path: Path) -> None:
    anyio.run(_runs, tmp_path, 10)
    records = records_from_transcripts(sorted((tmp_path / "logs").glob("*_transcript.json")))
    assert len(records) == 10
    (group,) = panel_stats(records).independence.groups
    assert group.judges == ("a", "b", "c") and group.reference == ("ref",)
    assert group.model == "offline-text-1" and group.runs == 10
    assert group.n_eff is not None and group.n_eff_interval is not None, group.reason
    low, high = group.n_eff_interval
    assert 1.0 <= low <= group.n_eff <= high <= 3.0
    out = io.StringIO()
    assert stats_command(records, out) == 0
    text = out.getvalue()
    print(text)
    assert "Independence: effective number of judges of each same-model group" in text
    assert (
        f"Your 3 judges on offline-text-1 (a, b, c) act like {group.n_eff:.2f} independent judges "
        f"(95% interval {low:.2f} to {high:.2f}), measured against ref on other models over "
        "10 runs (10 rounds)" in text
    )
    # The review site's panel page says the same.
    panel = (build_site(records, tmp_path / "site").parent / "panel.html").read_text("utf-8")
    assert "<h2>Independence</h2>" in panel
    assert f"act like {group.n_eff:.2f} independent judges" in panel


def test_the_run_summary_warns_when_every_judge_uses_one_model(tmp_path: Path) -> None:
    anyio.run(_runs, tmp_path, 1)
    (record,) = records_from_transcripts(sorted((tmp_path / "logs").glob("*_transcript.json")))
    assert not any("WARNING" in line for line in record_lines(record, whole_prompt=False))
    scoring = record.blackbox_scoring
    assert isinstance(scoring, ScoringRecord)
    one_model = record.model_copy(
        update={
            "blackbox_scoring": scoring.model_copy(
                update={
                    "judges": tuple(j.model_copy(update={"model": "m"}) for j in scoring.judges)
                }
            )
        }
    )
    (warning,) = [line for line in record_lines(one_model, whole_prompt=False) if "WARNING" in line]
    assert "all 4 judges use one model (m)" in warning
    assert "somewhere between 1 and 4 judges" in warning
