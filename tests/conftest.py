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
* Markers for the two speeds of ``scripts/check`` are assigned here, in one place (registered
  in pyproject.toml): ``subprocess`` (starts another Python interpreter: ``python main.py``,
  ``python -m image_project``, the console script, a ``python -c`` probe, the latency
  simulator), ``postgres`` (the real PostgreSQL server of tests/store), ``browser`` (headless
  Chromium) and ``slow`` (in-process but seconds long: a real rate window, a bench run).
  ``scripts/check --fast`` deselects all four. A test that starts an interpreter without the
  ``subprocess`` (or ``postgres`` / ``browser``) marker fails, naming :data:`SUBPROCESS`, so
  the list cannot silently fall behind.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# Module -> the tests in it that carry the marker (matched by function name, any parameters),
# or ALL for every test of the module.
ALL: frozenset[str] = frozenset({"*"})

SUBPROCESS: dict[str, frozenset[str]] = {
    "tests/test_entry_points.py": ALL,
    "tests/test_startup.py": ALL,
    "tests/test_defaults.py": frozenset(
        {"test_init_then_prompt_only_from_an_empty_directory_outside_the_checkout"}
    ),
    "tests/faults/test_concurrent_runs.py": ALL,
    "tests/store/test_concurrent_writers.py": ALL,
    "tests/store/test_server_cleanup.py": ALL,
    "tests/test_cli.py": frozenset(
        {
            "test_main_runs_offline_end_to_end_twice",
            "test_offline_scoring_run_shows_the_selection_and_uses_history",
        }
    ),
    "tests/faults/test_interrupt.py": frozenset(
        {
            "test_signal_during_concurrent_calls_cancels_them_and_records_the_interruption",
            "test_ctrl_c_during_start_up_exits_130_without_a_traceback",
            "test_ctrl_c_while_the_image_call_is_in_flight_records_it_as_cut_off",
            "test_ctrl_c_during_the_offline_drawing_stops_it_in_phase_image",
            "test_ctrl_c_while_the_records_are_written_finishes_them_and_exits_0",
            "test_ctrl_c_while_run_1_writes_its_records_starts_no_run_2",
        }
    ),
    "tests/faults/test_second_signal.py": ALL,
    "tests/faults/test_closed_pipe.py": ALL,
    "tests/faults/test_kill_records.py": ALL,
    "tests/store/test_store.py": frozenset(
        {
            "test_sqlalchemy_is_imported_only_when_a_store_is_used",
            "test_the_cli_says_loudly_that_the_store_was_not_written_and_exits_0",
        }
    ),
    "tests/artifacts/test_locking.py": frozenset(
        {
            "test_a_process_killed_while_holding_the_lock_frees_it_at_once",
            "test_two_processes_exclude_each_other",
            "test_many_processes_never_hold_the_lock_together",
        }
    ),
    "tests/artifacts/test_manifest.py": frozenset(
        {"test_concurrent_processes_allocate_unique_consecutive_seqs"}
    ),
    "tests/test_seeding.py": frozenset({"test_derive_seed_is_stable_across_processes"}),
    "tests/test_extras.py": frozenset({"test_a_run_the_store_and_runs_stats_need_no_extra"}),
    "tests/test_examples.py": frozenset(
        {
            "test_every_example_matches_what_its_command_prints",
            "test_an_edited_example_fails_the_check_and_write_repairs_it",
            "test_an_example_whose_command_fails_is_an_error",
        }
    ),
    "tests/test_suite_guards.py": frozenset({"test_a_hanging_test_fails_with_its_stack"}),
    "tests/test_wheel.py": frozenset(
        {"test_the_wheel_installed_apart_from_the_checkout_inits_and_runs_the_panel"}
    ),
    "tests/test_bench.py": frozenset(
        {"test_the_simulator_in_its_own_process_records_resets_and_switches_keys"}
    ),
}

BROWSER: dict[str, frozenset[str]] = {"tests/review/test_browser.py": ALL}

SLOW: dict[str, frozenset[str]] = {
    # 24 calls against a server holding a real 6-requests-per-2-s window: ~6 s of waiting.
    "tests/faults/test_rate_window.py": frozenset(
        {"test_a_scoring_run_completes_within_a_6_per_2s_request_window"}
    ),
    # Whole runs of the quality bench's simulated world (bench/quality.py).
    "tests/test_bench_quality.py": frozenset(
        {
            "test_the_same_seed_gives_the_same_table_and_another_seed_another",
            "test_the_command_writes_strict_json_and_a_png",
            "test_rounds_rows_are_paired_count_the_calls_and_repeat_for_a_seed",
        }
    ),
    # Every example of README.md and docs/*.md re-run (scripts/examples.py --check).
    "tests/test_examples.py": frozenset({"test_every_example_matches_what_its_command_prints"}),
    # Evidence that can fail: the product's default re-measured (1,620 simulated runs).
    "tests/test_quality_evidence.py": ALL,
    # 300 planted worlds, each with a 2,000-resample bootstrap.
    "tests/analysis/test_independence_coverage.py": ALL,
    # 30 offline runs.
    "tests/analysis/test_independence_offline.py": frozenset(
        {"test_runs_stats_says_what_the_effective_judges_estimate_knows"}
    ),
}

SPAWN_MARKERS = ("subprocess", "postgres", "browser")

# The hang guard (pytest-timeout) of the tiers that start processes or run whole benches;
# the in-process tests keep the global ``timeout`` of pyproject.toml. A test that sets its own
# ``pytest.mark.timeout`` keeps it.
SPAWNED_TIMEOUT_S = 600


def _listed(table: dict[str, frozenset[str]], module: str, name: str) -> bool:
    names = table.get(module)
    return names is not None and (names is ALL or name in names)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        name = getattr(item, "originalname", item.name)
        params = getattr(getattr(item, "callspec", None), "params", {})
        fixtures = getattr(item, "fixturenames", ())
        if _listed(SUBPROCESS, module, name):
            item.add_marker(pytest.mark.subprocess)
        if _listed(BROWSER, module, name):
            item.add_marker(pytest.mark.browser)
        if _listed(SLOW, module, name):
            item.add_marker(pytest.mark.slow)
        # tests/store/conftest.py: the ``engine`` parameter picks SQLite or the server.
        if params.get("engine") == "postgresql" or "postgres_server" in fixtures:
            item.add_marker(pytest.mark.postgres)
        tiered = any(item.get_closest_marker(m) for m in (*SPAWN_MARKERS, "slow"))
        if tiered and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPAWNED_TIMEOUT_S))


def _is_python(program: str) -> bool:
    """Whether ``program`` (a Popen args[0]) is an interpreter or a script installed beside
    it (the ``image-project`` console script)."""
    path = Path(program)
    return (
        path.name.startswith("python")
        or str(path) == sys.executable
        or path.parent == Path(sys.executable).parent
    )


@pytest.fixture(autouse=True)
def _spawns_are_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that starts another interpreter without a marker saying so."""
    if any(request.node.get_closest_marker(m) for m in SPAWN_MARKERS):
        yield
        return
    real_init = subprocess.Popen.__init__
    nodeid = request.node.nodeid

    def guarded_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
        if isinstance(args, str | bytes | Path):
            first = args.split()[0] if isinstance(args, str) and kw.get("shell") else args
        else:
            first = next(iter(args))
        program = os.fsdecode(kw.get("executable") or first)
        if _is_python(program):
            raise AssertionError(
                f"{nodeid} starts another interpreter ({program}) but is not marked "
                "subprocess: add it to SUBPROCESS in tests/conftest.py, so that "
                "`scripts/check --fast` leaves it out"
            )
        real_init(self, args, *rest, **kw)

    mp = pytest.MonkeyPatch()
    mp.setattr(subprocess.Popen, "__init__", guarded_init)
    try:
        yield
    finally:
        mp.undo()
