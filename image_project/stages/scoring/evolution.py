"""Multi-round selection: pure code for variants, near-duplicates and survivors.

Round 0 is the ordinary card set. Each later round breeds ``variants_per_survivor`` variants
of every survivor of the previous round; each variant gets a derived seed and a derived
**mutation directive** naming at least two axes of the card to change (:func:`directive_for`).
Variant ids continue the card letters and each round owns a fixed block of them
(:func:`variant_ids`), so ids are unique across rounds and never depend on how many
survivors a round actually had.

Before judging, a variant whose token-set Jaccard distance (:func:`card_distance`, over
hook, narrative and options) to a candidate already in its round is below the threshold is
dropped (:func:`drop_near_duplicates`): judge calls are the expensive part.

Survivors by code (:func:`code_survivors`), one category at a time in the quota's order:

* ``performance``: the best-ranked candidate not chosen yet (ranking: effective score, then
  the aggregate, then the id, as the final selector ranks);
* ``diversity``: among the candidates at or above the round's median effective score, the one
  whose distance to the survivors already chosen (the nearest of them) is largest;
* ``potential``: among the rest, the highest single judge score, then the widest spread.

Every survivor gets a reason built from the numbers.

The LLM selector's proposal (:func:`selector_output`) must name each id at most once, fill
the quota, and give each pick a reason that mentions its card (the ``selector_reason``
gate, :func:`card_mentions`): a word of the card or one of its numbers in the round's table.
"""

from __future__ import annotations

import functools
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints, create_model

from image_project.engine.output import JsonOutput, list_of, literal_of
from image_project.record.base import RecordModel
from image_project.record.gates import gate_error
from image_project.record.scoring import (
    IdeaCard,
    NearDuplicate,
    ScoreRow,
    Survivor,
    SurvivorCategory,
)
from image_project.seeding import rng_for
from image_project.stages.scoring.cards import card_ids, card_text
from image_project.stages.scoring.hints import content_tokens

MUTATION_AXES: tuple[str, ...] = ("composition", "palette", "medium", "mood", "setting")
"""What a mutation directive may ask a variant to change."""

_TOKEN = re.compile(r"[a-z0-9]+")


def card_tokens(card: IdeaCard) -> frozenset[str]:
    """The card's words (lower case, three letters or more) from hook, narrative and
    options: what near-duplicates and diversity are measured on."""
    return frozenset(t for t in _TOKEN.findall(card_text(card).lower()) if len(t) >= 3)


def card_distance(a: IdeaCard, b: IdeaCard) -> float:
    """Token-set Jaccard distance in [0, 1]: 0 for the same words, 1 for none shared."""
    return _distance(card_tokens(a), card_tokens(b))


def _distance(ta: frozenset[str], tb: frozenset[str]) -> float:
    union = ta | tb
    if not union:
        return 0.0
    return round(1.0 - len(ta & tb) / len(union), 4)


def variant_ids(num_ideas: int, survivors: int, variants: int, round_index: int) -> tuple[str, ...]:
    """Round ``round_index``'s (>= 1) block of ``survivors * variants`` ids: the card letters
    after round 0's ``num_ideas`` and the earlier rounds' blocks. Slot ``s * variants + v`` is
    variant ``v`` of the ``s``-th survivor."""
    block = survivors * variants
    start = num_ideas + (round_index - 1) * block
    return card_ids(start + block)[start:]


def directive_for(run_seed: int, round_index: int, card_id: str) -> str:
    """The mutation directive of one variant: two or three axes, derived from the run seed."""
    rng = rng_for(run_seed, "mutation_directive", round_index, card_id)
    count = rng.choice((2, 3))
    axes = sorted(rng.sample(MUTATION_AXES, count), key=MUTATION_AXES.index)
    named = ", ".join(axes[:-1]) + f" and {axes[-1]}"
    return (
        f"change the {named} decisively (at least these {count} axes); keep the core idea "
        "recognisable"
    )


@dataclass(frozen=True)
class Kept:
    """The candidates of a round that go to the judges, in declared order, and the variants
    dropped as near-duplicates."""

    ids: tuple[str, ...]
    dropped: Mapping[str, NearDuplicate]


def drop_near_duplicates(
    parents: Sequence[str],
    variants: Sequence[str],
    cards: Mapping[str, IdeaCard],
    threshold: float,
) -> Kept:
    """Keep every parent, then each variant (in declared order) unless its distance to a
    parent or to an earlier kept variant is below ``threshold``; it is then dropped, naming
    the nearest such candidate. Parents are compared against even when they are not judged
    again (``keep_parents: false``): a copy of its parent is no variant."""
    kept: list[str] = []
    compare: list[str] = list(parents)
    dropped: dict[str, NearDuplicate] = {}
    tokens = {card_id: card_tokens(cards[card_id]) for card_id in (*parents, *variants)}
    for card_id in variants:
        nearest = min(
            ((_distance(tokens[card_id], tokens[other]), other) for other in compare),
            default=None,
        )
        if nearest is not None and nearest[0] < threshold:
            dropped[card_id] = NearDuplicate(
                of=nearest[1], distance=nearest[0], threshold=threshold
            )
            continue
        kept.append(card_id)
        compare.append(card_id)
    return Kept(ids=tuple(kept), dropped=dropped)


# --------------------------------------------------------------------------- survivors


def ranked(table: Sequence[ScoreRow]) -> list[ScoreRow]:
    """The rows best first, as the final selector ranks them."""
    return sorted(table, key=lambda r: (-r.effective_score, -r.aggregate, r.id))


def _number(value: float) -> str:
    return f"{value:g}"


def _scores(row: ScoreRow) -> str:
    return ", ".join(f"{j} {s}" for j, s in row.judge_scores.items())


def _with_penalty(row: ScoreRow) -> str:
    if not row.novelty_penalty:
        return ""
    return f", effective {_number(row.effective_score)} after novelty penalty " + _number(
        row.novelty_penalty
    )


def _performance(rows: list[ScoreRow], chosen: list[str], label: str) -> tuple[ScoreRow, str]:
    place = next(i for i, r in enumerate(rows) if r.id not in chosen)
    row = rows[place]
    lead = f"highest {label}" if place == 0 else f"{label} rank {place + 1}"
    return row, f"{lead} {_number(row.aggregate)} ({_scores(row)}){_with_penalty(row)}"


def _diversity(
    rows: list[ScoreRow], chosen: list[str], cards: Mapping[str, IdeaCard], label: str
) -> tuple[ScoreRow, str]:
    median = statistics.median(r.effective_score for r in rows)
    pool = [r for r in rows if r.id not in chosen and r.effective_score >= median]
    if not pool:
        pool = [r for r in rows if r.id not in chosen]
    reference = chosen or [rows[0].id]

    def nearest(row: ScoreRow) -> tuple[float, str]:
        return min((card_distance(cards[row.id], cards[o]), o) for o in reference)

    best = max(pool, key=lambda r: nearest(r)[0])  # max() keeps the best-ranked on a tie
    distance, to = nearest(best)
    return best, (
        f"farthest from {', '.join(reference)}: distance {distance:.2f} to {to} (token-set "
        f"Jaccard), {label} {_number(best.aggregate)} >= round median {_number(median)}"
        if best.effective_score >= median
        else f"farthest from {', '.join(reference)}: distance {distance:.2f} to {to}, "
        f"{label} {_number(best.aggregate)} (no unchosen card at or above the round median "
        f"{_number(median)})"
    )


def _potential(rows: list[ScoreRow], chosen: list[str], label: str) -> tuple[ScoreRow, str]:
    pool = [r for r in rows if r.id not in chosen]
    best = max(pool, key=lambda r: (max(r.judge_scores.values()), r.spread))
    top_judge, top = max(best.judge_scores.items(), key=lambda kv: kv[1])
    return best, (
        f"highest single judge score among the rest: {top} from {top_judge} (spread "
        f"{best.spread}, {label} {_number(best.aggregate)})"
    )


def code_survivors(
    table: Sequence[ScoreRow],
    cards: Mapping[str, IdeaCard],
    categories: Sequence[SurvivorCategory],
    *,
    label: str = "median",
) -> tuple[Survivor, ...]:
    """The survivors of a round by code (see the module docstring): one per category in
    ``categories`` order, at most one per candidate (fewer when the round has fewer
    candidates). ``label`` names the aggregate in the reasons."""
    rows = ranked(table)
    chosen: list[str] = []
    out: list[Survivor] = []
    for category in categories[: len(rows)]:
        if category == "performance":
            row, reason = _performance(rows, chosen, label)
        elif category == "diversity":
            row, reason = _diversity(rows, chosen, cards, label)
        else:
            row, reason = _potential(rows, chosen, label)
        chosen.append(row.id)
        out.append(Survivor(id=row.id, category=category, reason=reason, proposed_by="code"))
    return tuple(out)


# --------------------------------------------------------------------------- llm selector

SELECTOR_SCHEMA = "survivor_selection"


class SelectorPick(RecordModel):
    """One survivor the selector model proposes."""

    model_config = ConfigDict(strict=True)

    id: str
    category: SurvivorCategory
    reason: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=400)]


class SelectorAnswer(RecordModel):
    """The selector model's answer: ``{"selections": [{id, category, reason}], "summary"}``."""

    model_config = ConfigDict(title=SELECTOR_SCHEMA, strict=True)

    selections: list[SelectorPick]
    summary: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=600)]


@functools.lru_cache(maxsize=256)
def _selector_model(ids: tuple[str, ...], count: int) -> type[SelectorAnswer]:
    pick = create_model("SelectorPick", __base__=SelectorPick, id=(literal_of(ids), ...))
    return create_model(
        "SelectorAnswer",
        __base__=SelectorAnswer,
        selections=(list_of(pick), Field(min_length=count, max_length=count)),
    )


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _numbers(text: str) -> set[str]:
    return {f"{float(n):g}" for n in _NUMBER.findall(text)}


def _mentioned(text: str) -> set[str]:
    return {t for t in content_tokens(text) if len(t) >= 3} | _numbers(text)


def card_mentions(row: ScoreRow, card: IdeaCard) -> frozenset[str]:
    """What a reason may mention to be about this card: its content words (three letters or
    more, stopwords aside) and its numbers in the round's table (aggregate, median,
    effective score, each judge's score), numbers written as ``f"{value:g}"``."""
    numbers = [row.aggregate, row.median, row.effective_score, *row.judge_scores.values()]
    return frozenset(_mentioned(card_text(card)) | {f"{float(n):g}" for n in numbers})


def selector_output(
    ids: Sequence[str],
    categories: Sequence[SurvivorCategory],
    mentions: Mapping[str, frozenset[str]] | None = None,
) -> JsonOutput[SelectorAnswer]:
    """The selector's output for a round whose candidates are ``ids`` and whose survivors
    must fill ``categories``: known ids (an ``enum`` in the schema), exactly
    ``len(categories)`` selections, each id at most once, and as many of each category as
    the quota gives. Anything else is a ``ValueError`` (re-asked). With ``mentions`` (each
    id's :func:`card_mentions`) every reason must share a word or number with its card's,
    else the gate ``selector_reason`` re-asks."""
    wanted = Counter(categories)

    def check(answer: SelectorAnswer) -> SelectorAnswer:
        picked = [p.id for p in answer.selections]
        twice = sorted({i for i in picked if picked.count(i) > 1})
        if twice:
            raise ValueError(f"id(s) {twice} selected more than once; select each id at most once")
        got = Counter(p.category for p in answer.selections)
        if got != wanted:
            want = ", ".join(f"{c} x{n}" for c, n in sorted(wanted.items()))
            have = ", ".join(f"{c} x{n}" for c, n in sorted(got.items()))
            raise ValueError(f"categories must be exactly {want}; got {have}")
        if mentions is not None:
            vague = [
                f"the reason for {p.id} mentions nothing of card {p.id}"
                for p in answer.selections
                if not _mentioned(p.reason) & mentions.get(p.id, frozenset())
            ]
            if vague:
                raise gate_error(
                    "selector_reason",
                    "; ".join(vague) + "; give each pick a reason about its own card: what "
                    "it shows (its words) or its scores",
                )
        return answer

    return JsonOutput(_selector_model(tuple(ids), len(categories)), check=check)
