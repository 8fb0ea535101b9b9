"""The per-run log file next to the transcript (:class:`RunLog`), attached to the package
logger for the run and written through its own buffer.

Several runs of one batch (``run.parallel``) are in flight in one process, and every log
record goes through the one package logger. Each run therefore marks its task (a context
variable: every task and worker thread it starts inherits it) and its log file takes only
the records emitted in its own context, plus those of no run (the batch's own).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from image_project.artifacts.pending import lock_file

if TYPE_CHECKING:
    pass


_CURRENT_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "image_project_run", default=None
)


class _OwnRun(logging.Filter):
    """Passes the records emitted in run ``run_id``'s context or in no run's."""

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def filter(self, record: logging.LogRecord) -> bool:
        current = _CURRENT_RUN.get()
        return current is None or current == self.run_id


class BufferedFileHandler(logging.FileHandler):
    """A log file written through the file's own buffer: no flush (a system call) per record,
    only for a WARNING or worse (so a problem is on disk at once) and on close."""

    def flush(self) -> None:
        return None

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        if record.levelno >= logging.WARNING:
            super().flush()

    def close(self) -> None:
        super().flush()
        super().close()


class RunLogFormatter(logging.Formatter):
    """The run log's line format, with the timestamp's date and time of day formatted once
    per second rather than once per record: a run writes lines for every step in bursts, and
    ``time.localtime`` (which may read the zone file on each call) and ``strftime`` were most
    of a line's cost. The text is the standard formatter's, milliseconds included."""

    FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"

    def __init__(self) -> None:
        super().__init__(self.FORMAT)
        self._second = -1
        self._stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            self._stamp = time.strftime(self.default_time_format, self.converter(second))
            self._second = second
        return f"{self._stamp},{int(record.msecs):03d}"  # default_msec_format: "%s,%03d"


class RunLog:
    """A per-run log file next to the transcript, attached to the package logger."""

    _open = 0  # run logs open in this process
    _saved_level = logging.NOTSET

    def __init__(self, path: Path, run_id: str | None = None) -> None:
        """``run_id`` marks the calling task as that run's (see the module docstring): its
        log takes only its own records. None: every record (one run at a time)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.handler = BufferedFileHandler(path, encoding="utf-8")
        # Held while the run lives: a log nobody holds with no transcript beside it is a run
        # that ended without one (image_project.artifacts.pending.runs_without_transcript).
        if self.handler.stream is not None:
            lock_file(self.handler.stream.fileno())
        self._token: contextvars.Token[str | None] | None = None
        if run_id is not None:
            self.handler.addFilter(_OwnRun(run_id))
            self._token = _CURRENT_RUN.set(run_id)
        self.handler.setLevel(logging.DEBUG)
        self.handler.setFormatter(RunLogFormatter())
        self.root = logging.getLogger("image_project")
        # Runs in flight together: the level is saved by the first to open and put back by
        # the last to close, so no run's log loses its DEBUG lines to another's end.
        if not RunLog._open:
            RunLog._saved_level = self.root.level
        RunLog._open += 1
        self.previous_level = RunLog._saved_level
        self.root.addHandler(self.handler)
        if self.root.level == logging.NOTSET or self.root.level > logging.DEBUG:
            self.root.setLevel(logging.DEBUG)

    def close(self) -> None:
        if self.handler in self.root.handlers:
            self.root.removeHandler(self.handler)
            RunLog._open -= 1
            if not RunLog._open:
                self.root.setLevel(self.previous_level)
        self.handler.close()
        if self._token is not None:
            # Closed from another context (which ends anyway): nothing to put back.
            with contextlib.suppress(ValueError):
                _CURRENT_RUN.reset(self._token)
            self._token = None
