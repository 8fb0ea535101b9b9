"""Real offline runs for the review tests: the offline pipeline, scoring on with a 3-judge
ensemble, plus a run without scoring (with a 4K image) and a run that fails at the image
call."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from image_project.app import RunFailed, run_generation
from image_project.backends.factory import Backends, make_backends
from image_project.config import AppConfig, load_config
from image_project.errors import RequestRejectedError
from image_project.record import RunRecord
from image_project.review import records_from_transcripts
from image_project.testing import FakeImageBackend

__all__ = ["ENSEMBLE", "UPSCALE", "make_offline_runs", "offline_cfg"]

REPO = Path(__file__).resolve().parents[2]
ENSEMBLE = (
    "prompt.scoring.enabled=true",
    "prompt.scoring.judges=[{id: strict}, {id: warm}, {id: novel}]",
)
UPSCALE = (
    "upscale.enabled=true",
    "upscale.allow_fallback_resize=true",
    "upscale.target_long_edge_px=2048",
)


def offline_cfg(out: Path, seed: int, *extra: str) -> AppConfig:
    return load_config(
        root=REPO,
        env={},
        overrides=[
            "backend.provider=offline",
            f"image.generation_path={out / 'images'}",
            f"image.log_path={out / 'logs'}",
            f"prompt.generations_path={out / 'generations.csv'}",
            f"prompt.random_seed={seed}",
            *extra,
        ],
    )


async def _runs(out: Path) -> None:
    for seed in (11, 12):
        cfg = offline_cfg(out, seed, *ENSEMBLE)
        await run_generation(cfg, make_backends(cfg, {}))
    # The plain run makes a 4K image too (a smaller one: the test is about the site).
    plain = offline_cfg(out, 13, *UPSCALE)
    await run_generation(plain, make_backends(plain, {}))
    cfg = offline_cfg(out, 14, *ENSEMBLE)
    failing = Backends(
        text=make_backends(cfg, {}).text,
        image=FakeImageBackend(fail_with=RequestRejectedError("no such model", status=404)),
        provider="offline",
        description="offline text, failing image",
    )
    with pytest.raises(RunFailed):
        await run_generation(cfg, failing)


def make_offline_runs(out: Path) -> list[RunRecord]:
    """Four runs into ``out`` (two scoring, one plain with a 4K image, one failed), newest
    first."""
    anyio.run(_runs, out)
    records = records_from_transcripts(sorted((out / "logs").glob("*_transcript.json")))
    assert len(records) == 4
    return records
