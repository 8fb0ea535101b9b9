"""How fast does Ctrl-C stop a run whose model calls are in flight?

    python bench/interrupt.py [--repeats 5] [--json PATH]
    python bench/interrupt.py --json bench/results/interrupt.json  # docs/reliability.md's figures

Starts ``python main.py`` (black-box scoring, 6 idea cards) against a local scripted
OpenAI-compatible server that holds every idea-card call open, waits until all six calls are
in flight, sends SIGINT, and measures the time from the signal to the process's exit. It
checks each time that the exit code is 130, that the transcript says ``interrupted`` and
lists the six cut-off calls, and that no image or CSV row was written. The held calls would
never answer: a run that waited for them would not exit at all. The JSON holds the times and
where they were measured (``measured``, ``bench/provenance.py``); ``scripts/render_figures.py``
renders docs/reliability.md's figures from it.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from provenance import Provenance  # noqa: E402

from image_project.backends import openai_backend  # noqa: E402
from tests.faults.common import images, read_rows, spawn_main, transcripts, write_config  # noqa: E402
from tests.support.openai_server import OpenAIServer, Reply  # noqa: E402

IDEAS = 6


def one(tmp: Path) -> float:
    release = threading.Event()
    with OpenAIServer(offline=True) as server:
        server.rule(lambda r: r.schema_name == "idea_card", *[Reply(wait_for=release)] * IDEAS)
        config = write_config(
            tmp, base_url=server.base_url, prompt={"scoring": {"enabled": True, "num_ideas": IDEAS}}
        )
        proc = spawn_main(tmp, "--config", str(config), "-q")
        try:
            if not server.wait_for_in_flight(IDEAS, timeout=60):
                raise RuntimeError("the idea calls never arrived")
            started = time.perf_counter()
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            elapsed = time.perf_counter() - started
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    (t,) = transcripts(tmp)
    cut_off = [p for p in t["error"]["cancelled_paths"] if "/ideas/" in p]
    problems = [
        what
        for what, bad in (
            (f"exit code {proc.returncode}, expected 130: {err[-300:]}", proc.returncode != 130),
            ("transcript error.type is not 'interrupted'", t["error"]["type"] != "interrupted"),
            (
                f"{len(cut_off)} cut-off idea calls recorded, expected {IDEAS}",
                len(cut_off) != IDEAS,
            ),
            ("an image was written", bool(images(tmp))),
            ("a CSV row was written", bool(read_rows(tmp / "out" / "generations.csv"))),
        )
        if bad
    ]
    if problems:
        raise SystemExit("interrupt bench: " + "; ".join(problems))
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, metavar="PATH")
    args = parser.parse_args()
    openai_backend.set_network_policy("loopback")
    provenance = Provenance.start()
    times = []
    for index in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="interrupt-bench-") as tmp:
            times.append(one(Path(tmp)))
        print(f"run {index + 1}: SIGINT -> exit {times[-1] * 1000:7.1f} ms", flush=True)
    summary = {
        "repeats": args.repeats,
        "calls_in_flight": IDEAS,
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "target_s": 2.0,
        "times_s": [round(t, 4) for t in times],
    }
    print(
        f"SIGINT with {IDEAS} calls in flight -> exit 130: median {summary['median_s'] * 1000:.0f} ms, "
        f"max {summary['max_s'] * 1000:.0f} ms (target < 2000 ms) over {args.repeats} runs"
    )
    summary["measured"] = provenance.finish()
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
