"""The one seed-derivation function. Every random choice in a run comes from here.

``derive_seed(run_seed, *labels)`` is a stable hash (SHA-256 of a canonical JSON of the seed
and the labels), never Python's salted ``hash()``: the same run seed and labels give the same
value on every machine and every run. Derived seeds are 31-bit non-negative ints so that any
OpenAI-compatible server accepts them as the API ``seed``.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets

MAX_SEED = 2**31 - 1


def derive_seed(run_seed: int, *labels: str | int) -> int:
    payload = json.dumps([run_seed, *labels], separators=(",", ":"), ensure_ascii=True)
    digest = hashlib.sha256(payload.encode("ascii")).digest()
    return int.from_bytes(digest[:4], "big") & MAX_SEED


def rng_for(run_seed: int, *labels: str | int) -> random.Random:
    """A private ``random.Random`` for one labelled choice."""
    return random.Random(derive_seed(run_seed, *labels))


def fresh_seed() -> int:
    """A new run seed, for runs whose configuration does not fix one (it is recorded)."""
    return secrets.randbelow(MAX_SEED + 1)


def run_seed(base: int | None, index: int = 0) -> int:
    """The seed of run ``index`` (0-based) of a batch whose configured seed is ``base``.

    The one place that decides a run seed: the first run uses ``base`` itself, later runs
    derive theirs from it (``derive_seed(base, "run", index)``), and without a configured
    seed every run gets a :func:`fresh_seed` (recorded in its transcript)."""
    if base is None:
        return fresh_seed()
    return base if index == 0 else derive_seed(base, "run", index)
