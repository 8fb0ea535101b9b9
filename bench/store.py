"""What does writing the run store add to an offline run's wall time?

    python bench/store.py [--runs 12] [--scoring] [--store-url URL] [--json PATH] [--quick]

Runs the real pipeline on the built-in offline backend in this process, alternating runs
without the store (``store.enabled: false``) and with it (one store writer shared by the
runs, as the CLI shares one across ``--runs N``), same seeds, and reports the median wall
time of each, their ratio and the median time of the store write itself (the time from the
transcript being written to the end of the run). The store is a fresh SQLite file in a
temporary directory unless ``--store-url`` names another (e.g. a PostgreSQL database). A
SQLite store is created before the timed runs, so the runs write it as every run after a
store's first does.

The one-time cost of a process's first write is measured apart, in fresh interpreters,
because it is paid once per process, not per run: opening an existing SQLite store (what
every run after the first pays: importing SQLAlchemy) and creating a new one (importing
SQLAlchemy and Alembic, creating the schema). Timings are reported, never asserted; ``--quick`` is a small set for CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import anyio  # noqa: E402
from provenance import Provenance  # noqa: E402

from image_project.backends.factory import make_backends  # noqa: E402
from image_project.config.loading import load_config  # noqa: E402
from image_project.config.models import AppConfig  # noqa: E402
from image_project.run.driver import run_generation  # noqa: E402
from image_project.store import open_store  # noqa: E402
from image_project.store.writer import StoreWriter  # noqa: E402

SCORING = ("prompt.scoring.enabled=true", "prompt.scoring.judges=[{id: a}, {id: b}, {id: c}]")


def make_cfg(tmp: Path, *extra: str) -> AppConfig:
    return load_config(
        root=REPO,
        env={},
        overrides=[
            "backend.provider=offline",
            f"image.generation_path={tmp / 'images'}",
            f"image.log_path={tmp / 'logs'}",
            f"prompt.generations_path={tmp / 'generations.csv'}",
            *extra,
        ],
    )


async def one_run(cfg: AppConfig, seed: int, store: StoreWriter | None) -> tuple[float, float]:
    """Wall time of one run, and of its store write (0 without a store)."""
    backends = make_backends(cfg, {})
    try:
        started = time.perf_counter()
        result = await run_generation(cfg, backends, seed=seed, store=store)
        wall = time.perf_counter() - started
    finally:
        await backends.aclose()
    if store is not None and (result.store is None or not result.store.written):
        raise RuntimeError(f"the store was not written: {result.store}")
    # record.timing.wall_s ends when the record is built, before the transcript and store.
    return wall, max(0.0, wall - result.record.timing.wall_s)


async def measure(runs: int, scoring: bool, store_url: str | None) -> dict[str, Any]:
    extra = SCORING if scoring else ()
    with tempfile.TemporaryDirectory(prefix="bench_store_") as tmp_name:
        tmp = Path(tmp_name)
        url = store_url or f"sqlite:///{tmp / 'store' / 'runs.sqlite'}"
        plain_cfg = make_cfg(tmp / "plain", "store.enabled=false", *extra)
        store_cfg = make_cfg(tmp / "stored", f"store.url={url}", *extra)
        if store_url is None:
            open_store(url).close()  # created, as it is after a user's first run
        writer = StoreWriter(url)
        try:
            await one_run(store_cfg, 0, writer)  # warm-up: imports, schema, caches
            await one_run(plain_cfg, 0, None)
            without: list[float] = []
            with_store: list[float] = []
            tail: list[float] = []
            for index in range(runs):
                seed = 1000 + index
                order = (False, True) if index % 2 == 0 else (True, False)
                for with_the_store in order:
                    if with_the_store:
                        wall, after = await one_run(store_cfg, seed, writer)
                        with_store.append(wall)
                        tail.append(after)
                    else:
                        without.append((await one_run(plain_cfg, seed, None))[0])
        finally:
            writer.close()
    plain, stored = statistics.median(without), statistics.median(with_store)
    return {
        "runs_each": runs,
        "scoring": scoring,
        "store": "sqlite (temporary file)" if store_url is None else "given URL",
        "median_without_s": round(plain, 4),
        "median_with_s": round(stored, 4),
        "ratio": round(stored / plain, 4),
        "added_percent": round((stored / plain - 1) * 100, 2),
        "median_transcript_and_store_write_s": round(statistics.median(tail), 4),
    }


_OPEN_PROBE = """
import sys, time
import image_project.run.driver  # what a run has imported before it writes the store
t = time.perf_counter()
from image_project.store import open_store
store = open_store(sys.argv[1])
print(time.perf_counter() - t)
store.close()
"""


def first_write_cost(existing: bool) -> float:
    """Seconds for a fresh interpreter that has imported the app, as a run has, to import the
    store and open a SQLite store for a run's write: an ``existing`` one (at the current
    schema), else a new one (Alembic creates it)."""
    with tempfile.TemporaryDirectory(prefix="bench_store_open_") as tmp:
        url = f"sqlite:///{tmp}/runs.sqlite"
        if existing:
            open_store(url).close()
        argv = [sys.executable, "-c", _OPEN_PROBE, url]
        done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO)
    return float(done.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12, help="runs with and without, each")
    parser.add_argument("--scoring", action="store_true", help="3-judge scoring runs")
    parser.add_argument("--store-url", help="a store to write to instead of a temporary SQLite")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures here")
    parser.add_argument("--quick", action="store_true", help="3 runs each (for CI)")
    args = parser.parse_args(argv)
    runs = 3 if args.quick else args.runs
    provenance = Provenance.start()
    figures = anyio.run(measure, runs, args.scoring, args.store_url)
    figures["open_existing_store_in_a_new_process_s"] = round(first_write_cost(True), 4)
    figures["create_new_store_in_a_new_process_s"] = round(first_write_cost(False), 4)
    print(
        f"offline run{' with scoring' if args.scoring else ''}, {runs} runs each, interleaved:\n"
        f"  without the store  median {figures['median_without_s']:.4f} s\n"
        f"  with the store     median {figures['median_with_s']:.4f} s\n"
        f"  ratio              {figures['ratio']:.3f} ({figures['added_percent']:+.1f}%)\n"
        f"  transcript + store write, median {figures['median_transcript_and_store_write_s']:.4f} s\n"
        f"  once per process: import + open an existing store "
        f"{figures['open_existing_store_in_a_new_process_s']:.3f} s, "
        f"create a new one {figures['create_new_store_in_a_new_process_s']:.3f} s"
    )
    figures["runs"] = runs
    figures["measured"] = provenance.finish()
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
