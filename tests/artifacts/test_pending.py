"""The pending transcript (``image_project.artifacts.pending``): held while its run lives, so
only a killed run's is reported; a repair completes a run whose manifest row was written and
rolls back one killed before it, removing only the run's own images."""

from __future__ import annotations

from pathlib import Path

import pytest

from image_project.artifacts.generations import read_generations
from image_project.artifacts.manifest import append_manifest_row, read_manifest
from image_project.artifacts.pending import (
    PendingRecords,
    PendingTranscript,
    RepairScope,
    left_by_killed_runs,
    pending_path,
    repair,
)
from image_project.artifacts.transcript import read_transcript
from tests.support.records import run

GID = "run001"


def scope(tmp: Path, logs: str = "logs") -> RepairScope:
    """Where the runs of these tests write (as ``pending_run`` lays them out)."""
    images = tmp / "images"
    return RepairScope(
        log_dir=tmp / logs,
        image_dir=images,
        upscale_dir=images,
        manifest=images / "titles_manifest.csv",
        generations=tmp / "generations.csv",
    )


def pending_run(tmp: Path, *, image_name: str = f"{GID}_image.jpg") -> PendingTranscript:
    """A run's pending transcript in ``tmp/logs``, its image in ``tmp/images`` (written)."""
    image = tmp / "images" / image_name
    image.parent.mkdir(parents=True)
    image.write_bytes(b"\xff\xd8 a captioned image")
    record = run(1, image_path=str(image), title="Quiet Harbour")
    where = PendingRecords(
        generation_id=GID,
        transcript=str(tmp / "logs" / f"{GID}_transcript.json"),
        image=str(image),
        manifest=str(tmp / "images" / "titles_manifest.csv"),
        seq=1,
        manifest_row={
            "seq": "1",
            "title": "Quiet Harbour",
            "generation_id": GID,
            "image_prompt": "a harbour",
            "image_path": str(image),
        },
        generations=str(tmp / "generations.csv"),
        generations_row={
            "generation_id": GID,
            "selected_concepts": ["Baroque"],
            "final_image_prompt": "a harbour",
            "image_path": str(image),
            "seed": "1",
        },
    )
    return PendingTranscript.write(pending_path(tmp / "logs", GID), where, record)


def test_a_live_runs_pending_transcript_is_not_reported_and_a_dead_ones_is(
    tmp_path: Path,
) -> None:
    pending = pending_run(tmp_path)
    assert left_by_killed_runs(tmp_path / "logs", scope(tmp_path)) == []  # its run holds it
    pending.close()  # as when the process ends without removing it
    (leftover,) = left_by_killed_runs(tmp_path / "logs", scope(tmp_path))
    assert leftover.generation_id == GID and leftover.image and not leftover.committed
    line = leftover.describe("image-project runs import X")
    assert str(pending.path) in line and str(tmp_path / "images" / f"{GID}_image.jpg") in line
    assert "missing: the manifest row, the generations row, the transcript" in line


def test_a_removed_pending_transcript_leaves_nothing_to_report(tmp_path: Path) -> None:
    pending_run(tmp_path).remove()
    assert left_by_killed_runs(tmp_path / "logs", scope(tmp_path)) == []
    assert list((tmp_path / "logs").iterdir()) == []


def test_a_run_with_its_manifest_row_is_completed(tmp_path: Path) -> None:
    pending = pending_run(tmp_path)
    manifest = tmp_path / "images" / "titles_manifest.csv"
    append_manifest_row(
        manifest,
        {"seq": "1", "title": "T", "generation_id": GID, "image_prompt": "p", "image_path": "i"},
    )
    pending.close()
    (leftover,) = left_by_killed_runs(tmp_path / "logs", scope(tmp_path))
    repaired = repair(leftover, scope(tmp_path))
    assert repaired.outcome == "completed"
    assert [r["generation_id"] for r in read_generations(tmp_path / "generations.csv")] == [GID]
    record = read_transcript(tmp_path / "logs" / f"{GID}_transcript.json")
    assert record.error is None and record.image_bytes == len(b"\xff\xd8 a captioned image")
    assert (
        not pending.path.exists() and left_by_killed_runs(tmp_path / "logs", scope(tmp_path)) == []
    )


def test_a_run_killed_before_its_manifest_row_is_rolled_back(tmp_path: Path) -> None:
    pending = pending_run(tmp_path)
    pending.close()
    (leftover,) = left_by_killed_runs(tmp_path / "logs", scope(tmp_path))
    assert repair(leftover, scope(tmp_path)).outcome == "rolled_back"
    assert not (tmp_path / "images" / f"{GID}_image.jpg").exists()
    assert read_manifest(tmp_path / "images" / "titles_manifest.csv") == []
    record = read_transcript(tmp_path / "logs" / f"{GID}_transcript.json")
    assert record.error is not None
    assert (record.error.type, record.error.phase) == ("interrupted", "records")
    assert record.image_path is None and record.title_generation is None


def test_a_pending_transcript_naming_another_file_is_refused_and_touches_nothing(
    tmp_path: Path,
) -> None:
    # A pending transcript that names another file (copied from elsewhere, or made up) is
    # refused: that file is never removed, and neither is the pending transcript.
    pending = pending_run(tmp_path, image_name="holiday.jpg")
    pending.close()
    (leftover,) = left_by_killed_runs(tmp_path / "logs", scope(tmp_path))
    holiday = tmp_path / "images" / "holiday.jpg"
    assert leftover.refused == (
        f"its image {str(holiday)!r} is not {tmp_path / 'images' / f'{GID}_image.jpg'} "
        "(image.generation_path)"
    )
    assert leftover.describe("X") == leftover.refusal()
    assert repair(leftover, scope(tmp_path)).outcome == "refused"
    assert holiday.exists() and pending.path.exists()
    assert not (tmp_path / "logs" / f"{GID}_transcript.json").exists()


def test_a_pending_transcript_cut_short_is_reported_and_removed(tmp_path: Path) -> None:
    path = pending_path(tmp_path, GID)
    path.write_text('{"pending_records": {"generation_id": "run0', encoding="utf-8")
    (leftover,) = left_by_killed_runs(tmp_path, scope(tmp_path, logs=""))
    assert leftover.pending is None and "cut short" in leftover.describe("X")
    assert repair(leftover, scope(tmp_path, logs="")).outcome == "removed"
    assert not path.exists()


def test_a_log_folder_named_by_a_relative_path_is_repaired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pending_run(tmp_path).close()
    monkeypatch.chdir(tmp_path)
    (leftover,) = left_by_killed_runs(Path("logs"), scope(tmp_path))
    assert leftover.refused is None
    assert repair(leftover, scope(tmp_path)).outcome == "rolled_back"
