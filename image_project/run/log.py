"""The per-run log file next to the transcript (:class:`RunLog`), attached to the package
logger for the run and written through its own buffer.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


__all__ = ["BufferedFileHandler", "RunLog"]


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


class RunLog:
    """A per-run log file next to the transcript, attached to the package logger."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.handler = BufferedFileHandler(path, encoding="utf-8")
        self.handler.setLevel(logging.DEBUG)
        self.handler.setFormatter(
            logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s")
        )
        self.root = logging.getLogger("image_project")
        self.previous_level = self.root.level
        self.root.addHandler(self.handler)
        if self.root.level == logging.NOTSET or self.root.level > logging.DEBUG:
            self.root.setLevel(logging.DEBUG)

    def close(self) -> None:
        self.root.removeHandler(self.handler)
        self.root.setLevel(self.previous_level)
        self.handler.close()
