"""The effective number of judges of a same-model group (analysis/independence.py): scores
simulated with a seeded generator from the model the estimator assumes, with a planted share
of common error, must put the true N_eff inside the 95 % interval over 100 runs; a one-model
panel gets the "cannot be measured" line."""

from __future__ import annotations

import math
import random

import pytest

from image_project.analysis.independence import RoundScores, effective_judges, estimate_independence

RUNS = 100
CARDS = 6
SHARED_RHO = (3 / 1.15 - 1) / 2  # three judges whose errors share this act like 1.15


def simulate(
    rho: float,
    seed: int,
    *,
    runs: int = RUNS,
    group: int = 3,
    reference_models: tuple[str, ...] = ("other",),
    reference_scales: tuple[tuple[float, float], ...] = (),
) -> list[list[RoundScores]]:
    """``runs`` one-round runs of ``CARDS`` cards: every card a quality (sd 10), each group
    judge on model ``shared`` an offset of its own (sd 5) and an error of sd 6 of which the
    share ``rho`` is common to the group, each reference judge an independent error of sd 6
    (reference k on its own scale when ``reference_scales[k]`` = (stretch, shift) is given:
    ``60 + shift + stretch x (its score - 60)``); scores rounded and clamped to 0..100 as the
    product's are."""
    rng = random.Random(seed)
    out: list[list[RoundScores]] = []

    def score(x: float) -> int:
        return max(0, min(100, round(x)))

    for _ in range(runs):
        quality = [rng.gauss(60, 10) for _ in range(CARDS)]
        common = [rng.gauss(0, 1) for _ in range(CARDS)]
        judged: dict[str, tuple[str, dict[str, int]]] = {}
        for j in range(group):
            offset = rng.gauss(0, 5)
            judged[f"g{j}"] = (
                "shared",
                {
                    f"c{c}": score(
                        offset
                        + quality[c]
                        + 6 * (math.sqrt(rho) * common[c] + math.sqrt(1 - rho) * rng.gauss(0, 1))
                    )
                    for c in range(CARDS)
                },
            )
        for k, model in enumerate(reference_models):
            stretch, shift = reference_scales[k] if k < len(reference_scales) else (1.0, 0.0)
            judged[f"r{k}"] = (
                model,
                {
                    f"c{c}": score(60 + shift + stretch * (quality[c] + 6 * rng.gauss(0, 1) - 60))
                    for c in range(CARDS)
                },
            )
        out.append([judged])
    return out


def test_effective_judges_formula() -> None:
    assert effective_judges(3, 0.0) == 3
    assert effective_judges(3, 1.0) == 1
    assert effective_judges(3, SHARED_RHO) == pytest.approx(1.15)
    assert effective_judges(3, -0.3) == 3  # clamped: errors moving apart are outside the model
    assert effective_judges(3, 1.4) == 1


@pytest.mark.parametrize(
    ("rho", "truth", "excluded"),
    [(SHARED_RHO, 1.15, 3.0), (0.0, 3.0, 1.15)],
    ids=["shared", "independent"],
)
def test_planted_truth_is_inside_the_interval(rho: float, truth: float, excluded: float) -> None:
    found = estimate_independence(simulate(rho, seed=2026))
    (group,) = found.groups
    assert (group.model, group.judges, group.reference) == ("shared", ("g0", "g1", "g2"), ("r0",))
    assert (group.runs, group.rounds, group.cards) == (RUNS, RUNS, RUNS * CARDS)
    assert group.n_eff is not None and group.n_eff_interval is not None, group.reason
    low, high = group.n_eff_interval
    assert low <= truth <= high, group.sentence()
    # ... and the interval is narrow enough to tell the two worlds apart.
    assert not low <= excluded <= high, group.sentence()
    assert group.rho_interval is not None
    assert group.rho_interval[0] <= rho <= group.rho_interval[1]
    assert group.sentence().startswith(
        f"Your 3 judges on shared (g0, g1, g2) act like {group.n_eff:.2f} independent judges "
        f"(95% interval {low:.2f} to {high:.2f}), measured against r0 on other models over "
        f"{RUNS} runs"
    )
    assert group.sentence().endswith(
        "It assumes the reference judge (r0) on other models score the same quality on the "
        "same scale as these judges, with errors independent of theirs; a reference on another "
        "scale or sharing their errors makes it wrong (two references on other models give a "
        "scale-free estimate)."
    )


def test_the_interval_is_a_function_of_the_scores() -> None:
    runs = simulate(0.5, seed=7)
    assert estimate_independence(runs) == estimate_independence(runs)
    assert estimate_independence(runs) != estimate_independence(simulate(0.5, seed=8))


def test_judge_offsets_and_run_shifts_do_not_count_as_shared_error() -> None:
    """Independent errors, but every group judge in a run shifted by the same amount (a run
    effect) and each by its own offset: centring within the round removes both."""
    runs = simulate(0.0, seed=11)
    rng = random.Random(3)
    shifted: list[list[RoundScores]] = []
    for (judged,) in runs:
        shift = rng.gauss(0, 15)
        shifted.append(
            [
                {
                    j: (m, {c: s + round(shift) if m == "shared" else s for c, s in scores.items()})
                    for j, (m, scores) in judged.items()
                }
            ]
        )
    (group,) = estimate_independence(shifted).groups
    assert group.n_eff_interval is not None
    assert group.n_eff_interval[0] <= 3.0 <= group.n_eff_interval[1]


def test_an_interval_at_the_bound_is_never_printed_as_one_value() -> None:
    """Independent judges whose errors happen to move apart: every resample puts rho below
    0, clamped to N_eff = 3 at both ends; the sentence says so instead of "3.00 to 3.00"."""
    for seed in range(40):
        (group,) = estimate_independence(simulate(0.0, seed=seed, runs=30)).groups
        interval = group.n_eff_interval
        if interval is not None and f"{interval[0]:.2f}" == f"{interval[1]:.2f}":
            break
    else:
        pytest.fail("no planted world of 40 gave a collapsed interval")
    sentence = group.sentence()
    assert f"{interval[0]:.2f} to {interval[1]:.2f}" not in sentence
    assert "no interval: every resample put the shared error share at its bound" in sentence


def test_one_model_panel_cannot_be_measured() -> None:
    runs = [
        [{j: ("gpt-x", scores) for j, (_, scores) in judged.items() if j != "r0"}]
        for (judged,) in simulate(0.8, seed=5)
    ]
    found = estimate_independence(runs)
    assert found.single_model == "gpt-x"
    assert found.groups == ()
    (sentence,) = found.sentences()
    assert "cannot be measured from the panel's own scores" in sentence
    assert "between 1 and 3 independent judges" in sentence


def test_every_judge_on_its_own_model_and_a_lone_judge() -> None:
    runs = [
        [{"a": ("m1", {"c1": 50, "c2": 60}), "b": ("m2", {"c1": 55, "c2": 70})}],
    ]
    found = estimate_independence(runs)
    assert found.groups == () and found.single_model is None
    assert "no same-model group" in found.sentences()[0]
    lone = estimate_independence([[{"a": ("m1", {"c1": 50, "c2": 60})}]])
    assert lone.sentences() == [] and lone.single_model is None


def test_too_few_runs_give_an_estimate_without_interval() -> None:
    (group,) = estimate_independence(simulate(0.5, seed=1, runs=10)).groups
    assert group.runs == 10 and group.n_eff is not None
    assert group.n_eff_interval is None
    assert group.reason == "an interval needs at least 30 runs, 20 more than these 10"
    sentence = group.sentence()
    assert "could not be measured" not in sentence and "95% interval" not in sentence
    assert (
        f"act like {group.n_eff:.2f} independent judges (no interval: an interval needs at "
        "least 30 runs, 20 more than these 10)" in sentence
    )
    assert "on the same scale" in sentence  # the assumptions, even without an interval


def test_rounds_without_two_group_judges_or_a_reference_are_skipped() -> None:
    runs = simulate(0.0, seed=4, runs=10)
    # Run 0: one group judge failed (no scores); run 1: the reference failed.
    g0_model, _ = runs[0][0]["g0"]
    runs[0][0] = {**runs[0][0], "g0": (g0_model, {}), "g1": ("shared", {})}
    runs[1][0] = {**runs[1][0], "r0": ("other", {})}
    (group,) = estimate_independence(runs).groups
    assert group.runs == 8


def test_no_usable_round_says_why() -> None:
    runs = [[{"a": ("m1", {"c1": 50, "c2": 60}), "b": ("m1", {}), "c": ("m2", {"c1": 1, "c2": 2})}]]
    (group,) = estimate_independence(runs).groups
    assert group.n_eff is None and group.reason is not None
    sentence = group.sentence()
    assert "could not be measured" in sentence and "between 1 and 2 judges" in sentence


def test_two_reference_models_pool_as_the_reference() -> None:
    (group,) = estimate_independence(
        simulate(SHARED_RHO, seed=9, reference_models=("other", "third"))
    ).groups
    assert group.reference == ("r0", "r1") and group.scale_free
    assert "Scale-free estimate from 2 reference judges (r0, r1)" in group.sentence()
    assert group.n_eff_interval is not None
    assert group.n_eff_interval[0] <= 1.15 <= group.n_eff_interval[1]


def test_judge_ids_that_moved_model_between_runs_are_named_never_an_empty_list() -> None:
    """Judges a and b on m1 in one run and on m2 in another: each model's group is measured
    against the ids seen on the other model, and the sentence says they moved."""
    scores = {"c1": 50, "c2": 60, "c3": 70}
    runs = [
        [{"a": ("m1", scores), "b": ("m1", scores)}],
        [{"a": ("m2", scores), "b": ("m2", scores)}],
    ]
    groups = estimate_independence(runs).groups
    assert [g.model for g in groups] == ["m1", "m2"]
    for group in groups:
        assert group.reference == ("a", "b")
        sentence = group.sentence()
        assert "against  on" not in sentence and ", )" not in sentence
        assert "against a, b on other models (a, b also ran on another model" in sentence
