"""What a bench figure was measured on: the commit, the machine and the date.

Every bench that writes JSON (``bench/latency.py`` and its ``--batch-only`` form,
``bench/startup.py``, ``bench/store.py``, ``bench/quality.py``,
``scripts/real_model_check.py``) puts a :class:`Provenance` record under ``measured``::

    meter = Provenance.start()       # before the first measurement
    ...                              # the bench
    report["measured"] = meter.finish()

``finish`` gives ``commit`` (``git rev-parse HEAD`` of the repository, with ``dirty`` true
when tracked files outside ``bench/results/`` and ``docs/`` differ from it: the figures are
then of uncommitted code; ``bench/results/`` holds the figures themselves and ``docs/`` the
pages that show them, which a bench run writes or a reader edits while it runs, and which
measure nothing), ``date`` (UTC,
ISO 8601, at the start), ``duration_s`` and ``machine``: the number of cores, the load
average (1, 5, 15 minutes) before and after, the platform and Python. The load is what the
other work on the machine was doing: a figure measured at a load above the cores is one of a
busy machine. ``scripts/render_figures.py`` prints these with every table it renders.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Provenance", "git_commit"]

REPO = Path(__file__).resolve().parents[1]


MEASURES_NOTHING = ("bench/results/", "docs/")
"""Paths whose changes leave the measured code as it was (see the module docstring)."""


def git_commit(repo: Path = REPO) -> tuple[str | None, bool]:
    """(HEAD's commit, whether tracked files outside :data:`MEASURES_NOTHING` differ from it);
    (None, False) outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "."]
            + [f":(exclude){path}" for path in MEASURES_NOTHING],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None, False
    return head, bool(status.strip())


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@dataclass(frozen=True)
class Provenance:
    """The state at the start of a bench; :meth:`finish` adds the end and returns the record."""

    date: str
    load_before: list[float]
    t0: float

    @classmethod
    def start(cls) -> Provenance:
        return cls(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), _load(), time.perf_counter())

    def finish(self, repo: Path = REPO) -> dict[str, Any]:
        commit, dirty = git_commit(repo)
        return {
            "commit": commit,
            "dirty": dirty,
            "date": self.date,
            "duration_s": round(time.perf_counter() - self.t0, 1),
            "machine": {
                "cores": os.cpu_count(),
                "load_before": self.load_before,
                "load_after": _load(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
        }
