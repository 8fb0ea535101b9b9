"""What a batch shows while it runs (:class:`BatchProgress`): one line per run state change
and an overall ``k/N done, m failed, ETA`` line on stderr, or, when stderr is a terminal, a
real progress bar (tqdm) with the lines printed above it. ``-q`` keeps only the summaries and
the errors. One run at a time (``run.parallel: 1``) shows what it always did: each run's
step lines under a ``== run i of N`` header, no overall line.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO


def eta_text(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``: a rough remaining time."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class BatchProgress:
    """The batch's lines on ``err`` (stderr), its summaries on ``out`` (stdout).

    ``together``: runs may be in flight together (run lines carry a ``[run i/N]`` prefix and
    the overall line is shown); ``bar`` None means a bar exactly when ``err`` is a terminal.
    """

    def __init__(
        self,
        total: int,
        *,
        quiet: bool,
        together: bool,
        out: TextIO | None = None,
        err: TextIO | None = None,
        bar: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.quiet = quiet
        self.together = together
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.failed = 0
        self.interrupted = 0
        self.output_closed = False
        """The reader of stdout or stderr went away (a closed pipe)."""
        self.on_closed: Callable[[], None] | None = None
        if bar is None:
            bar = together and not quiet and _isatty(self.err)
        self._bar: Any = None  # a tqdm bar (tqdm is untyped)
        if bar:
            from tqdm import tqdm

            self._bar = tqdm(total=total, file=self.err, unit="run", dynamic_ncols=True)

    def prefix(self, number: int) -> str:
        return f"[run {number}/{self.total}] " if self.together else ""

    def line(self, text: str) -> None:
        """A progress line (nothing with ``-q``)."""
        if not self.quiet:
            self._write(text, self.err)

    def error(self, text: str) -> None:
        """An error line: shown with ``-q`` too."""
        self._write(text, self.err)

    def summary(self, text: str) -> None:
        """A run's summary or the batch's closing count, on stdout."""
        self._write(text, self.out)

    def run_ended(self, number: int, what: str, outcome: str) -> None:
        """Run ``number`` is over (``outcome``: ok, failed or interrupted; ``what`` says how):
        its line, then the overall line."""
        self.done += 1
        self.failed += outcome == "failed"
        self.interrupted += outcome == "interrupted"
        if not self.together:
            return
        self.line(f"{self.prefix(number)}{what}")
        if self._bar is not None:
            self._bar.set_postfix_str(self._counts(), refresh=False)
            self._bar.update(1)
        else:
            self.line(self.overall())

    def overall(self) -> str:
        """``k/N done, m failed, ETA 41s`` (no ETA once every run is done or after an
        interrupt)."""
        text = f"{self.done}/{self.total} done, {self._counts()}"
        left = self.total - self.done
        if self.done and left and not self.interrupted:
            per_run = (self.clock() - self.started) / self.done
            text += f", ETA {eta_text(per_run * left)}"
        return text

    def _counts(self) -> str:
        text = f"{self.failed} failed"
        return text + (f", {self.interrupted} interrupted" if self.interrupted else "")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _write(self, text: str, stream: TextIO) -> None:
        try:
            if self._bar is not None:
                with self._bar.external_write_mode(file=self.err):
                    _write_line(text, stream)
            else:
                _write_line(text, stream)
        except BrokenPipeError:
            self._closed(stream)

    def _closed(self, stream: TextIO) -> None:
        """The reader of ``stream`` went away (``image-project | head -1``): what is still
        to be written there goes to /dev/null (the interpreter's last flush included), the
        bar is dropped, and ``on_closed`` is told once (the batch starts no more runs; the
        runs in flight finish and write their records; the exit status is 141)."""
        silence(stream)
        self._bar = None
        if not self.output_closed:
            self.output_closed = True
            if self.on_closed is not None:
                self.on_closed()


def silence(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at /dev/null, so that writing to it, and flushing
    what its buffer still holds, cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _write_line(text: str, stream: TextIO) -> None:
    """The line and its newline in one write: ``print`` writes them apart, and a second
    Ctrl-C handled between the two would print its own line after a line left open."""
    stream.write(text + "\n")
    stream.flush()
