"""How long the command line takes from start to exit, against the interpreter's own start-up.

    python bench/startup.py                # 15 rounds
    python bench/startup.py --rounds 5 --json startup.json --imports

Four commands, each a whole child process, run interleaved round by round (so a burst of
load on the machine hits all of them alike), offline, with no OpenAI variables and every
output in a fresh temporary directory:

* ``python -c pass``: the interpreter alone, the floor;
* ``python main.py --help``;
* ``python main.py --offline --prompt-only --seed 42``: a whole offline prompt-only run,
  written to the run store as every run is (the default SQLite store, which exists after the
  warm-up round: what a user's second and later runs pay);
* the same with ``--set store.enabled=false``: what the store's write adds to a process.

Reported per command: wall time (median, min, max) and CPU time (user + system of the child,
median; steadier than wall time on a loaded machine), and the ratio of each median to the
floor's. ``--imports`` adds the slowest imports of ``import image_project.cli.command``
(``python -X importtime``, cumulative). Target (reported, never asserted): the offline
``--prompt-only`` run's median wall time <= 0.35 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from provenance import Provenance

REPO = Path(__file__).resolve().parents[1]
TARGET_PROMPT_ONLY_S = 0.35


def commands(out: Path) -> dict[str, list[str]]:
    main = [sys.executable, str(REPO / "main.py")]
    outputs = [
        *("--set", f"image.log_path={out / 'logs'}"),
        *("--set", f"image.generation_path={out / 'images'}"),
        *("--set", f"prompt.generations_path={out / 'generations.csv'}"),
    ]
    prompt_only = [*main, "--offline", "--prompt-only", "--seed", "42", "-q", *outputs]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "main.py --help": [*main, "--help"],
        "main.py --offline --prompt-only": prompt_only,
        "  the same, store off": [*prompt_only, "--set", "store.enabled=false"],
    }


def _env() -> dict[str, str]:
    """The environment without OpenAI variables and without ``PYTHONDONTWRITEBYTECODE``: a
    user's interpreter caches compiled modules, so the warm-up round writes the ``.pyc``
    files that the timed rounds then load (else every round would compile the package)."""
    skip = ("OPENAI", "IMAGE_PROJECT", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if not k.startswith(skip)}


def timed(argv: Sequence[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one child process run to its exit (which must be 0)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(rounds: int) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="startup-") as d:
        cmds = commands(Path(d))
        for argv in cmds.values():  # warm the file cache and the .pyc files; not counted
            timed(argv)
        for _ in range(rounds):
            for name, argv in cmds.items():
                wall, cpu = timed(argv)
                entry = samples.setdefault(name, {"wall": [], "cpu": []})
                entry["wall"].append(wall)
                entry["cpu"].append(cpu)
    return samples


def slowest_imports(count: int = 15) -> list[tuple[str, float]]:
    """The modules with the largest cumulative import time under ``import image_project.cli.command``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import image_project.cli.command"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((parts[2].rstrip(), int(parts[1]) / 1e6))
    return sorted(rows, key=lambda r: r[1], reverse=True)[:count]


def report(samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    floor = statistics.median(samples["python -c pass"]["wall"])
    floor_cpu = statistics.median(samples["python -c pass"]["cpu"])
    out: dict[str, Any] = {}
    for name, s in samples.items():
        wall, cpu = statistics.median(s["wall"]), statistics.median(s["cpu"])
        out[name] = {
            "wall_s": {"median": wall, "min": min(s["wall"]), "max": max(s["wall"])},
            "cpu_s_median": cpu,
            "wall_ratio_to_python": wall / floor,
            "cpu_ratio_to_python": cpu / floor_cpu if floor_cpu else float("nan"),
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    parser.add_argument("--imports", action="store_true", help="list the slowest imports")
    args = parser.parse_args(argv)
    provenance = Provenance.start()
    figures = report(measure(args.rounds))
    print(f"{'command':<34} {'wall median [min-max] s':>26} {'x python':>9} {'cpu s':>7}")
    for name, f in figures.items():
        w = f["wall_s"]
        print(
            f"{name:<34} {w['median']:>9.3f} [{w['min']:.3f}-{w['max']:.3f}] "
            f"{f['wall_ratio_to_python']:>8.2f}x {f['cpu_s_median']:>7.3f}"
        )
    for name in ("main.py --offline --prompt-only", "  the same, store off"):
        median = figures[name]["wall_s"]["median"]
        verdict = "meets" if median <= TARGET_PROMPT_ONLY_S else "misses"
        print(
            f"{name.strip()}: median {median:.3f} s {verdict} the {TARGET_PROMPT_ONLY_S} s target"
        )
    result: dict[str, Any] = {"rounds": args.rounds, "commands": figures}
    if args.imports:
        result["slowest_imports_s"] = slowest_imports()
        print("slowest imports of image_project.cli.command (cumulative):")
        for module, seconds in result["slowest_imports_s"]:
            print(f"  {seconds * 1000:8.1f} ms  {module.strip()}")
    result["measured"] = provenance.finish()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
