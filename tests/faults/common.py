"""Helpers shared by the fault-tolerance tests: configs pointing at a local server, the CLI
as a child process, and reading what a run left on disk."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def write_config(tmp: Path, *, base_url: str | None = None, **sections: Any) -> Path:
    """A config file under ``tmp`` writing everything to ``tmp/out``; ``sections`` are merged
    one level deep (``backend={...}``, ``prompt={...}``, ``run={...}``)."""
    cfg: dict[str, Any] = {
        "backend": {"provider": "openai" if base_url else "offline"},
        "image": {
            "generation_path": str(tmp / "out" / "images"),
            "log_path": str(tmp / "out" / "logs"),
            "size": "256x256",
        },
        "prompt": {
            "categories_path": str(REPO / "config" / "categories.csv"),
            "profile_path": str(REPO / "config" / "profile.csv"),
            "generations_path": str(tmp / "out" / "generations.csv"),
        },
    }
    if base_url:
        cfg["backend"].update(base_url=base_url, backoff_initial_s=0.01, backoff_max_s=0.05)
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    path = tmp / "config.yaml"
    path.write_text(json.dumps(cfg), encoding="utf-8")  # JSON is valid YAML
    return path


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env["OPENAI_API_KEY"] = "test-key"
    return env


def spawn_main(tmp: Path, *args: str) -> subprocess.Popen[str]:
    """``python main.py ARGS`` as a child process (own stdout / stderr pipes)."""
    return subprocess.Popen(
        [sys.executable, str(REPO / "main.py"), *args],
        cwd=tmp,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def transcripts(tmp: Path) -> list[dict[str, Any]]:
    return [
        json.loads(p.read_text(encoding="utf-8"))
        for p in sorted((tmp / "out" / "logs").glob("*_transcript.json"))
    ]


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def images(tmp: Path) -> list[Path]:
    folder = tmp / "out" / "images"
    return sorted(folder.glob("*.jpg")) if folder.exists() else []
