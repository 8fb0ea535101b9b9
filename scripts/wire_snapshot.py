"""What a run sends and records, for before/after comparisons of a refactor.

Runs the real CLI in-process with the OpenAI adapter against the local scripted server
(``tests.support.openai_server``, offline answers) for a few fixed scoring scenarios, and
writes per scenario:

* ``<name>.requests.json``: every HTTP request body the server received, sorted (concurrent
  calls arrive in any order);
* ``<name>.transcript.json``: the run's transcript with what differs between two runs of the
  same seed removed (times, latencies, the generation id, the local server's address) and the
  image sizes (they depend on the installed image encoders).

Usage: ``python scripts/wire_snapshot.py OUT_DIR`` then ``diff -r BEFORE AFTER``.
tests/test_wire_snapshot.py runs the same scenarios against the saved snapshots in
``tests/data/wire/``; regenerate those with ``python scripts/wire_snapshot.py
tests/data/wire`` after a deliberate change of a prompt or the record, and say so in the
commit.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from image_project.cli.command import main  # noqa: E402
from tests.support.openai_server import OpenAIServer  # noqa: E402

SCENARIOS: dict[str, list[str]] = {
    "one_round": [
        "--set",
        "prompt.scoring.num_ideas=4",
    ],
    "three_rounds": [
        "--set",
        "prompt.scoring.evolution.enabled=true",
        "--set",
        "prompt.scoring.evolution.generations=2",
    ],
    "three_rounds_llm_selector": [
        "--set",
        "prompt.scoring.evolution.enabled=true",
        "--set",
        "prompt.scoring.evolution.generations=2",
        "--set",
        "prompt.scoring.evolution.selector=llm",
    ],
}

PINNED = [
    *("--set", "prompt.scoring.aggregation=median"),
    *("--set", "prompt.scoring.normalise=none"),
]
"""The aggregation the snapshots were taken with (median of the judges' own scores), pinned so
that a change of the default aggregation or normalisation does not change the snapshots: they
guard what goes on the wire and into the record."""

_VOLATILE = frozenset(
    {"created_at", "latency_ms", "pacing_wait_ms", "wall_s", "phases_s", "timing", "generation_id"}
    # The image files' sizes depend on the installed Pillow's and zlib's encoders.
    | {"image_bytes", "received_bytes"}
)


def _scrub(value: Any, replace: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v, replace) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_scrub(v, replace) for v in value]
    if isinstance(value, str):
        for old, new in replace.items():
            value = value.replace(old, new)
    return value


def run_scenario(
    name: str, work: Path, extra: tuple[str, ...] = (), exit_code: int = 0
) -> tuple[list[Any], dict[str, Any]]:
    """Run one scenario in ``work`` (emptied first), with ``extra`` command-line arguments
    after the scenario's own, expecting it to exit ``exit_code``; its sorted request bodies
    and scrubbed transcript."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # The offline judges' shared per-model error off: the answers stay those the snapshots
    # were taken with.
    with OpenAIServer(offline=True, offline_model_error=0.0) as server:
        cfg = {
            "backend": {"provider": "openai", "base_url": server.base_url},
            "image": {
                "generation_path": str(work / "images"),
                "log_path": str(work / "logs"),
                "size": "256x256",
                "model": "test-image",
            },
            "prompt": {
                "categories_path": str(REPO / "config" / "categories.csv"),
                "profile_path": str(REPO / "config" / "profile.csv"),
                "generations_path": str(work / "generations.csv"),
                "scoring": {
                    "enabled": True,
                    "judges": [
                        {"id": "strict", "rubric": "strict"},
                        {"id": "warm", "rubric": "profile_fit"},
                        {"id": "novel", "rubric": "novelty_heavy", "profile": "hints"},
                    ],
                    "generator_profile_abstraction": True,
                },
            },
            "store": {"enabled": False},
        }
        config = work / "config.yaml"
        config.write_text(json.dumps(cfg), encoding="utf-8")
        args = ["--config", str(config), "--seed", "11", "-q", *PINNED, *SCENARIOS[name], *extra]
        code = main(args, env={"OPENAI_API_KEY": "test-key"}, root=REPO)
        if code != exit_code:
            raise SystemExit(f"{name}: the run exited {code}, not {exit_code}")
        base_url = server.base_url
        bodies = sorted(
            (r.body for r in server.requests), key=lambda b: json.dumps(b, sort_keys=True)
        )
    (t_path,) = (work / "logs").glob("*_transcript.json")
    transcript = json.loads(t_path.read_text(encoding="utf-8"))
    gid = transcript["generation_id"]
    replace = {gid: "<generation_id>", str(work): "<work>", base_url: "<base_url>"}
    return bodies, _scrub(transcript, replace)


def main_(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    work = out / ".work"
    for name in SCENARIOS:
        bodies, transcript = run_scenario(name, work)
        for suffix, data in (("requests", bodies), ("transcript", transcript)):
            path = out / f"{name}.{suffix}.json"
            path.write_text(
                json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                encoding="utf-8",
            )
        print(f"{name}: {len(bodies)} requests")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main_(Path(sys.argv[1]).resolve())
