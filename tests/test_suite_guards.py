"""The suite's own guards: a test that hangs fails with its stack instead of running until CI's
time limit (pytest-timeout, configured in pyproject.toml and tests/conftest.py)."""

from __future__ import annotations

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
