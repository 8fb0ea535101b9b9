"""Novelty: recent motifs from the generations CSV, the per-card penalty, and the
warn-and-continue loading of the history."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from image_project.artifacts.generations import (
    GENERATIONS_FIELDS,
    append_generation_row,
    read_recent_prompts,
)
from image_project.record.scoring import CardOptions, IdeaCard, Motif, NoveltyRecord
from image_project.stages.scoring.cards import card_text
from image_project.stages.scoring.novelty import (
    NoveltyState,
    NoveltySummary,
    load_novelty,
    novelty_penalty,
    recent_motifs,
)

PROMPTS = [
    "A lighthouse at sunset above a quiet harbor",
    "Lighthouse keeper watching the sunset from a meadow",
    "An old lighthouse, sunset glow over glacier ice",
    "Lighthouse beam cutting through forest fog",
    "Desert caravan crossing dunes under stars",
]

LOGGER = "image_project.scoring"


def motif(word: str, prompts: int, share: float) -> Motif:
    return Motif(word=word, prompts=prompts, share=share)


def _write_history(path: Path, prompts: list[str] = PROMPTS) -> Path:
    for i, prompt in enumerate(prompts):
        append_generation_row(
            path,
            {
                "generation_id": f"gen-{i}",
                "selected_concepts": ["Baroque", "Calm"],
                "final_image_prompt": prompt,
                "created_at": "2024-05-01T10:00:00Z",
            },
        )
    return path


@pytest.fixture
def history(tmp_path: Path) -> Path:
    return _write_history(tmp_path / "generations.csv")


# -- recent_motifs ---------------------------------------------------------------------


def test_motifs_from_the_history(history: Path) -> None:
    prompts = read_recent_prompts(history, 10)
    assert prompts == PROMPTS
    summary = recent_motifs(prompts)
    assert summary.rows == 5
    assert summary.motifs == (
        motif("lighthouse", 4, 0.8),
        motif("sunset", 3, 0.6),
    )
    assert summary.describe() == (
        "Motifs repeated across the last 5 images: lighthouse (4/5), sunset (3/5)."
    )


def test_motifs_are_deterministic(history: Path) -> None:
    first = recent_motifs(read_recent_prompts(history, 5))
    second = recent_motifs(read_recent_prompts(history, 5))
    assert first == second
    assert [m.model_dump() for m in first.motifs] == [m.model_dump() for m in second.motifs]


def test_window_keeps_only_the_last_rows(history: Path) -> None:
    last_two = read_recent_prompts(history, 2)
    assert last_two == PROMPTS[-2:]
    summary = recent_motifs(last_two)
    assert summary.rows == 2
    assert summary.motifs == ()
    assert summary.describe() == "No motif repeats across the last 2 images."

    last_three = recent_motifs(read_recent_prompts(history, 3))
    assert last_three.rows == 3
    assert last_three.motifs == (motif("lighthouse", 2, 0.667),)


def test_word_counts_once_per_prompt_and_format_words_ignored() -> None:
    summary = recent_motifs(
        [
            "Subject: owl owl owl. Lighting: soft. Composition: wide shot.",
            "Subject: owl. Lighting: hard. Composition: close shot.",
            "Subject: fox. Lighting: dim. Composition: wide shot.",
        ]
    )
    assert summary.motifs == (motif("owl", 2, 0.667), motif("wide", 2, 0.667))


def test_motifs_sorted_by_count_then_word_and_capped_at_12() -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    words += ["india", "juliet", "kilo", "lima", "mike", "november"]
    # The same words in both prompts, but never in the same order: fourteen motifs, not one.
    prompts = [" ".join(words), " ".join(reversed(words)), "zulu zulu", "zulu"]
    summary = recent_motifs(prompts)
    assert len(summary.motifs) == 12
    assert summary.motifs[0] == motif("alpha", 2, 0.5)
    assert [m.word for m in summary.motifs] == sorted([*words, "zulu"])[:12]


LONG_AND_SHORT = [
    "Misty coastal landscapes at dawn beside a brass orrery",
    "Brass orrery in a tram depot",
    "Misty coastal landscapes at dawn, paper kites",
    "Misty coastal landscapes at dawn; a brass orrery",
    "Glacier caves and paper kites",
]


def test_words_that_always_come_together_are_one_motif() -> None:
    summary = recent_motifs(LONG_AND_SHORT)
    assert summary.motifs == (
        motif("brass orrery", 3, 0.6),
        motif("misty coastal landscapes dawn", 3, 0.6),
        motif("paper kites", 2, 0.4),
    )
    assert "misty coastal landscapes dawn (3/5)" in summary.describe()


def test_a_long_phrase_and_a_short_one_repeated_equally_cost_the_same() -> None:
    summary = recent_motifs(LONG_AND_SHORT)
    long_phrase = novelty_penalty("Misty coastal landscapes at dawn", summary)
    short_phrase = novelty_penalty("A brass orrery", summary)
    assert long_phrase == (6.0, ("misty coastal landscapes dawn",))
    assert short_phrase == (6.0, ("brass orrery",))
    # Part of a phrase costs that part of it.
    assert novelty_penalty("Coastal landscapes", summary) == (
        3.0,
        ("misty coastal landscapes dawn",),
    )


def test_a_word_also_used_apart_stays_its_own_motif() -> None:
    prompts = [
        "Misty coastal landscapes at dawn",
        "Misty coastal landscapes at dawn",
        "Dawn over glacier caves",
        "Dawn in a tram depot",
    ]
    summary = recent_motifs(prompts)
    assert summary.motifs == (
        motif("dawn", 4, 1.0),
        motif("misty coastal landscapes", 2, 0.5),
    )
    assert novelty_penalty("misty coastal landscapes at dawn", summary) == (
        15.0,
        ("dawn", "misty coastal landscapes"),
    )


def test_words_in_the_same_prompts_but_apart_are_separate_motifs() -> None:
    summary = recent_motifs(["owl beside a river and a fox", "fox, river and owl", "moth"])
    assert [m.word for m in summary.motifs] == ["fox", "owl", "river"]


def test_a_word_is_frequent_in_at_least_min_share_of_the_prompts_and_two() -> None:
    """``max(2, ceil(min_share x rows))`` prompts: of 10 prompts, ``owl`` in 3 and ``fox`` in
    2 are both motifs at the default 0.2 (threshold 2), only ``owl`` at 0.3 (3), neither at
    0.31 (4); with 0 the floor of 2 still keeps a word of one prompt out."""
    prompts = ["owl", "owl", "owl", "fox", "fox", "moth", "a", "b", "c", "d"]
    assert [m.word for m in recent_motifs(prompts).motifs] == ["owl", "fox"]
    assert [m.word for m in recent_motifs(prompts, 0.3).motifs] == ["owl"]
    assert recent_motifs(prompts, 0.31).motifs == ()
    assert [m.word for m in recent_motifs(prompts, 0.0).motifs] == ["owl", "fox"]


def test_no_prompts() -> None:
    summary = recent_motifs([])
    assert summary.rows == 0
    assert summary.motifs == ()


# -- novelty_penalty -------------------------------------------------------------------


@pytest.fixture
def summary(history: Path) -> NoveltySummary:
    return recent_motifs(read_recent_prompts(history, 5))


@pytest.mark.parametrize(
    ("card", "penalty", "used"),
    [
        ("A lone lighthouse on a cliff", 8.0, ("lighthouse",)),
        ("LIGHTHOUSES? no: a Lighthouse!", 8.0, ("lighthouse",)),
        ("A sunset over the sea", 6.0, ("sunset",)),
        ("Sunset behind the lighthouse", 14.0, ("lighthouse", "sunset")),
        ("A fox in fresh snow", 0.0, ()),
        ("", 0.0, ()),
    ],
)
def test_penalty(summary: NoveltySummary, card: str, penalty: float, used: tuple[str, ...]) -> None:
    assert novelty_penalty(card, summary) == (penalty, used)


def test_a_cards_text_is_every_field_but_avoid() -> None:
    """The words a penalty looks for are the hook's, the narrative's and the options', never
    ``avoid``'s (a card that says it avoids a motif does not repeat it)."""
    card = IdeaCard(
        hook="harbor",
        narrative="lantern",
        options=CardOptions(
            composition=["orchard", "wide"],
            palette=["teal", "amber"],
            medium=["gouache"],
            mood=["wistful"],
        ),
        avoid=["lighthouse"],
    )
    words = ("harbor", "lantern", "orchard", "teal", "gouache", "wistful", "lighthouse")
    summary = NoveltySummary(rows=2, motifs=tuple(motif(w, 2, 1.0) for w in words))
    assert novelty_penalty(card_text(card), summary, 10.0, 250.0) == (60.0, words[:-1])


def test_penalty_is_capped_at_25() -> None:
    summary = NoveltySummary(
        rows=4,
        motifs=(
            motif("castle", 4, 1.0),
            motif("dragon", 4, 1.0),
            motif("moon", 3, 0.75),
        ),
    )
    assert novelty_penalty("castle dragon", summary) == (20.0, ("castle", "dragon"))
    assert novelty_penalty("moon over a castle, dragon asleep", summary) == (
        25.0,
        ("castle", "dragon", "moon"),
    )


def test_penalty_rounded_to_one_decimal() -> None:
    summary = NoveltySummary(rows=3, motifs=(motif("owl", 2, 0.667),))
    assert novelty_penalty("owl", summary) == (6.7, ("owl",))


# -- load_novelty ----------------------------------------------------------------------


def test_missing_history_warns_and_disables(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "nowhere" / "generations.csv"
    caplog.set_level(logging.WARNING, logger=LOGGER)
    state = load_novelty(True, 10, path)
    assert state.enabled is True
    assert state.used is False
    assert state.summary is None
    assert state.warning is not None
    assert str(path) in state.warning
    assert "FileNotFoundError" in state.warning
    records = [r for r in caplog.records if r.name == LOGGER]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert str(path) in records[0].getMessage()
    assert "FileNotFoundError" in records[0].getMessage()


@pytest.mark.parametrize(
    "content",
    [b"", (",".join(GENERATIONS_FIELDS) + "\r\n").encode(), b"\r\n\r\n"],
    ids=["zero-bytes", "header-only", "blank-lines"],
)
def test_empty_history_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    path = tmp_path / "generations.csv"
    path.write_bytes(content)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    state = load_novelty(True, 10, path)
    assert state.used is False
    assert state.enabled is True
    assert state.warning is not None
    assert str(path) in state.warning
    assert "ValueError" in state.warning
    assert [r.levelno for r in caplog.records if r.name == LOGGER] == [logging.WARNING]


def test_history_without_prompt_column_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "generations.csv"
    path.write_text("generation_id,selected_concepts\r\ngen-1,[]\r\n", encoding="utf-8")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    state = load_novelty(True, 10, path)
    assert state.used is False
    assert state.warning is not None
    assert "InputFileError" in state.warning
    assert "final_image_prompt" in state.warning
    assert str(path) in state.warning
    assert any(str(path) in r.getMessage() for r in caplog.records if r.name == LOGGER)


def test_history_not_utf8_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "generations.csv"
    path.write_bytes(b"generation_id,final_image_prompt\r\n1,caf\xe9\r\n")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    state = load_novelty(True, 10, path)
    assert state.used is False
    assert state.warning is not None
    assert "InputFileError" in state.warning
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1


def test_history_is_a_directory_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    state = load_novelty(True, 10, tmp_path)
    assert state.used is False
    assert state.warning is not None
    assert str(tmp_path) in state.warning


def test_disabled_is_quiet(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    state = load_novelty(False, 10, tmp_path / "missing.csv")
    assert state == NoveltyState(enabled=False, window=10)
    assert state.used is False
    assert state.warning is None
    assert [r for r in caplog.records if r.name == LOGGER] == []


def test_window_zero_is_quiet(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    state = load_novelty(True, 0, tmp_path / "missing.csv")
    assert state.used is False
    assert state.enabled is False
    assert state.warning is None
    assert [r for r in caplog.records if r.name == LOGGER] == []


def test_good_history_is_used(history: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    state = load_novelty(True, 5, history)
    assert state.used is True
    assert state.enabled is True
    assert state.warning is None
    assert state.summary is not None
    assert state.summary.rows == 5
    assert [m.word for m in state.summary.motifs] == ["lighthouse", "sunset"]
    assert [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING] == []


def test_window_applies_in_load_novelty(history: Path) -> None:
    state = load_novelty(True, 3, history)
    assert state.summary == NoveltySummary(rows=3, motifs=(motif("lighthouse", 2, 0.667),))


# -- NoveltyState.to_record -------------------------------------------------------------


def test_to_record_when_used(history: Path) -> None:
    record = load_novelty(True, 5, history).to_record()
    assert isinstance(record, NoveltyRecord)
    assert record.model_dump(mode="json") == {
        "enabled": True,
        "used": True,
        "window": 5,
        "rows": 5,
        "motifs": [
            {"word": "lighthouse", "prompts": 4, "share": 0.8},
            {"word": "sunset", "prompts": 3, "share": 0.6},
        ],
        "warning": None,
    }


def test_to_record_when_unavailable(tmp_path: Path) -> None:
    data = load_novelty(True, 7, tmp_path / "missing.csv").to_record().model_dump(mode="json")
    assert set(data) == {"enabled", "used", "window", "rows", "motifs", "warning"}
    assert data["enabled"] is True
    assert data["used"] is False
    assert data["window"] == 7
    assert data["rows"] == 0
    assert data["motifs"] == []
    assert isinstance(data["warning"], str)
    assert "FileNotFoundError" in data["warning"]
