"""Errors, not tracebacks: an output path that cannot be written, a closed pipe
and a usage error each end with one line on stderr and the documented exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from image_project.cli import command as cli
from image_project.record.__main__ import main as write_schema
from image_project.record.run import RunRecord
from image_project.store import open_store
from tests.support.records import run

REPO = Path(__file__).resolve().parents[1]


def stored(tmp_path: Path, records: list[RunRecord]) -> str:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    with open_store(url) as store:
        for record in records:
            store.import_record(record)
    return url


def call(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv), env={}, root=REPO)
    out, err = capsys.readouterr()
    return code, out, err


def blocked_paths(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "a_file").write_text("in the way\n", encoding="utf-8")
    (tmp_path / "a_folder").mkdir()
    return {
        "missing parent": tmp_path / "no" / "such" / "folder" / "runs.jsonl",
        "parent is a file": tmp_path / "a_file" / "runs.jsonl",
        "target is a folder": tmp_path / "a_folder",
    }


def test_export_out_that_cannot_be_written_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = stored(tmp_path, [run(1, scoring=False), run(2, scoring=False)])
    for why, path in blocked_paths(tmp_path).items():
        code, _, err = call(capsys, "runs", "export", "--store", url, "--out", str(path))
        assert code == 2, (why, err)
        assert err.count("\n") == 1 and "Traceback" not in err, (why, err)
        assert err.startswith(f"error: cannot write the export to {path}: "), (why, err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permission bits")
def test_export_out_into_an_unwritable_folder_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = stored(tmp_path, [run(1, scoring=False)])
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    code, _, err = call(capsys, "runs", "export", "--store", url, "--out", str(locked / "x"))
    assert code == 2 and err.count("\n") == 1 and "Permission denied" in err


def test_review_out_that_cannot_be_written_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = stored(tmp_path, [run(1, scoring=False)])
    (tmp_path / "a_file").write_text("in the way\n", encoding="utf-8")
    for path in (tmp_path / "a_file", tmp_path / "a_file" / "site"):
        code, _, err = call(capsys, "review", "--store", url, "--out", str(path))
        assert code == 2, err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"error: cannot write the review site to {path}: "), err
    code, _, err = call(  # a missing parent is created, as for the default folder
        capsys, "review", "--store", url, "--out", str(tmp_path / "new" / "site")
    )
    assert code == 0 and (tmp_path / "new" / "site" / "index.html").is_file()


def test_show_of_an_unknown_run_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = stored(tmp_path, [run(1, scoring=False), run(2, scoring=False)])
    code, _, err = call(capsys, "runs", "show", "nosuchid", "--store", url)
    assert code == 2 and "no stored run" in err
    code, _, err = call(capsys, "runs", "show", "run00", "--store", url)  # ambiguous
    assert code == 2 and err.count("\n") == 1


def test_record_module_help_prints_usage_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        write_schema(["--help"])
    assert (
        done.value.code == 0 and "usage: python -m image_project.record" in capsys.readouterr().out
    )
    with pytest.raises(SystemExit) as done:
        write_schema(["--bogus"])
    assert done.value.code == 2
    assert write_schema([str(tmp_path / "a" / "b.json")]) == 2  # missing parent: one line
    assert "error: cannot write" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert write_schema([str(tmp_path / "schema.json")]) == 0
    assert (tmp_path / "schema.json").is_file()


@pytest.mark.subprocess
def test_export_into_a_closed_pipe_stops_quietly_with_141(tmp_path: Path) -> None:
    big = [
        run(n, scoring=False).model_copy(update={"final_image_prompt": "x" * 200_000})
        for n in range(1, 6)
    ]  # 1 MB of JSON lines: far more than a pipe holds, so the writer meets the closed end
    url = stored(tmp_path, big)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-m", "image_project", "runs", "export", "--store", url],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()  # like `| head -1`
        process.stdout.close()
        err = process.stderr.read().decode()
        assert process.wait(timeout=60) == 141, err
    assert first.startswith(b"{") and err == ""


def test_a_campaign_on_sqlite_suggests_a_postgresql_url_that_parses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hint's URL is one the store accepts and reads as user, host and database (not
    ``postgresql+psycopg:////user@host/db``, whose four slashes leave no host)."""
    pytest.importorskip("procrastinate")
    from sqlalchemy.engine import make_url

    from image_project.config.store_url import check_store_url

    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    code, _, err = call(capsys, "campaign", "status", "--store", url)
    assert code == cli.EXIT_CONFIG
    assert "a campaign needs a PostgreSQL store" in err
    hinted = err.split("--set store.url=", 1)[1].split()[0]
    parsed = make_url(check_store_url(hinted))
    assert (parsed.username, parsed.host, parsed.database) == ("user", "host", "db")
