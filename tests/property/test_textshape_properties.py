"""Property test of the repetition-loop gate (``image_project.record.textshape``).

The contract: :func:`repetition_loop` reports the shortest phrase said back to back often
enough (twice from :data:`LOOP_MIN_WORDS` words, :data:`LOOP_SHORT_REPEATS` times below),
the earliest of that length, quoted. The reference below states it directly (every phrase
length, every start, the repeated slices compared); the gate's own search must agree with it
on any text, loops and not, of a small vocabulary (so that loops of every length occur).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from image_project.record.textshape import (
    LOOP_MAX_WORDS,
    LOOP_MIN_WORDS,
    LOOP_SHORT_REPEATS,
    repetition_loop,
    words,
)


def reference_loop(text: str) -> str | None:
    ws = words(text)
    n = len(ws)
    for size in range(1, min(n // 2, LOOP_MAX_WORDS) + 1):
        need = 2 if size >= LOOP_MIN_WORDS else LOOP_SHORT_REPEATS
        for start in range(n - size * need + 1):
            phrase = ws[start : start + size]
            if all(ws[start + k * size : start + (k + 1) * size] == phrase for k in range(need)):
                said = " ".join(phrase)
                return f"{' '.join([said] * need)!r} repeats {said!r} {need} times in a row"
    return None


VOCAB = st.sampled_from(["the", "of", "Light", "light,", "sea", "x-ray", "it's", "—", "3"])


@given(st.lists(VOCAB, max_size=80), st.lists(VOCAB, min_size=1, max_size=35), st.integers(0, 5))
def test_the_loop_found_is_the_shortest_then_earliest(
    head: list[str], phrase: list[str], times: int
) -> None:
    text = " ".join(head + phrase * times)
    assert repetition_loop(text) == reference_loop(text)


def test_a_loop_longer_than_the_longest_phrase_looked_for_is_not_reported() -> None:
    phrase = " ".join(f"w{i}" for i in range(LOOP_MAX_WORDS + 1))
    assert repetition_loop(f"{phrase} {phrase}") is None
    assert reference_loop(f"{phrase} {phrase}") is None
