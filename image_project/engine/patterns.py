"""A reusable tree shape built from :class:`Block` (no model, prompt or art knowledge): a
fan-out of isolated threads and the steps that reduce them (a tree-of-thought enclave)."""

from __future__ import annotations

from collections.abc import Sequence

from image_project.engine.nodes import Block, MergeMode, Node
from image_project.errors import PipelineDefinitionError

__all__ = ["fanout_then_reduce"]


def _require_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PipelineDefinitionError(f"{what} must be a non-empty string, got {value!r}")
    return value.strip()


def _isolated(name: str, what: str, nodes: Sequence[Node], parallel: bool) -> Block:
    """A block whose children add nothing to the conversation (merge ``none``), concurrently by
    default; their values go on through ``ChatStep.keep``."""
    return Block(name=_require_name(name, what), merge="none", nodes=list(nodes), parallel=parallel)


def fanout_then_reduce(
    name: str,
    *,
    fanout: Sequence[Node],
    reduce: Sequence[Node],
    fanout_name: str = "fanout",
    reduce_name: str = "reduce",
    merge: MergeMode = "all_messages",
    parallel: bool = True,
) -> Block:
    """``name/{fanout_name}`` runs ``fanout`` concurrently (merge ``none``: each thread sees
    the same baseline and hands its value on through ``keep``), then ``name/{reduce_name}``
    runs ``reduce`` in order, reading them; only the reduce part reaches the conversation."""
    return Block(
        name=_require_name(name, "fanout_then_reduce name"),
        merge=merge,
        nodes=[
            _isolated(fanout_name, "fanout_name", fanout, parallel),
            Block(
                name=_require_name(reduce_name, "reduce_name"),
                merge="all_messages",
                nodes=list(reduce),
            ),
        ],
    )
