"""The suite's own guards: a test that hangs fails with its stack instead of running until CI's
time limit (pytest-timeout, configured in pyproject.toml and tests/conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest

REPO = Path(__file__).resolve().parents[1]

HANGING_TEST = """
import threading

def test_waits_for_an_event_nobody_sets():
    threading.Event().wait()
"""


def test_a_hanging_test_fails_with_its_stack(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    guard = request.node.get_closest_marker("timeout")
    assert guard is not None and guard.args == (conftest.SPAWNED_TIMEOUT_S,)
    (tmp_path / "test_hang.py").write_text(HANGING_TEST)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--timeout=2",
            str(tmp_path / "test_hang.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Timeout" in done.stdout
    assert "test_waits_for_an_event_nobody_sets" in done.stdout
    assert "threading.Event().wait()" in done.stdout


def test_an_in_process_test_keeps_the_global_guard(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("timeout") is None
    assert int(request.config.getini("timeout")) < conftest.SPAWNED_TIMEOUT_S


SUBJECTS_RULE_SINCE = "3a5ec560eb7c8fdc80118da50e3d513ee38eb42b"
"""The commit from which every commit subject is at most 72 characters (details go in the
body). Older subjects are left as they are: bench JSON files and docs name those commits."""


def test_commit_subjects_since_the_rule_are_at_most_72_characters() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{SUBJECTS_RULE_SINCE}^{{commit}}"],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    if known.returncode != 0:
        pytest.skip("a shallow clone without the commit the rule starts from")
    subjects = subprocess.run(
        ["git", "log", "--format=%s", f"{SUBJECTS_RULE_SINCE}..HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    long = [s for s in subjects if len(s) > 72]
    assert long == [], f"commit subjects over 72 characters (put details in the body): {long}"


def test_an_unmarked_test_that_starts_an_interpreter_fails_before_it_starts() -> None:
    """``scripts/check --fast`` leaves out the tests that start another interpreter by their
    ``subprocess`` marker; a test without it that starts one fails (tests/conftest.py), so
    the fast tier cannot silently start interpreters."""
    with pytest.raises(AssertionError, match="is not marked subprocess"):
        subprocess.Popen([sys.executable, "-c", "pass"])
