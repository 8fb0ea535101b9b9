"""Helpers shared by the fault-tolerance tests: configs pointing at a local server, the CLI
as a child process, and reading what a run left on disk."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from image_project.backends.factory import Backends
from image_project.backends.openai_backend import openai_backends
from image_project.backends.retry import RetryPolicy
from image_project.config.loading import load_config
from image_project.config.models import AppConfig
from tests.support import RecordingSleep
from tests.support.openai_server import OpenAIServer

REPO = Path(__file__).resolve().parents[2]


MAX_ATTEMPTS = 4


def make_cfg(tmp: Path, *extra: str) -> AppConfig:
    return load_config(
        root=REPO,
        env={},
        overrides=[
            f"image.generation_path={tmp / 'out' / 'images'}",
            f"image.log_path={tmp / 'out' / 'logs'}",
            f"prompt.generations_path={tmp / 'out' / 'generations.csv'}",
            "image.size=256x256",
            "image.model=test-image",  # not in the capability table (see write_config)
            "prompt.random_seed=77",
            *extra,
        ],
    )


@asynccontextmanager
async def http_backends(
    server: OpenAIServer,
    sleep: RecordingSleep,
    *,
    max_concurrency: int = 8,
    timeout_s: float = 30.0,
    max_attempts: int = MAX_ATTEMPTS,
    max_retry_wait_s: float = 60.0,
    pacing_sleep: RecordingSleep | None = None,
) -> AsyncIterator[Backends]:
    """The OpenAI backends against ``server``, with the retry layer's sleep ``sleep`` and the
    pacer's ``pacing_sleep`` (a fresh :class:`RecordingSleep` unless given): both recorded,
    never slept, so a test that provokes a server-requested pause does not wait it out."""
    pair = openai_backends(
        api_key="test-key",
        text_model="test-text",
        image_model="test-image",
        base_url=server.base_url,
        timeout_s=timeout_s,
        retry=RetryPolicy(
            max_attempts=max_attempts,
            initial_wait_s=1.0,
            max_wait_s=30.0,
            max_retry_wait_s=max_retry_wait_s,
        ),
        max_concurrency=max_concurrency,
        sleep=sleep,
        rng=random.Random(0),
        pacing_sleep=pacing_sleep if pacing_sleep is not None else RecordingSleep(),
    )
    try:
        yield Backends(pair.text, pair.image, "openai", "scripted server", pair.aclose)
    finally:
        await pair.aclose()


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
        # A model the capability table does not know, as a local server's would be, so that
        # the small test images are not held to gpt-image-2.6's 655,360-pixel minimum.
        cfg["image"]["model"] = "test-image"
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
