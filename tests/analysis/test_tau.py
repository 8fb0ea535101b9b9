"""Kendall's tau-b from its definition (image_project.analysis.tau): published values, the
edge cases, and agreement with scipy.stats.kendalltau on random scores with ties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from image_project.analysis.tau import kendall_tau_b


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        # scipy.stats.kendalltau's documented example (ties in both).
        ([12, 2, 1, 12, 2], [1, 4, 7, 1, 0], -0.47140452079103173),
        # No ties, 10 items: C = 34, D = 11 of 45 pairs.
        ([4, 10, 3, 1, 9, 2, 6, 7, 8, 5], [5, 8, 6, 2, 10, 3, 9, 4, 7, 1], 23 / 45),
        ([1, 2, 3, 4, 5], [3, 4, 1, 2, 5], 0.2),
        ([1, 2, 3], [10, 20, 30], 1.0),
        ([1, 2, 3], [30, 20, 10], -1.0),
    ],
)
def test_known_values(x: list[int], y: list[int], expected: float) -> None:
    assert kendall_tau_b(x, y) == pytest.approx(expected, abs=1e-12)


def test_the_documented_example_to_full_precision() -> None:
    # (C - D) / sqrt((n0 - Tx)(n0 - Ty)) = (2 - 6) / sqrt((10 - 2)(10 - 1)) = -4 / sqrt(72).
    assert kendall_tau_b([12, 2, 1, 12, 2], [1, 4, 7, 1, 0]) == pytest.approx(-0.47140452079103173)
    assert kendall_tau_b([12, 2, 1, 12, 2], [1, 4, 7, 1, 0]) == pytest.approx(-4 / math.sqrt(72))


@pytest.mark.parametrize(
    ("x", "y"), [([], []), ([5], [7]), ([1, 1, 1], [1, 2, 3]), ([1, 2, 3], [4, 4, 4])]
)
def test_undefined_is_none(x: list[int], y: list[int]) -> None:
    assert kendall_tau_b(x, y) is None


def test_different_lengths_are_an_error() -> None:
    with pytest.raises(ValueError, match="differ in length: 2 and 3"):
        kendall_tau_b([1, 2], [1, 2, 3])


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 30).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 6), min_size=n, max_size=n),
            st.lists(st.integers(0, 100), min_size=n, max_size=n),
        )
    )
)
def test_it_is_scipys_tau_b(pair: tuple[list[int], list[int]]) -> None:
    stats = pytest.importorskip("scipy.stats")
    x, y = pair
    expected = float(stats.kendalltau(x, y).statistic)
    got = kendall_tau_b(x, y)
    if math.isnan(expected):
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-12)
