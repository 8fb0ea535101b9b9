"""SIGINT and SIGTERM while a batch runs: the first one stops the batch, a second one quits
the process at once (:class:`Interrupts`).

The first signal is handed to the event loop (``call_soon_threadsafe``: the handler runs in
the main thread between two bytecodes, possibly inside the loop's own code, so it does
nothing there but schedule the stop), where :meth:`Batch.stop <.batch.Batch.stop>` cancels
the runs in flight; they write their transcripts and the process exits 128 + the signal.

A second signal, at any moment after the first (the runs still stopping, the records of a
run being written in a worker thread, the interpreter waiting for its worker threads at
exit), ends the process there and then: one line on stderr, exit 128 + the signal number,
no traceback, nothing else run (``os._exit``). It used to restore Python's default handler,
whose ``KeyboardInterrupt`` landed wherever the main thread was: inside a task (``Task
exception was never retrieved``) or in the interpreter's shutdown, which then waited for
ever for idle AnyIO worker threads that nobody stopped. Quitting at once may cut a run's
records phase short exactly as ``kill -9`` would; its writes are ordered so that what it
leaves is found and repaired (docs/reliability.md, "Killed while writing records").

The handlers stay in place after the batch once a signal came, so a second one during the
exit quits too; without a signal they are put back as they were.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


RUNS_LEFT = "`image-project runs list` names anything a run in flight left"


def quit_now_line(signum: int, left: str = RUNS_LEFT) -> str:
    """The one line a second signal prints before the process ends; ``left`` says what
    becomes of the runs in flight."""
    name = signal.Signals(signum).name
    return f"{name} again: quitting at once (exit {128 + signum}); {left}"


class Interrupts:
    """The process's SIGINT / SIGTERM handlers while a batch runs (main thread only).

    ``stop`` is called in the event loop with the first signal's number; ``left`` ends the
    second signal's line (:func:`quit_now_line`)."""

    def __init__(self, stop: Callable[[int], None], left: str = RUNS_LEFT) -> None:
        self._stop = stop
        self._left = left
        self.first: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> bool:
        """Put the handlers in place; False (nothing done) outside the main thread or
        without a running asyncio loop, where signals are not this process's to handle."""
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        for sig in INTERRUPT_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return True

    def restore(self) -> None:
        """Put the previous handlers back, unless a signal came (then a second one must
        still quit at once while the process exits)."""
        if self.first is not None:
            # The interpreter's last steps (after it has waited for its threads and run the
            # exit hooks) reset the handlers to the default action: a second signal there
            # would end the process by the signal rather than with its exit code. Nothing is
            # left that could hang by then, so from that point a late signal is ignored.
            atexit.register(_ignore_late_signals)
            return
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.first is not None:
            _quit_now(signum, self._left)
        self.first = signum
        loop = self._loop
        if loop is None or loop.is_closed():
            _quit_now(signum, self._left)  # no batch left to stop: this one ends the process
        else:
            loop.call_soon_threadsafe(self._stop, signum)


def _ignore_late_signals() -> None:
    for sig in INTERRUPT_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def _quit_now(signum: int, left: str) -> None:
    """One line, what is buffered for stdout, and the end of the process."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, RuntimeError):  # closed, or reentrant
            stream.flush()
    with contextlib.suppress(OSError):
        os.write(2, (quit_now_line(signum, left) + "\n").encode())
    os._exit(128 + signum)
