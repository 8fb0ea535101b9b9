"""Run state the engine reads and writes: :class:`Context` and :class:`StepRecord`."""

from __future__ import annotations

import copy
import json
from collections import ChainMap
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

from image_project.backends.base import Message, Usage

__all__ = ["Context", "StepRecord", "json_safe"]


@dataclass
class Context:
    """What a pipeline run shares between its steps.

    ``messages`` is the root conversation (changed only by the runner's merges), ``outputs``
    the captured values, ``steps`` the transcript records in declared (pre-order) order;
    successive root runs on one context (``roots_run`` counts them) record after each other.
    Applications subclass it to carry their own run fields; prompt functions and actions
    receive it.
    """

    messages: tuple[Message, ...] = ()
    outputs: MutableMapping[str, Any] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    roots_run: int = 0

    @classmethod
    def with_system(cls, system_prompt: str) -> Context:
        return cls(messages=(Message("system", system_prompt),))

    def fork(self) -> tuple[Context, dict[str, Any]]:
        """A view for one parallel child: reads fall through to this context's outputs,
        writes land in the returned overlay, which the runner applies in declared order.
        ``steps`` stays shared (records are inserted by their declared position)."""
        overlay: dict[str, Any] = {}
        child = copy.copy(self)
        child.outputs = ChainMap(overlay, self.outputs)
        return child, overlay


@dataclass(frozen=True)
class StepRecord:
    """One executed step, as it appears in the transcript.

    ``order`` is the step's position in the tree (its index path); sorting by it gives
    declared pre-order, whatever order concurrent steps completed in. It is not serialised.
    Timing fields (``created_at``, ``latency_ms``) are the only ones allowed to differ
    between a sequential and a concurrent run of the same tree with the same answers.
    ``error`` is set only on a recoverable step (``ChatStep.on_failure``) that failed:
    ``{type, message, reason, output_preview}``; ``response`` then holds the last answer, if any.
    """

    order: tuple[int, ...]
    type: Literal["chat", "action"]
    name: str
    path: str
    created_at: str
    latency_ms: float
    prompt: str | None = None
    response: str | None = None
    system_prompt: str | None = None
    params: Mapping[str, Any] | None = None
    usage: Usage | None = None
    attempts: int = 0
    system_fingerprint: str | None = None
    response_model: str | None = None
    context_messages: int = 0
    reasks: tuple[Mapping[str, str], ...] = ()
    result: Any = None
    error: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    TIMING_FIELDS = ("created_at", "latency_ms")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "name": self.name, "path": self.path}
        if self.type == "chat":
            out["prompt"] = self.prompt
            if self.system_prompt is not None:
                out["system_prompt"] = self.system_prompt
            out["response"] = self.response
            out["params"] = dict(self.params or {})
            out["context_messages"] = self.context_messages
        out["created_at"] = self.created_at
        out["latency_ms"] = self.latency_ms
        if self.type == "chat":
            out["usage"] = (self.usage or Usage()).to_dict()
            out["attempts"] = self.attempts
            if self.system_fingerprint is not None:
                out["system_fingerprint"] = self.system_fingerprint
            if self.response_model is not None:
                out["response_model"] = self.response_model
            if self.reasks:
                out["reasks"] = [dict(r) for r in self.reasks]
            if self.error is not None:
                out["error"] = dict(self.error)
        else:
            out["result"] = json_safe(self.result)
        if self.meta:
            out["meta"] = json_safe(dict(self.meta))
        return out


def json_safe(value: Any, *, depth: int = 4, items: int = 25) -> Any:
    """A JSON-serialisable, trimmed copy of ``value`` (for action results and metadata)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth <= 0:
        return _short_repr(value)
    if isinstance(value, Mapping):
        trimmed = list(value.items())[:items]
        return {str(k): json_safe(v, depth=depth - 1, items=items) for k, v in trimmed}
    if isinstance(value, list | tuple | set | frozenset):
        seq = list(value)[:items]
        return [json_safe(v, depth=depth - 1, items=items) for v in seq]
    to_dict = getattr(value, "to_dict", None) or getattr(value, "model_dump", None)
    if callable(to_dict):
        return json_safe(to_dict(), depth=depth - 1, items=items)
    return _short_repr(value)


def _short_repr(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 200 else text[:199] + "…"
