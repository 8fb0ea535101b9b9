"""The package bench/quality/ (what bench/quality.py runs) for the tests that drive it
(tests/test_bench_quality.py and the evidence test), and the shipped profile's likes its
simulated world is built on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from image_project.stages.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

if TYPE_CHECKING:  # mypy sees the real module (bench/ is on its path; see pyproject.toml)
    import quality
else:
    quality = pytest.importorskip("quality")

LIKES = load_profile(REPO / "config" / "profile.csv").likes

__all__ = ["LIKES", "REPO", "quality"]
