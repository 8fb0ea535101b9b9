"""The campaign's wall time against the rate-limit bound: ``python bench/campaign.py``.

One machine stands in for several: a real PostgreSQL (started here in a temporary directory,
as the store tests start theirs, or ``--store URL``), the latency simulator in its own
process (chat median 0.4 s, image 2 s, log-normal, as bench/batch.py) with a limit of
``--limit`` requests per ``--window`` seconds, and ``--workers`` worker processes
(``image-project worker --parallel K --until-done``) making one campaign of ``--runs`` runs of
the standard pipeline. Every worker paces against one budget per key in the database
(image_project.campaign.limiter).

Per repeat: ``wall_s`` from the workers' start to the last one's exit (their interpreter
start-up included), ``span_s`` from the first request the simulator saw to the last answer,
``rate_bound_s`` = served requests / rate (no schedule on this limit can serve them faster),
``efficiency`` = bound / wall, and the 429s (all, and after the first window: the workers
learn the limit from the first answers). The JSON records the commit, the machine (cores,
load average before and after) and the date.

    python bench/campaign.py --json bench/results/campaign.json  # 24 runs, 3 workers x 8, 3 repeats
    python bench/campaign.py --quick                             # 6 runs, 1 repeat
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from simulator import RemoteSimulator  # noqa: E402

SEED = 20261127


def _commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def _machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


@contextmanager
def _database(url: str | None) -> Iterator[str]:
    """A fresh database: on ``url``'s server, or on a PostgreSQL started here."""
    if url is not None:
        yield url
        return
    from tests.store.conftest import postgres_bindir, running_postgres

    bindir = postgres_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL server binaries (initdb, pg_ctl): pass --store URL")
    with running_postgres(bindir) as server:
        name = f"bench_{uuid.uuid4().hex[:8]}"
        server.create_database(name)
        yield server.url(name)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "image_project", *args]


def once(
    url: str, base_url: str, sim: RemoteSimulator, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    """One campaign: submit, then the workers until every run is done."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench", "PYTHONPATH": str(REPO)}
    options = [
        "--set",
        "backend.provider=openai",
        "--set",
        f"backend.base_url={base_url}",
        "--set",
        "backend.max_concurrency=64",
        "--set",
        f"image.generation_path={tmp / 'images'}",
        "--set",
        f"image.log_path={tmp / 'logs'}",
        "--set",
        f"prompt.generations_path={tmp / 'generations.csv'}",
        "--set",
        "image.size=1024x1024",
        "--set",
        f"store.url={url}",
    ]
    # The same runs in one process, one pacer (--parallel auto), for comparison.
    sim.reset()
    sim.set_rate_limit(args.limit, args.window)
    batch = ["--runs", str(args.runs), "--seed", str(SEED), "--parallel", "auto", "-q"]
    cap = ["--set", f"run.parallel_cap={args.runs}", "--set", f"image.log_path={tmp / 'batch'}"]
    t0 = time.perf_counter()
    subprocess.run(_cli(*batch, *options, *cap), env=env, cwd=REPO, check=True, capture_output=True)
    one_process = time.perf_counter() - t0
    one_refused = sum(1 for r in sim.records if r.status == 429)
    sim.set_rate_limit(0, 1.0)
    submit = ["campaign", "submit", "--runs", str(args.runs), "--seed", str(SEED), "-q"]
    subprocess.run(_cli(*submit, *options), env=env, cwd=REPO, check=True, capture_output=True)
    sim.reset()
    sim.set_rate_limit(args.limit, args.window)
    worker = ["worker", "--store", url, "--parallel", str(args.parallel), "--until-done", "-q"]
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(_cli(*worker), env=env, cwd=REPO, stdout=subprocess.DEVNULL)
        for _ in range(args.workers)
    ]
    codes = [p.wait(timeout=1800) for p in procs]
    wall = time.perf_counter() - t0
    records = sim.records
    sim.set_rate_limit(0, 1.0)
    served = [r for r in records if r.status == 200]
    refused = [r for r in records if r.status == 429]
    first = min(r.started for r in records)
    rate = args.limit / args.window
    transcripts = [
        json.loads(p.read_text(encoding="utf-8")) for p in (tmp / "logs").glob("*_transcript.json")
    ]
    waits = [w for t in transcripts for w in _pacing_waits(t)]
    run_walls = [t["timing"]["wall_s"] for t in transcripts]
    return {
        "exit_codes": codes,
        "runs_recorded": len(transcripts),
        "wall_s": round(wall, 3),
        "span_s": round(max(r.finished for r in records) - first, 3),
        "calls": len(served),
        "rate_bound_s": round(len(served) / rate, 3),
        "efficiency": round(len(served) / rate / wall, 3),
        "span_efficiency": round(
            len(served) / rate / (max(r.finished for r in records) - first), 3
        ),
        "429s": len(refused),
        "429s_after_first_window": sum(1 for r in refused if r.started > first + args.window),
        "one_process_wall_s": round(one_process, 3),
        "one_process_429s": one_refused,
        "pacing_wait_ms_mean": round(statistics.mean(waits), 1) if waits else 0.0,
        "run_wall_s_mean": round(statistics.mean(run_walls), 3) if run_walls else 0.0,
    }


def _pacing_waits(record: Any) -> Iterator[float]:
    """Every call's ``pacing_wait_ms`` in a transcript (steps nested at any depth)."""
    if isinstance(record, dict):
        if "pacing_wait_ms" in record and isinstance(record["pacing_wait_ms"], int | float):
            yield float(record["pacing_wait_ms"])
        for value in record.values():
            yield from _pacing_waits(value)
    elif isinstance(record, list):
        for value in record:
            yield from _pacing_waits(value)


BEGIN, END = "<!-- campaign-bench:begin -->", "<!-- campaign-bench:end -->"


def table(report: dict[str, Any]) -> str:
    """The Markdown block docs/batches.md shows between its markers, from a report."""
    s, m = report["setting"], report["machine"]
    lines = [
        "| repeat | runs recorded | calls | wall (s) | span (s) | rate bound (s) | efficiency "
        "(bound / wall) | bound / span | 429s (after the first window) | one process, "
        "`--parallel auto` (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(report["repeats"], 1):
        lines.append(
            f"| {i} | {r['runs_recorded']} | {r['calls']} | {r['wall_s']:.2f} | "
            f"{r['span_s']:.2f} | {r['rate_bound_s']:.2f} | {r['efficiency']:.3f} | "
            f"{r['span_efficiency']:.3f} | {r['429s']} ({r['429s_after_first_window']}) | "
            f"{r['one_process_wall_s']:.2f} |"
        )
    summary = report["summary"]
    lines.append("")
    lines.append(
        f"Median wall {summary['wall_s_median']:.2f} s (range {summary['wall_s_min']:.2f} to "
        f"{summary['wall_s_max']:.2f} s over {s['repeats']} repeats) against a rate bound of "
        f"{summary['rate_bound_s_median']:.2f} s: efficiency {summary['efficiency_median']:.3f}; "
        f"median span {summary['span_s_median']:.2f} s; the same runs in one process "
        f"{summary['one_process_wall_s_median']:.2f} s. {s['runs']} runs, {s['workers']} workers x {s['parallel_per_worker']}, "
        f"{s['rate_limit']}. Commit {report['commit'][:12]}"
        + (" (with uncommitted changes)" if report["dirty"] else "")
        + f", {m['cores']} cores, load {m['load_avg_1m_before']:.2f} before and "
        f"{m['load_avg_1m_after']:.2f} after, {report['date']} ([campaign.json](../bench/results/campaign.json))."
    )
    return "\n".join(lines)


def write_block(doc: Path, block: str) -> None:
    """Put ``block`` between the markers of ``doc``."""
    text = doc.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=8, help="runs in flight per worker")
    parser.add_argument("--limit", type=int, default=48, help="requests per window")
    parser.add_argument("--window", type=float, default=1.0, help="the window, seconds")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--store", metavar="URL", help="an empty PostgreSQL database to use")
    parser.add_argument("--quick", action="store_true", help="6 runs, 1 repeat")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the report here")
    parser.add_argument(
        "--doc", type=Path, metavar="PATH", help="put the table between the markers of PATH"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.repeats = 6, 1
    load_before = os.getloadavg()[0]
    started = datetime.now(UTC).isoformat(timespec="seconds")
    results = []
    sim = RemoteSimulator(chat_median_s=0.4, image_median_s=2.0)
    with _database(args.store) as url, sim.serve() as base_url:
        for i in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="campaign-") as d:
                result = once(url, base_url, sim, args, Path(d))
            results.append(result)
            print(
                f"repeat {i + 1}: {result['runs_recorded']} runs, wall {result['wall_s']:.2f} s, "
                f"rate bound {result['rate_bound_s']:.2f} s (efficiency "
                f"{result['efficiency']:.3f}), {result['429s']} 429s "
                f"({result['429s_after_first_window']} after the first window)",
                flush=True,
            )
    walls = [r["wall_s"] for r in results]
    report = {
        "bench": "campaign",
        **_commit(),
        "machine": {**_machine(), "load_avg_1m_before": load_before},
        "date": started,
        "setting": {
            "runs": args.runs,
            "workers": args.workers,
            "parallel_per_worker": args.parallel,
            "rate_limit": f"{args.limit} requests per {args.window:g} s window",
            "chat_median_s": 0.4,
            "image_median_s": 2.0,
            "repeats": args.repeats,
        },
        "repeats": results,
        "summary": {
            "wall_s_median": statistics.median(walls),
            "wall_s_min": min(walls),
            "wall_s_max": max(walls),
            "rate_bound_s_median": statistics.median(r["rate_bound_s"] for r in results),
            "efficiency_median": statistics.median(r["efficiency"] for r in results),
            "span_s_median": statistics.median(r["span_s"] for r in results),
            "one_process_wall_s_median": statistics.median(
                r["one_process_wall_s"] for r in results
            ),
            "429s_after_first_window_total": sum(r["429s_after_first_window"] for r in results),
        },
    }
    report["machine"]["load_avg_1m_after"] = os.getloadavg()[0]
    summary = report["summary"]
    print(
        f"campaign N={args.runs}, {args.workers} workers x {args.parallel}: wall median "
        f"{summary['wall_s_median']:.2f} s (min {summary['wall_s_min']:.2f}, max "
        f"{summary['wall_s_max']:.2f}) against a rate bound of "
        f"{summary['rate_bound_s_median']:.2f} s; efficiency {summary['efficiency_median']:.3f}; "
        f"{summary['429s_after_first_window_total']} 429s after the first window"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.doc is not None:
        write_block(args.doc, table(report))


if __name__ == "__main__":
    main()
