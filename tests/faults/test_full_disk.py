"""A full disk at the end of a run still leaves a trace: the run's transcript cannot be
written, yet the run is recorded in the store (or, when that fails too, named in one line
on stderr with its id), with no traceback; the next run and ``runs list`` say which run
has no transcript and whether the store has it.

A child process runs ``image-project`` with the file-write seam
(``image_project.artifacts.atomic._write_all``, every image, transcript and CSV write)
raising ``OSError(ENOSPC)``, or only the transcript writer doing so: the disk filling up
between the records and the transcript."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from image_project.artifacts.pending import PENDING_SUFFIX
from image_project.cli import command as cli
from image_project.store import open_store
from tests.faults.common import REPO, child_env, read_rows, write_config

pytestmark = pytest.mark.subprocess

CHILD = """
import errno, os, sys
from image_project.artifacts import atomic, transcript
def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
if sys.argv.pop(1) == "all":
    atomic._write_all = full
else:
    transcript.atomic_write_bytes = full
from image_project.cli.launch import launch
sys.exit(launch(prog="image-project"))
"""

ENOSPC = "OSError: [Errno 28] No space left on device"


def full_disk_run(tmp: Path, what: str, *args: str) -> tuple[int, str, str, Path]:
    """One run with the disk full for ``what`` (``all`` writes, or the ``transcript``);
    exit code, stderr, the run's id and the config file."""
    config = write_config(tmp)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, what, "--config", str(config), "--seed", "5", "-q", *args],
        cwd=tmp,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    (log,) = (tmp / "out" / "logs").glob("*.log")
    return proc.returncode, proc.stderr, log.stem, config


def cli_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv), env={}, root=REPO)
    out, err = capsys.readouterr()
    return code, out, err


def errors(stderr: str) -> list[str]:
    """Its lines but the offline backend's note and the run's ERROR log line."""
    return [
        line
        for line in stderr.splitlines()
        if not line.startswith(("Using the built-in OFFLINE", "ERROR image_project.run:"))
    ]


def test_a_full_disk_at_the_end_of_a_run_records_it_in_the_store_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stderr, gid, config = full_disk_run(tmp_path, "all")
    logs = tmp_path / "out" / "logs"
    transcript = logs / f"{gid}_transcript.json"
    url = f"sqlite:///{logs / 'runs.sqlite'}"
    assert code == 1 and "Traceback" not in stderr, stderr
    assert errors(stderr) == [
        f"error: run failed in phase records: {ENOSPC}",
        f"✗ run {gid}: its transcript could not be written to {transcript} ({ENOSPC}); "
        f"the run is recorded in the store {url}",
    ]
    assert not transcript.exists() and not list((tmp_path / "out" / "images").glob("*.jpg"))
    assert read_rows(tmp_path / "out" / "images" / "titles_manifest.csv") == []
    with open_store(url) as store:
        (record,) = store.records()
    assert record.generation_id == gid and record.error is not None
    assert (record.error.type, record.error.phase) == ("OSError", "records")

    code, out, said = cli_run(capsys, "runs", "list", "--config", str(config))
    assert code == 0 and re.search(rf"^{gid} .* failed .* OSError in records", out, re.M)
    missing = (
        f"1 run(s) in {logs} have a log but no transcript ({gid}): the transcript could not "
        "be written (a full disk?) or the process was killed before its records"
    )
    assert said.splitlines() == [
        f"{missing}; 1 of them in the store (runs show ID), 0 recorded nowhere but in their "
        "log <id>.log"
    ]
    code, _, said = cli_run(capsys, "--config", str(config), "--prompt-only")
    assert code == 0
    assert f"! {missing}; runs list says which of them the store has" in said.splitlines()


def test_a_full_disk_for_the_store_too_names_the_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "blocker").write_text("a file where the store's folder would be")
    url = f"sqlite:///{tmp_path / 'blocker' / 'runs.sqlite'}"
    code, stderr, gid, config = full_disk_run(tmp_path, "all", "--set", f"store.url={url}")
    logs = tmp_path / "out" / "logs"
    assert code == 1 and "Traceback" not in stderr, stderr
    (line,) = [line for line in errors(stderr) if line.startswith("✗")]
    assert line.startswith(
        f"✗ run {gid}: its transcript could not be written to {logs / f'{gid}_transcript.json'}"
        f" ({ENOSPC}) nor its store row (StoreError: cannot open the run store {url}"
    )
    assert line.endswith(f": run {gid} is recorded nowhere but its log {logs / f'{gid}.log'}")
    code, _, said = cli_run(capsys, "runs", "list", "--config", str(config))
    assert f"1 run(s) in {logs} have a log but no transcript ({gid})" in said
    assert "0 of them in the store (runs show ID), 1 recorded nowhere" in said


def test_a_disk_full_for_the_transcript_alone_keeps_the_pending_one_for_the_repair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stderr, gid, config = full_disk_run(tmp_path, "transcript")
    logs = tmp_path / "out" / "logs"
    url = f"sqlite:///{logs / 'runs.sqlite'}"
    assert code == 0 and "Traceback" not in stderr, stderr
    assert errors(stderr) == [
        f"✗ run {gid}: its transcript could not be written to {logs / f'{gid}_transcript.json'}"
        f" ({ENOSPC}); its records are complete and its pending transcript stays beside it "
        f"(runs import writes the transcript from it); the run is recorded in the store {url}"
    ]
    assert (logs / f"{gid}{PENDING_SUFFIX}").exists()
    code, _, said = cli_run(capsys, "runs", "list", "--config", str(config))
    (line,) = said.splitlines()
    assert line.startswith(f"run {gid} was killed while writing its records") and (
        "missing: the transcript; repair it: " in line
    )
    code, out, err = cli_run(capsys, *line.split("repair it: ")[1].split()[1:])
    assert code == 0 and out.startswith(f"repaired {gid}: completed"), err
    assert (logs / f"{gid}_transcript.json").exists()
