"""Not collected (no ``test_`` prefix): run by ``test_server_cleanup.py`` in a child pytest,
given on its command line. It starts the session's PostgreSQL server, says so on stdout and
holds it until its stdin has a line (or the process is signalled or killed)."""

from __future__ import annotations

import os
import sys

from tests.store.conftest import PostgresServer


def test_hold_the_server(postgres_server: PostgresServer) -> None:
    os.write(1, f"SERVER UP {os.getpid()} {postgres_server.port}\n".encode())
    sys.stdin.readline()
