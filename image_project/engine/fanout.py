"""The one fan-out helper: every concurrent group in image_project goes through
:func:`ordered_fanout`.

It runs callables in an anyio task group (optionally each under a shared
``CapacityLimiter``) and returns their results **in input order**, never completion order.
If any fails, the task group cancels the rest; the failure with the lowest input index is
raised (other concurrent failures are attached to it as notes), and the labels of the
callables that did not complete are attached as cancelled paths
(:func:`image_project.errors.cancelled_paths_of`); a callable labelled None is never named.

``sequential=True`` runs the same callables one at a time, in order, with the same result and
error contract; it is how the engine's sequential mode shares this code path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import anyio

from image_project.errors import add_cancelled_paths

T = TypeVar("T")


async def ordered_fanout(
    fns: Sequence[Callable[[], Awaitable[T]]],
    *,
    limiter: anyio.CapacityLimiter | None = None,
    sequential: bool = False,
    labels: Sequence[str | None] | None = None,
) -> list[T]:
    if labels is not None and len(labels) != len(fns):
        raise ValueError("labels must match fns one to one")
    names: list[str | None] = (
        list(labels) if labels is not None else [f"#{i}" for i in range(len(fns))]
    )
    results: dict[int, T] = {}
    failures: dict[int, Exception] = {}

    async def run_one(index: int) -> None:
        try:
            if limiter is not None:
                async with limiter:
                    results[index] = await fns[index]()
            else:
                results[index] = await fns[index]()
        except Exception as exc:
            failures[index] = exc
            raise

    if sequential:
        await _one_at_a_time(run_one, len(fns))
    else:
        await _all_at_once(run_one, len(fns), failures)
    if failures:
        incomplete = [
            name
            for i, name in enumerate(names)
            if i not in results and i not in failures and name is not None
        ]
        raise _first_failure(failures, names, incomplete)
    return [results[i] for i in range(len(fns))]


async def _one_at_a_time(run_one: Callable[[int], Coroutine[Any, Any, None]], count: int) -> None:
    for i in range(count):
        try:
            await run_one(i)
        except Exception:
            return


async def _all_at_once(
    run_one: Callable[[int], Coroutine[Any, Any, None]],
    count: int,
    failures: dict[int, Exception],
) -> None:
    try:
        async with anyio.create_task_group() as tg:
            for i in range(count):
                tg.start_soon(run_one, i)
    except BaseExceptionGroup as group:
        _, foreign = group.split(Exception)
        if not failures or foreign is not None:
            raise


def _first_failure(
    failures: dict[int, Exception], names: Sequence[str | None], incomplete: list[str]
) -> Exception:
    """The failure with the lowest index, the others attached as notes and the callables
    that never completed attached as cancelled paths."""
    first = min(failures)
    primary = failures[first]
    for index in sorted(failures):
        if index != first:
            primary.add_note(
                f"also failed concurrently: {names[index] or f'#{index}'}: "
                f"{type(failures[index]).__name__}: {failures[index]}"
            )
    add_cancelled_paths(primary, incomplete)
    return primary
