"""Step recorders: who sees steps live.

A recorder has three methods, called by the runner as steps run (concurrent steps call them
in completion order):

* ``on_step_start(ctx, path, **metrics)`` — before the model call or action; ``metrics``
  always has ``type`` and ``name`` and may grow new keys, so accept ``**metrics``.
* ``on_step_end(ctx, record)`` — after success, with the step's event
  (:class:`~image_project.record.events.ChatEvent` or ``ActionEvent``).
* ``on_step_error(ctx, path, step_name, exc)`` — after a failure (not for cancellation).

:class:`DefaultStepRecorder` logs and inserts records into ``ctx.steps`` at their declared
position, so the transcript is in pre-order whatever order concurrent steps finished in. Its
``in_flight`` lists the steps started but neither finished nor failed: after a cancellation
(Ctrl-C) those are the steps that were cut off.
:class:`NullStepRecorder` records and logs nothing. A recorder that raises in
``on_step_end`` fails its step, with the step's path attached.
"""

from __future__ import annotations

import bisect
import logging
from typing import Any, Protocol, runtime_checkable

from image_project.engine.context import Context, EngineEvent
from image_project.record.events import ChatEvent

_REQUIRED = ("on_step_start", "on_step_end", "on_step_error")


@runtime_checkable
class StepRecorder(Protocol):
    def on_step_start(self, ctx: Context, path: str, **metrics: Any) -> None: ...

    def on_step_end(self, ctx: Context, record: EngineEvent) -> None: ...

    def on_step_error(
        self, ctx: Context, path: str, step_name: str, exc: BaseException
    ) -> None: ...


def check_recorder(recorder: object) -> StepRecorder:
    """Reject, at construction time, a recorder that lacks one of the three methods."""
    missing = [m for m in _REQUIRED if not callable(getattr(recorder, m, None))]
    if missing:
        raise TypeError(
            f"step recorder {type(recorder).__name__} is missing required method(s): "
            + ", ".join(missing)
        )
    assert isinstance(recorder, StepRecorder)
    return recorder


class DefaultStepRecorder:
    """Logs each step and keeps the transcript records in declared order. ``groups`` maps
    the path of every parallel group that started to its number of steps (the runner
    announces each through the optional hook ``on_group_start``): with the step paths, the
    shape of what ran, for progress counts and the latency bench's critical path."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("image_project.steps")
        self._in_flight: dict[str, None] = {}
        self.groups: dict[str, int] = {}

    def on_group_start(self, path: str, steps: int) -> None:
        """A parallel group of ``steps`` steps starts at ``path``."""
        self.groups[path] = steps

    @property
    def in_flight(self) -> list[str]:
        """Paths of the steps started but not (yet) finished or failed, in start order."""
        return list(self._in_flight)

    def on_step_start(self, ctx: Context, path: str, **metrics: Any) -> None:
        self._in_flight[path] = None
        if self.logger.isEnabledFor(logging.DEBUG):  # nothing formatted that is not emitted
            detail = " ".join(f"{k}={v}" for k, v in metrics.items() if k not in ("name",))
            self.logger.debug("Step: %s (%s)", path, detail)

    def on_step_end(self, ctx: Context, record: EngineEvent) -> None:
        self._in_flight.pop(record.path, None)
        bisect.insort(ctx.steps, record, key=lambda r: r.order)
        if isinstance(record, ChatEvent) and record.error is not None:
            self.logger.warning(
                "Step %s failed and was recovered: %s: %s",
                record.path,
                record.error.type,
                record.error.message,
            )
        elif isinstance(record, ChatEvent):
            self.logger.debug(
                "Received response for %s (%d chars, %.0f ms, attempts=%d)",
                record.path,
                len(record.response or ""),
                record.latency_ms,
                record.attempts,
            )
        else:
            self.logger.debug(
                "Completed %s %s (%.1f ms)", record.type, record.path, record.latency_ms
            )

    def on_step_error(self, ctx: Context, path: str, step_name: str, exc: BaseException) -> None:
        self._in_flight.pop(path, None)
        self.logger.error("Step failed: %s: %s: %s", path, type(exc).__name__, exc)


class NullStepRecorder:
    """Records nothing and logs nothing (benchmarks, tests)."""

    def on_step_start(self, ctx: Context, path: str, **metrics: Any) -> None:
        return None

    def on_step_end(self, ctx: Context, record: EngineEvent) -> None:
        return None

    def on_step_error(self, ctx: Context, path: str, step_name: str, exc: BaseException) -> None:
        return None
