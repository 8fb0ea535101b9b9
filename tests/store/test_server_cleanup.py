"""The tests' PostgreSQL server does not outlive its pytest session: SIGTERM or SIGINT to
pytest stops it and removes its folder, and a server left by a session killed outright
(SIGKILL) is stopped and removed when the next session starts its own.

Each case runs ``tests/store/hold_server.py`` in a child pytest, which starts the server,
prints ``SERVER UP <pid> <port>`` and holds it; the test signals the child once that line
has come."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.faults.test_interrupt import Lines
from tests.store.conftest import SERVER_PREFIX, postgres_bindir, require_postgres

REPO = Path(__file__).resolve().parents[2]
HOLD = REPO / "tests" / "store" / "hold_server.py"


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


class Held:
    """A child pytest holding its server: its process, folder and postmaster pid."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", str(HOLD)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.out = Lines(self.proc.stdout)
        try:
            self.out.wait_for(lambda line: line.startswith("SERVER UP "), timeout=120)
        except BaseException:
            self.end(signal.SIGTERM)
            raise
        (self.base,) = [
            base
            for base in Path(tempfile.gettempdir()).glob(SERVER_PREFIX + "*")
            if (base / "owner.pid").is_file()
            and (base / "owner.pid").read_text().strip() == str(self.proc.pid)
        ]
        self.postmaster = int((self.base / "data" / "postmaster.pid").read_text().split()[0])
        assert running(self.postmaster)

    def end(self, signum: int | None = None) -> int:
        """Signal the child (None: let its test finish); its exit code."""
        try:
            if signum is None:
                assert self.proc.stdin is not None
                self.proc.stdin.write("\n")
                self.proc.stdin.close()
            else:
                self.proc.send_signal(signum)
            return self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                self.proc.stdin.close()
            self.out.text()


@pytest.fixture(autouse=True)
def _server_binaries() -> None:
    require_postgres(postgres_bindir())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_session_stops_its_server_and_removes_its_folder(signum: int) -> None:
    held = Held()
    held.end(signum)
    assert not running(held.postmaster), "the server outlived its pytest session"
    assert not held.base.exists(), f"{held.base} was left behind"


def test_a_server_left_by_a_killed_session_is_removed_by_the_next_one() -> None:
    killed = Held()
    try:
        killed.end(signal.SIGKILL)
        assert running(killed.postmaster)  # nothing can run in a SIGKILLed process
        nxt = Held()
        assert not running(killed.postmaster), "the next session left the old server running"
        assert not killed.base.exists()
        assert nxt.end() == 0
        assert not running(nxt.postmaster) and not nxt.base.exists()
    finally:
        if running(killed.postmaster):  # the test failed: do not leak the server either
            import os

            os.kill(killed.postmaster, signal.SIGQUIT)
