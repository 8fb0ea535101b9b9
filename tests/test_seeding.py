from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from image_project import seeding
from image_project.seeding import MAX_SEED, derive_seed, rng_for, run_seed


def test_derive_seed_is_stable_across_processes() -> None:
    # A fresh interpreter has a different hash() salt; derive_seed must not care.
    code = "from image_project.seeding import derive_seed; print(derive_seed(42, 'ideas', 'A'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == derive_seed(42, "ideas", "A")


def test_labels_and_seed_change_the_value_and_stay_in_range() -> None:
    values = {
        derive_seed(s, *labels) for s in (0, 1) for labels in [("a",), ("b",), ("a", 1), ("a", "1")]
    }
    assert len(values) == 8
    assert all(0 <= v <= MAX_SEED for v in values)


@pytest.mark.parametrize(("seed", "labels"), [(7, ("selection",)), (42, ("step", "idea", "A"))])
def test_derive_seed_is_the_sha256_recipe_of_the_docs(seed: int, labels: tuple[str, ...]) -> None:
    """docs/scoring.md, Determinism: SHA-256 of the compact JSON ``[seed, *labels]``, its
    first 4 bytes read big-endian, masked to 31 bits, so anyone can recompute a seed."""
    payload = json.dumps([seed, *labels], separators=(",", ":")).encode()
    expected = int.from_bytes(hashlib.sha256(payload).digest()[:4], "big") & (2**31 - 1)
    assert derive_seed(seed, *labels) == expected
    assert MAX_SEED == 2**31 - 1


def test_rng_for_is_reproducible() -> None:
    assert rng_for(7, "selection").random() == rng_for(7, "selection").random()


def test_run_seed_first_run_uses_the_configured_seed_later_runs_derive_theirs() -> None:
    assert run_seed(42) == run_seed(42, 0) == 42
    later = [run_seed(42, i) for i in range(1, 6)]
    assert later == [derive_seed(42, "run", i) for i in range(1, 6)]
    assert len({42, *later}) == 6
    assert all(0 <= s <= MAX_SEED for s in later)
    assert run_seed(43, 1) != run_seed(42, 1)


def test_run_seed_without_a_configured_seed_is_fresh_for_every_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh = iter([101, 202, 303])
    monkeypatch.setattr(seeding, "fresh_seed", lambda: next(fresh))
    assert [run_seed(None, i) for i in (0, 1, 0)] == [101, 202, 303]
