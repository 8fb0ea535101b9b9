"""Reusable tree shapes built from :class:`Block` (no model, prompt or art knowledge)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from image_project.engine.nodes import Block, MergeMode, Node
from image_project.errors import PipelineDefinitionError

__all__ = ["fanout_then_reduce", "generate_then_select", "iterate"]

T = TypeVar("T")


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


def generate_then_select(
    name: str,
    *,
    generate: Sequence[Node],
    select: Node,
    generate_name: str = "generate",
    select_name: str = "select",
    merge: MergeMode = "all_messages",
    parallel: bool = True,
) -> Block:
    """Candidates are generated concurrently (merge ``none``, values kept), then ``select``
    (a node or block) chooses among them. A non-block ``select`` is wrapped as
    ``Block(select_name, [select])``."""
    select_block = (
        select
        if isinstance(select, Block)
        else Block(name=_require_name(select_name, "select_name"), nodes=[select])
    )
    return Block(
        name=_require_name(name, "generate_then_select name"),
        merge=merge,
        nodes=[
            _isolated(generate_name, "generate_name", generate, parallel),
            select_block,
        ],
    )


def iterate(
    name: str,
    *,
    items: Sequence[T],
    build: Callable[[T, int], Node],
    iteration_name: Callable[[T, int], str] | None = None,
    merge: MergeMode = "none",
) -> Block:
    """One sequential child block per item (``iter_01``, ... unless ``iteration_name`` says
    otherwise), each with merge ``none``: iterations communicate through kept values only.
    ``build(item, idx)`` gets a 1-based index."""
    children: list[Node] = []
    for idx, item in enumerate(items, start=1):
        child_name = _require_name(
            iteration_name(item, idx) if iteration_name else f"iter_{idx:02d}", "iteration name"
        )
        built = build(item, idx)
        kwargs: dict[str, Any] = {"name": child_name, "merge": "none"}
        if isinstance(built, Block):
            kwargs.update(
                nodes=built.nodes,
                parallel=built.parallel,
                meta=built.meta,
            )
        else:
            kwargs["nodes"] = [built]
        children.append(Block(**kwargs))
    return Block(name=_require_name(name, "iterate name"), merge=merge, nodes=children)
