"""A process killed (SIGKILL) at any point of a run's records phase leaves nothing unaccounted
for: what it left is named by the next run and by ``runs list``, with a command that repairs
it, and after that command the run is whole (completed, or rolled back and recorded as
interrupted) and in the store.

A child process runs ``image-project`` with :data:`image_project.artifacts.pending.on_point` set
to kill the process itself at one named point (:data:`~image_project.artifacts.pending.POINTS`),
so each point is hit exactly, with no timing involved. The table of what each point leaves,
in docs/reliability.md, is the one this test builds from what it saw; the test fails when
they differ, each point's test checking its own row (``UPDATE_RELIABILITY_DOC=1`` with
``-n 0`` rewrites the rows from what the tests saw)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from image_project.artifacts.pending import PENDING_SUFFIX, POINTS
from image_project.cli import command as cli
from image_project.store import open_store
from tests.faults.common import REPO, child_env, read_rows, transcripts, write_config

CHILD = """
import os, signal, sys
from image_project.artifacts import pending
point = sys.argv.pop(1)
def kill(reached):
    if reached == point:
        os.kill(os.getpid(), signal.SIGKILL)
pending.on_point = kill
from image_project.cli.launch import launch
sys.exit(launch(prog="image-project"))
"""

DOC = REPO / "docs" / "reliability.md"
BEGIN, END = "<!-- kill-table: tests/faults/test_kill_records.py -->", "<!-- /kill-table -->"
# A 4K image too (its Lanczos resize, no upscaler binary), small to be quick.
UPSCALE = {"enabled": True, "allow_fallback_resize": True, "target_long_edge_px": 512}
KILL_POINTS = list(POINTS)


def killed_at(tmp: Path, point: str) -> Path:
    """Run once, killed at ``point``, into a store that exists (as a user's does after the
    first run); the config file."""
    config = write_config(tmp, upscale=UPSCALE)
    (tmp / "out" / "logs").mkdir(parents=True)
    with open_store(f"sqlite:///{tmp / 'out' / 'logs' / 'runs.sqlite'}"):
        pass
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, point, "--config", str(config), "--seed", "11"],
        cwd=tmp,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return config


def on_disk(tmp: Path, gid: str) -> list[str]:
    out, logs = tmp / "out", tmp / "out" / "logs"
    found = []
    if (logs / f"{gid}{PENDING_SUFFIX}").exists():
        found.append("pending transcript")
    if (out / "images" / f"{gid}_image.jpg").exists():
        found.append("image")
    if (out / "images" / f"{gid}_image_4k.jpg").exists():
        found.append("4K image")
    rows = [
        r for r in read_rows(out / "images" / "titles_manifest.csv") if r["generation_id"] == gid
    ]
    if rows:
        found.append(f"manifest row #{int(rows[0]['seq']):03d}")
    if [r for r in read_rows(out / "generations.csv") if r["generation_id"] == gid]:
        found.append("generations row")
    if (logs / f"{gid}_transcript.json").exists():
        found.append("transcript")
    if stored(tmp, gid) is not None:
        found.append("store row")
    return found


def stored(tmp: Path, gid: str) -> Any:
    database = tmp / "out" / "logs" / "runs.sqlite"
    if not database.exists():
        return None
    with open_store(f"sqlite:///{database}") as store:
        return next((r for r in store.records() if r.generation_id == gid), None)


def cli_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv), env={}, root=REPO)
    out, err = capsys.readouterr()
    return code, out, err


def shown(text: str, tmp: Path, gid: str) -> str:
    """``text`` as the doc shows it: the test's folder and the run's id made generic."""
    return text.replace(str(tmp), "…").replace(gid, "<id>").strip()


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_kill_at_each_records_point_is_reported_and_repaired(
    tmp_path: Path, point: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = killed_at(tmp_path, point)
    (log,) = (tmp_path / "out" / "logs").glob("*.log")
    gid = log.stem
    left = on_disk(tmp_path, gid)

    code, _, said = cli_run(capsys, "runs", "list", "--config", str(config))
    assert code == 0
    reports = [line for line in said.splitlines() if "killed while writing its records" in line]
    before_pending = POINTS.index(point) < POINTS.index("pending")
    after_removal = POINTS.index(point) >= POINTS.index("pending_removed")
    if before_pending or after_removal:
        assert reports == [], said
    else:
        (report,) = reports
        assert gid in report
        # The next run says the same before its first run, and leaves the leftovers alone.
        _, _, next_err = cli_run(capsys, "--config", str(config), "--prompt-only")
        assert f"! {report}" in next_err.splitlines(), next_err
    command_line = next(
        (line for line in said.splitlines() if re.search("(repair it|import them): ", line)),
        None,
    )  # also the transcript the store lacks (killed between the transcript and the store)
    if point == "stored" or before_pending:
        assert command_line is None, said
        repaired = "nothing to repair"
    else:
        assert command_line is not None, said
        words = shlex.split(re.split(r"(?:repair it|import them): ", command_line)[1])
        assert words[:3] == ["image-project", "runs", "import"]
        code, out, err = cli_run(capsys, *words[1:])
        assert code == 0, err
        lines = [line.removeprefix("repaired ") for line in out.splitlines()]
        repaired = "; ".join(shown(line, tmp_path, gid) for line in lines)

    # Afterwards: nothing pending, nothing left to report, and the run whole either way.
    assert not list((tmp_path / "out" / "logs").glob("*" + PENDING_SUFFIX))
    _, _, after = cli_run(capsys, "runs", "list", "--config", str(config))
    if before_pending:  # no record at all: its log is named (test_full_disk.py)
        assert f"have a log but no transcript ({gid})" in after, after
        after = after.split(f"have a log but no transcript ({gid})")[0]
    assert "killed" not in after and "import" not in after, after
    final = on_disk(tmp_path, gid)
    if before_pending:
        assert final == [] and left == []
    else:
        (t,) = [t for t in transcripts(tmp_path) if t["generation_id"] == gid]
        record = stored(tmp_path, gid)
        if "manifest row #001" in left:
            assert t["error"] is None and t["image_bytes"] > 0
            assert final == [
                "image",
                "4K image",
                "manifest row #001",
                "generations row",
                "transcript",
                "store row",
            ], final
            assert record.error is None and record.title_generation.seq == 1
        else:
            assert t["error"]["type"] == "interrupted" and t["error"]["phase"] == "records"
            assert t["image_path"] is None and t["title_generation"] is None
            assert final == ["transcript", "store row"], final
            assert record.error.type == "interrupted"
    check_doc_row(
        point,
        (
            f"`{point}`",
            ", ".join(left) or "nothing of the run but its log",
            shown(reports[0], tmp_path, gid)
            if reports
            else (shown(command_line, tmp_path, gid) if command_line else "nothing"),
            repaired,
        ),
    )


HEAD = (
    "| Killed right after | On disk | `runs list` (and the next run) says | "
    "the repair command then does |",
    "| --- | --- | --- | --- |",
)


def doc_table() -> tuple[str, int, int]:
    """The doc's text and where its table's lines start and end (line indexes)."""
    text = DOC.read_text(encoding="utf-8")
    lines = text.split("\n")
    first = lines.index(BEGIN) + 1
    return text, first, lines.index(END)


def check_doc_row(point: str, cells: tuple[str, ...]) -> None:
    """The doc's row for ``point`` is ``cells``; ``UPDATE_RELIABILITY_DOC=1`` writes it."""
    row = "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
    text, first, end = doc_table()
    lines = text.split("\n")
    at = first + len(HEAD) + KILL_POINTS.index(point)
    if os.environ.get("UPDATE_RELIABILITY_DOC") == "1":
        table = lines[first:end]
        table[: len(HEAD)] = HEAD
        while len(table) < len(HEAD) + len(KILL_POINTS):
            table.append("| (not yet run) |")
        table[at - first] = row
        lines[first:end] = table
        DOC.write_text("\n".join(lines), encoding="utf-8")
        return
    assert lines[at] == row, f"docs/reliability.md's kill table, row {point}, is out of date"


def test_the_kill_table_in_the_docs_has_a_row_per_point_in_order() -> None:
    text, first, end = doc_table()
    table = text.split("\n")[first:end]
    assert tuple(table[: len(HEAD)]) == HEAD
    points = [line.split(" | ", 1)[0].removeprefix("| ") for line in table[len(HEAD) :]]
    assert points == [f"`{p}`" for p in KILL_POINTS]


def test_runs_import_of_the_pending_transcript_itself_repairs_that_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = killed_at(tmp_path, "manifest_row")
    (pending,) = (tmp_path / "out" / "logs").glob("*" + PENDING_SUFFIX)
    gid = pending.name.removesuffix(PENDING_SUFFIX)
    code, out, err = cli_run(capsys, "runs", "import", str(pending), "--config", str(config))
    assert code == 0, err
    assert out.startswith(f"repaired {gid}: completed") and "imported 1 run(s)" in out, out
    assert on_disk(tmp_path, gid) == [
        "image",
        "4K image",
        "manifest row #001",
        "generations row",
        "transcript",
        "store row",
    ]
