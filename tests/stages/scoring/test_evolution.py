"""Multi-round selection, the pure parts: distances, near-duplicates, directives, variant
ids, survivors by code (quota, the farthest card for diversity, reasons from the numbers) and
the LLM selector's validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from image_project.config.loading import load_config
from image_project.config.models import SurvivorQuota
from image_project.errors import ConfigError
from image_project.record.scoring import CardOptions, IdeaCard, ScoreRow
from image_project.stages.scoring.evolution import (
    MUTATION_AXES,
    SelectorAnswer,
    card_distance,
    code_survivors,
    directive_for,
    drop_near_duplicates,
    selector_output,
    variant_ids,
)

REPO = Path(__file__).resolve().parents[3]


def card(words: str, extra: str = "") -> IdeaCard:
    return IdeaCard(
        hook=f"{words} hook",
        narrative=f"{words} narrative {extra}".strip(),
        options=CardOptions(
            composition=[f"{words} layout", "wide"],
            palette=[f"{words} palette", "dusk"],
            medium=["oil"],
            mood=["calm"],
        ),
    )


def row(card_id: str, scores: dict[str, int]) -> ScoreRow:
    values = sorted(scores.values())
    median = values[len(values) // 2]
    return ScoreRow(
        id=card_id,
        judge_scores=scores,
        median=median,
        aggregate=median,
        spread=values[-1] - values[0],
        n_ok=len(values),
        effective_score=float(median),
    )


def test_distance_is_zero_for_the_same_words_and_one_for_none_shared() -> None:
    a = card("lighthouse keeper storm")
    assert card_distance(a, a) == 0.0
    b = IdeaCard(
        hook="quiet orchard",
        narrative="apples falling",
        options=CardOptions(
            composition=["aerial", "close"], palette=["green", "gold"], medium=["ink"], mood=["joy"]
        ),
    )
    assert card_distance(a, b) == 1.0
    assert 0.0 < card_distance(a, card("lighthouse keeper calm")) < 1.0


def test_near_duplicates_are_dropped_naming_the_nearest_candidate() -> None:
    cards = {
        "A": card("lighthouse keeper storm"),
        "G": card("lighthouse keeper storm", "again"),  # nearly A
        "H": card("orchard harvest dawn"),
        "I": card("orchard harvest dawn"),  # a copy of H
    }
    kept = drop_near_duplicates(["A"], ["G", "H", "I"], cards, threshold=0.2)
    assert kept.ids == ("H",)
    assert kept.dropped["G"].of == "A" and kept.dropped["G"].distance < 0.2
    assert kept.dropped["I"].of == "H" and kept.dropped["I"].distance == 0.0
    # A threshold of 0 drops nothing.
    assert drop_near_duplicates(["A"], ["G", "H", "I"], cards, 0.0).ids == ("G", "H", "I")


def test_directives_are_derived_and_name_at_least_two_axes() -> None:
    seen = set()
    for card_id in "GHIJKLMN":
        directive = directive_for(7, 1, card_id)
        assert directive == directive_for(7, 1, card_id)
        axes = [a for a in MUTATION_AXES if a in directive]
        assert len(axes) >= 2
        seen.add(directive)
    assert len(seen) > 1
    assert directive_for(7, 1, "G") != directive_for(7, 2, "G") or directive_for(
        7, 1, "H"
    ) != directive_for(7, 2, "H")


def test_variant_ids_are_unique_across_rounds_and_follow_round_zero() -> None:
    rounds = [variant_ids(6, 3, 2, r) for r in (1, 2, 3)]
    assert rounds[0] == ("G", "H", "I", "J", "K", "L")
    flat = [i for ids in rounds for i in ids]
    assert len(flat) == len(set(flat)) == 18
    assert not set(flat) & set("ABCDEF")


def test_quota_deals_one_per_category_then_performance() -> None:
    quota = SurvivorQuota()
    assert quota.categories(1) == ("performance",)
    assert quota.categories(3) == ("performance", "diversity", "potential")
    assert quota.categories(5)[3:] == ("performance", "performance")
    assert SurvivorQuota(performance=2, diversity=0, potential=1).categories(3) == (
        "performance",
        "potential",
        "performance",
    )


def test_code_survivors_honour_the_quota_and_pick_the_farthest_card_for_diversity() -> None:
    cards = {
        "A": card("lighthouse keeper storm"),
        "B": card("lighthouse keeper calm"),  # close to A
        "C": card("orchard harvest dawn"),  # far from A
        "D": card("lighthouse keeper night"),
        "E": card("lighthouse keeper fog"),
    }
    table = [
        row("A", {"j1": 90, "j2": 88, "j3": 86}),
        row("B", {"j1": 85, "j2": 84, "j3": 83}),
        row("C", {"j1": 80, "j2": 82, "j3": 84}),
        row("D", {"j1": 40, "j2": 97, "j3": 50}),  # below the median, one high score
        row("E", {"j1": 30, "j2": 31, "j3": 32}),
    ]
    survivors = code_survivors(table, cards, SurvivorQuota().categories(3))
    assert [(s.id, s.category) for s in survivors] == [
        ("A", "performance"),
        ("C", "diversity"),  # B scores higher, but C is the farthest from A
        ("D", "potential"),  # the highest single judge score among the rest
    ]
    assert all(s.proposed_by == "code" for s in survivors)
    assert "highest median 88" in survivors[0].reason and "j1 90" in survivors[0].reason
    far = card_distance(cards["C"], cards["A"])
    assert f"{far:.2f}" in survivors[1].reason
    assert max(card_distance(cards[i], cards["A"]) for i in "BC") == far
    assert "97 from j2" in survivors[2].reason
    # Never more survivors than candidates, never one twice.
    few = code_survivors(table[:2], cards, SurvivorQuota().categories(3))
    assert [s.id for s in few] == ["A", "B"]


def test_diversity_only_looks_at_or_above_the_round_median() -> None:
    """D is the farthest card from A but below the round's median effective score (82), so
    diversity takes B, the farthest of those at or above it."""
    cards = {
        "A": card("lighthouse keeper storm"),
        "B": card("lighthouse orchard harvest"),
        "C": card("lighthouse keeper calm"),
        "D": card("volcano glacier desert"),
        "E": card("lighthouse keeper fog"),
    }
    table = [
        row("A", {"j1": 90, "j2": 88, "j3": 86}),
        row("B", {"j1": 85, "j2": 84, "j3": 83}),
        row("C", {"j1": 80, "j2": 82, "j3": 84}),
        row("D", {"j1": 40, "j2": 50, "j3": 45}),
        row("E", {"j1": 30, "j2": 31, "j3": 32}),
    ]
    distance = {i: card_distance(cards[i], cards["A"]) for i in "BCD"}
    assert distance["D"] > distance["B"] > distance["C"]
    survivors = code_survivors(table, cards, ("performance", "diversity"))
    assert [s.id for s in survivors] == ["A", "B"]
    assert "median 84 >= round median 82" in survivors[1].reason


def test_potential_breaks_a_tie_of_top_scores_by_the_widest_spread() -> None:
    """P and Q share the highest single score, 90; Q's scores spread wider, so Q is the
    potential survivor although P ranks higher."""
    cards = {"P": card("paper kites"), "Q": card("brass orrery")}
    table = [row("P", {"j1": 90, "j2": 85, "j3": 88}), row("Q", {"j1": 90, "j2": 60, "j3": 70})]
    (survivor,) = code_survivors(table, cards, ("potential",))
    assert survivor.id == "Q"
    assert "spread 30" in survivor.reason


def test_selector_answers_are_validated_against_ids_counts_and_categories() -> None:
    output = selector_output(["A", "B", "C"], ("performance", "diversity"))

    def answer(*picks: tuple[str, str]) -> str:
        return json.dumps(
            {
                "selections": [{"id": i, "category": c, "reason": "because"} for i, c in picks],
                "summary": "two kept",
            }
        )

    good = output.parse(answer(("A", "performance"), ("C", "diversity")))
    assert isinstance(good, SelectorAnswer) and [p.id for p in good.selections] == ["A", "C"]
    with pytest.raises(ValueError, match=r"selections\.1\.id"):
        output.parse(answer(("A", "performance"), ("Z", "diversity")))
    with pytest.raises(ValueError, match="more than once"):
        output.parse(answer(("A", "performance"), ("A", "diversity")))
    with pytest.raises(ValueError, match="categories must be exactly"):
        output.parse(answer(("A", "performance"), ("B", "performance")))
    with pytest.raises(ValueError):
        output.parse(answer(("A", "performance")))
    assert output.schema.name == "survivor_selection"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("prompt.scoring.evolution.survivors=7", "prompt.scoring.evolution.survivors"),
        ("prompt.scoring.evolution.survivors=0", "prompt.scoring.evolution.survivors"),
        ("prompt.scoring.evolution.generations=11", "prompt.scoring.evolution.generations"),
        (
            "prompt.scoring.evolution.variants_per_survivor=0",
            "prompt.scoring.evolution.variants_per_survivor",
        ),
        ("prompt.scoring.evolution.selector=judge", "prompt.scoring.evolution.selector"),
        ("prompt.scoring.evolution.quota.diversity=-1", "prompt.scoring.evolution.quota.diversity"),
        (
            "prompt.scoring.evolution.near_duplicate_distance=2",
            "prompt.scoring.evolution.near_duplicate_distance",
        ),
        ("prompt.scoring.evolution.keep_parents=maybe", "prompt.scoring.evolution.keep_parents"),
    ],
)
def test_config_errors_name_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(
            root=REPO, env={}, overrides=["prompt.scoring.evolution.enabled=true", override]
        )
    assert key in str(info.value)
