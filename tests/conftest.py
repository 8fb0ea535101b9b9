"""Suite-wide fixtures.

* Every test runs with the real OpenAI adapter's network policy set to ``deny``: a test that
  accidentally reaches for the network fails with ``NetworkDisabledError`` instead of
  calling a real service. Tests that talk to a server they started themselves on 127.0.0.1
  opt in with the ``allow_loopback`` fixture.
* Async tests use anyio's own pytest plugin (``pytest.mark.anyio``) on the asyncio backend.
* ``cli.main`` attaches a stderr handler to the package logger and stops propagation; every
  test gets the package logger back as it found it, so a test that ran the CLI in-process
  cannot leave a handler writing to a closed captured stream, or hide later tests' records
  from ``caplog``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from image_project.backends import openai_backend


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _deny_network() -> Iterator[None]:
    previous = openai_backend.set_network_policy("deny")
    try:
        yield
    finally:
        openai_backend.set_network_policy(previous)


@pytest.fixture
def allow_loopback(_deny_network: None) -> Iterator[None]:
    """Let the real adapter talk to servers on 127.0.0.1 / localhost / ::1 only."""
    previous = openai_backend.set_network_policy("loopback")
    try:
        yield
    finally:
        openai_backend.set_network_policy(previous)


@pytest.fixture(autouse=True)
def _restore_package_logger() -> Iterator[None]:
    root = logging.getLogger("image_project")
    handlers, level, propagate = list(root.handlers), root.level, root.propagate
    try:
        yield
    finally:
        root.handlers, root.level, root.propagate = handlers, level, propagate
