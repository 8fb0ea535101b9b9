"""``runs stats`` over real offline runs of a panel of three judges on one offline model
and one judge on another: the offline backend gives judges on one model a shared error
(backends/offline/rubric.py), and the table prints the same-model group's effective number
of judges with its interval."""

from __future__ import annotations

import io
from pathlib import Path

import anyio

from image_project.analysis.panel import panel_stats
from image_project.analysis.table import stats_command
from image_project.backends.factory import make_backends
from image_project.cli.summary import record_lines
from image_project.record.run import RunRecord
from image_project.record.scoring import ScoringRecord
from image_project.review.site import build_site
from image_project.review.source import records_from_transcripts
from image_project.run.driver import run_generation
from tests.review.offline_runs import offline_cfg

MIXED = (
    "prompt.scoring.enabled=true",
    "run.mode=prompt_only",
    "prompt.scoring.judges=[{id: a, rubric: strict}, {id: b, rubric: strict}, "
    "{id: c, rubric: strict}, {id: ref, rubric: strict, model: offline-other}]",
)


MIXED_TWO_REFERENCES = (
    *MIXED[:2],
    "prompt.scoring.judges=[{id: a, rubric: strict}, {id: b, rubric: strict}, "
    "{id: c, rubric: strict}, {id: ref, rubric: strict, model: offline-other}, "
    "{id: ref2, rubric: strict, model: offline-third}]",
)


async def _runs(out: Path, count: int, settings: tuple[str, ...] = MIXED) -> None:
    for seed in range(count):
        cfg = offline_cfg(out, 100 + seed, *settings)
        await run_generation(cfg, make_backends(cfg, {}))


def _stats(records: list[RunRecord]) -> str:
    out = io.StringIO()
    assert stats_command(records, out) == 0
    print(out.getvalue())
    return out.getvalue()


def _without(records: list[RunRecord], judge: str) -> list[RunRecord]:
    """The records as if ``judge`` had not been on the panel."""
    kept = []
    for record in records:
        scoring = record.blackbox_scoring
        assert isinstance(scoring, ScoringRecord)
        judges = tuple(j for j in scoring.judges if j.id != judge)
        kept.append(
            record.model_copy(
                update={"blackbox_scoring": scoring.model_copy(update={"judges": judges})}
            )
        )
    return kept


def test_runs_stats_says_what_the_effective_judges_estimate_knows(tmp_path: Path) -> None:
    """30 offline runs of three judges on one model and two on others: on 10 of them with
    one reference, no interval and how many runs it needs; on all 30 with one reference, the
    interval and its assumptions; with both references, the scale-free estimate."""
    anyio.run(_runs, tmp_path, 30, MIXED_TWO_REFERENCES)
    records = records_from_transcripts(sorted((tmp_path / "logs").glob("*_transcript.json")))
    # In the order they ran: generation ids made in one second sort by their random part.
    records.sort(key=lambda r: r.seed)
    assert len(records) == 30
    one_reference = _without(records, "ref2")

    (group,) = panel_stats(one_reference[:10]).independence.groups
    assert group.runs == 10 and group.n_eff is not None and group.n_eff_interval is None
    text = _stats(one_reference[:10])
    assert "Independence: effective number of judges of each same-model group" in text
    assert (
        f"Your 3 judges on offline-text-1 (a, b, c) act like {group.n_eff:.2f} independent judges "
        "(no interval: an interval needs at least 30 runs, 20 more than these 10), measured "
        "against ref on other models over 10 runs (10 rounds)" in text
    )
    assert "95% interval" not in text

    (group,) = panel_stats(one_reference).independence.groups
    assert group.reference == ("ref",) and not group.scale_free
    assert group.n_eff is not None and group.n_eff_interval is not None, group.reason
    low, high = group.n_eff_interval
    assert 1.0 <= low <= group.n_eff <= high <= 3.0 and f"{low:.2f}" != f"{high:.2f}"
    text = _stats(one_reference)
    assert (
        f"Your 3 judges on offline-text-1 (a, b, c) act like {group.n_eff:.2f} independent judges "
        f"(95% interval {low:.2f} to {high:.2f}), measured against ref on other models over "
        "30 runs (30 rounds)" in text
    )
    assert "It assumes the reference judge (ref) on other models score the same quality" in text
    # The review site's panel page says the same.
    panel = (build_site(one_reference, tmp_path / "site").parent / "panel.html").read_text("utf-8")
    assert "<h2>Independence</h2>" in panel
    assert f"act like {group.n_eff:.2f} independent judges" in panel

    (group,) = panel_stats(records).independence.groups
    assert group.reference == ("ref", "ref2") and group.scale_free
    assert group.n_eff is not None and group.n_eff_interval is not None, group.reason
    text = _stats(records)
    assert f"act like {group.n_eff:.2f} independent judges" in text
    assert "Scale-free estimate from 2 reference judges (ref, ref2)" in text


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
