"""A real PostgreSQL server for the store tests, and a store URL per engine.

``postgres_server`` (session scope) runs ``initdb`` and ``pg_ctl start`` in a temporary
directory, listening on 127.0.0.1 at a free port (and a Unix socket in that directory), and
stops it when the session ends, also on SIGTERM (and SIGINT, through pytest's own
teardown); a server whose pytest process was killed outright (its ``owner.pid`` dead) is
stopped and removed when the next session starts one. initdb refuses to run as root, so as
root the server runs as an unprivileged user (``postgres`` if it exists, else ``nobody``) through ``runuser``.
Without the server binaries the PostgreSQL cases skip, saying why; under CI (``CI`` set to
1 / true) they fail instead, because ``.ci/run`` installs PostgreSQL.

``store_url`` is parametrised over both engines: a fresh SQLite file, or a fresh database on
that server, for every test.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import psycopg
import pytest

ENGINES = ("sqlite", "postgresql")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def postgres_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/*/bin`` with initdb and pg_ctl, else PATH's."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return Path(initdb).parent
    return None


MISSING_SERVER = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin "
    "or PATH: install the postgresql package to run the store tests on PostgreSQL"
)


def require_postgres(bindir: Path | None) -> Path:
    """``bindir``, or (without one) a skip saying why, or under CI a failure: CI installs
    PostgreSQL (``.ci/run``), so a missing server there is a broken CI, not a skip."""
    if bindir is None:
        if in_ci():
            pytest.fail(f"CI must run the PostgreSQL store tests: {MISSING_SERVER}")
        pytest.skip(MISSING_SERVER)
    return bindir


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class PostgresServer:
    port: int
    user: str = "postgres"
    base: Path | None = None  # the server's folder (data, log), when this process runs it
    bindir: Path | None = None
    prefix: tuple[str, ...] = ()

    def restart(self) -> None:
        """``pg_ctl restart`` (fast mode: every session is ended), waiting until the server
        accepts connections again."""
        assert self.base is not None and self.bindir is not None, "not this process's server"
        done = subprocess.run(
            [
                *self.prefix,
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.base / "data"),
                "-l",
                str(self.base / "server.log"),
                "-m",
                "fast",
                "-w",
                "restart",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"pg_ctl restart failed: {done.stdout}{done.stderr}"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{database}"

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.user, dbname="postgres", autocommit=True
        )

    def create_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _runner() -> tuple[list[str], str | None]:
    """The command prefix that runs the server's programs, and the user to own its files."""
    if os.getuid() != 0:
        return [], None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return ["runuser", "-u", name, "--"], name
    raise RuntimeError(
        "running as root and no unprivileged user (postgres, nobody) to run initdb as"
    )


def _chown_tree(path: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(Path(root) / name, entry.pw_uid, entry.pw_gid)
    os.chown(path, entry.pw_uid, entry.pw_gid)


SERVER_PREFIX = "image_project_pg_"
"""The server's folder is ``<tempdir>/image_project_pg_*``: its data folder, its log, its
socket and ``owner.pid``, the pid of the pytest process that started it."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop(prefix: list[str], bindir: Path, base: Path, mode: str = "fast") -> None:
    """Stop the server of ``base`` (if it runs) and remove the folder."""
    if (base / "data" / "postmaster.pid").exists():
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(base / "data"), "-m", mode, "-w", "stop"],
            capture_output=True,
            timeout=120,
            check=False,
        )
    shutil.rmtree(base, ignore_errors=True)


def remove_servers_left_by_killed_runs(prefix: list[str], bindir: Path) -> list[Path]:
    """Stop and remove the servers whose pytest process is gone (killed before its teardown:
    SIGKILL, a CI runner's hard stop); the folders removed. A folder without ``owner.pid``
    is left alone: it may be a live session of a version that wrote none."""
    removed = []
    for base in sorted(Path(tempfile.gettempdir()).glob(SERVER_PREFIX + "*")):
        try:
            owner = int((base / "owner.pid").read_text().strip())
        except (OSError, ValueError):
            continue
        if owner == os.getpid() or _alive(owner):
            continue
        _stop(prefix, bindir, base, mode="immediate")
        removed.append(base)
    return removed


@contextlib.contextmanager
def _stopped_on_sigterm(stop: Callable[[], None]) -> Iterator[None]:
    """While inside: a SIGTERM first runs ``stop``, then ends the process as SIGTERM would
    have (pytest has no SIGTERM handler, so without this its teardown never ran and the
    server, re-parented to PID 1, kept running with its data folder). SIGINT needs nothing:
    pytest turns it into KeyboardInterrupt and tears the session's fixtures down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        stop()
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def running_postgres(bindir: Path) -> Iterator[PostgresServer]:
    """A PostgreSQL server in a temporary directory on 127.0.0.1 (a free port), stopped and
    removed on exit, also on SIGTERM; RuntimeError (with the server's log) when it cannot
    start. The store tests' fixture and bench/campaign.py use it."""
    prefix, owner = _runner()
    remove_servers_left_by_killed_runs(prefix, bindir)
    base = Path(tempfile.mkdtemp(prefix=SERVER_PREFIX))
    (base / "owner.pid").write_text(f"{os.getpid()}\n")
    data, log = base / "data", base / "server.log"
    if owner is not None:
        _chown_tree(base, owner)

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, *command], capture_output=True, text=True, timeout=120, check=False
        )

    def failed(done: subprocess.CompletedProcess[str], command: tuple[str, ...]) -> str:
        server_log = log.read_text(errors="replace") if log.exists() else ""
        return (
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n"
            f"{done.stderr}\n{server_log}"
        )

    initdb = (
        str(bindir / "initdb"),
        "-D",
        str(data),
        "-U",
        "postgres",
        "-A",
        "trust",
        "-E",
        "UTF8",
        "--no-sync",
        "--no-instructions",
    )
    try:
        done = run(*initdb)
        if done.returncode != 0:
            raise RuntimeError(failed(done, initdb))
        # The port is free when chosen but not reserved: another process (a second
        # pytest-xdist worker starting its own server, say) can take it first. Then choose
        # again.
        for _ in range(5):
            port = free_port()
            options = (
                f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
            )
            start = (str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w")
            done = run(*start, "start")
            if done.returncode == 0:
                break
            if "already in use" not in (log.read_text(errors="replace") if log.exists() else ""):
                raise RuntimeError(failed(done, (*start, "start")))
            log.unlink()
        else:
            raise RuntimeError(failed(done, (*start, "start")))
        with _stopped_on_sigterm(lambda: _stop(prefix, bindir, base, mode="immediate")):
            yield PostgresServer(port=port, base=base, bindir=bindir, prefix=tuple(prefix))
    finally:
        _stop(prefix, bindir, base)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    bindir = require_postgres(postgres_bindir())
    try:
        server = running_postgres(bindir)
        started = server.__enter__()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield started
    finally:
        server.__exit__(None, None, None)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def store_url(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty store of the parametrised engine."""
    if engine == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'runs.sqlite'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = f"t_{uuid.uuid4().hex[:12]}"
    server.create_database(name)
    try:
        yield server.url(name)
    finally:
        server.drop_database(name)
