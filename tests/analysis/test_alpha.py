"""Krippendorff's alpha against the published reference values and its edge cases."""

from __future__ import annotations

import pytest

from image_project.analysis.alpha import krippendorff_alpha

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: 4 observers
# (rows) x 12 units (columns), None = missing.
N = None
RELIABILITY_DATA = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
    [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N],
]
UNITS = [[v for v in column if v is not None] for column in zip(*RELIABILITY_DATA, strict=True)]


def test_interval_alpha_matches_the_published_value() -> None:
    alpha = krippendorff_alpha(UNITS, "interval")
    assert alpha is not None and round(alpha, 3) == 0.849


def test_nominal_alpha_matches_the_published_value() -> None:
    alpha = krippendorff_alpha(UNITS, "nominal")
    assert alpha is not None and round(alpha, 3) == 0.743


def test_single_value_units_are_not_pairable_and_change_nothing() -> None:
    # Unit 12 holds one value; dropping it or adding more such units leaves alpha unchanged.
    without = [u for u in UNITS if len(u) >= 2]
    assert krippendorff_alpha(without) == krippendorff_alpha(UNITS)
    assert krippendorff_alpha([*UNITS, [9], [0]]) == krippendorff_alpha(UNITS)


def test_perfect_agreement_is_one_and_systematic_disagreement_is_negative() -> None:
    assert krippendorff_alpha([[1, 1], [5, 5], [3, 3, 3]]) == 1.0
    alpha = krippendorff_alpha([[1, 5], [5, 1], [1, 5], [5, 1]])
    assert alpha is not None and alpha < 0


def test_undefined_without_variation_or_pairable_values() -> None:
    assert krippendorff_alpha([[4, 4], [4, 4, 4]]) is None
    assert krippendorff_alpha([[1], [2]]) is None
    assert krippendorff_alpha([]) is None


def test_an_unknown_metric_is_named() -> None:
    with pytest.raises(ValueError, match="metric: got 'ratio'"):
        krippendorff_alpha(UNITS, "ratio")  # type: ignore[arg-type]
