"""The run log's formatter writes exactly what the standard formatter with the same format
writes, though it formats each second's date and time of day once."""

from __future__ import annotations

import logging

from hypothesis import given
from hypothesis import strategies as st

from image_project.run.log import RunLogFormatter


def record(created: float, message: str) -> logging.LogRecord:
    rec = logging.LogRecord("image_project.engine", logging.DEBUG, __file__, 1, message, (), None)
    rec.created = created
    rec.msecs = int((created - int(created)) * 1000) + 0.0
    return rec


@given(
    st.lists(
        st.tuples(st.floats(1.7e9, 1.7e9 + 5, allow_nan=False), st.text(max_size=20)),
        min_size=1,
        max_size=30,
    )
)
def test_the_lines_are_the_standard_formatters(lines: list[tuple[float, str]]) -> None:
    ours, standard = RunLogFormatter(), logging.Formatter(RunLogFormatter.FORMAT)
    for created, message in sorted(lines):  # a log's records come in time order
        assert ours.format(record(created, message)) == standard.format(record(created, message))


def test_a_record_of_another_second_gets_its_own_time_of_day() -> None:
    formatter = RunLogFormatter()
    first = formatter.format(record(1_700_000_000.250, "a"))
    second = formatter.format(record(1_700_000_001.5, "b"))
    assert first.split(" | ")[0].endswith(",250")
    assert first.split(" | ")[0][:19] != second.split(" | ")[0][:19]
