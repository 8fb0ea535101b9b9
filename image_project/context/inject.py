"""One run's context: every injector run with its own random stream, its answer checked and
recorded, and the guidance block made from the lines of those that applied
(:func:`run_injectors`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date
from typing import Literal

from pydantic import ValidationError

from image_project.config.context_section import InjectionLocation
from image_project.context.base import Injection, InjectorInput, render_guidance
from image_project.context.loading import LoadedInjector
from image_project.errors import ContextInjectorError
from image_project.record.context import ContextRecord, InjectorRecord
from image_project.seeding import rng_for

MAX_REASON_CHARS = 200


def injector_rng_labels(name: str) -> tuple[str, str]:
    """The labels of injector ``name``'s random stream: ``rng_for(run_seed, "context", name)``."""
    return ("context", name)


def run_injectors(
    injectors: Sequence[LoadedInjector],
    *,
    run_seed: int,
    today: date,
    date_source: Literal["fixed", "today"],
    location: InjectionLocation,
    preferences: str,
    dislikes: tuple[str, ...],
) -> ContextRecord:
    """Run ``injectors`` in order; the run's context record. An injector that raises or
    answers in the wrong shape raises :class:`ContextInjectorError` naming it."""
    records: list[InjectorRecord] = []
    lines: list[str] = []
    for item in injectors:
        given = InjectorInput(
            today=today,
            rng=rng_for(run_seed, *injector_rng_labels(item.name)),
            preferences=preferences,
            dislikes=dislikes,
            settings=item.settings,
        )
        try:
            answer = item.injector.inject(given)
        except SystemExit as exc:  # a plugin's sys.exit() fails the run, naming it
            raise ContextInjectorError(
                item.name, f"it called sys.exit({exc.code!r}) instead of answering"
            ) from exc
        except Exception as exc:
            raise ContextInjectorError(item.name, f"{type(exc).__name__}: {exc}") from exc
        record = _record(item, answer)
        records.append(record)
        lines.extend(record.guidance)
    return ContextRecord(
        date_used=today.isoformat(),
        date_source=date_source,
        injection_location=location,
        guidance=render_guidance(lines),
        injectors=tuple(records),
    )


def _record(item: LoadedInjector, answer: object) -> InjectorRecord:
    """The injector's answer as its record, after checking its shape."""
    name = item.name
    if not isinstance(answer, Injection):
        raise ContextInjectorError(
            name, f"returned {type(answer).__name__}, must return image_project.context.Injection"
        )
    if not isinstance(answer.applied, bool):
        raise ContextInjectorError(name, f"applied: got {answer.applied!r}, must be a bool")
    reason = answer.reason
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise ContextInjectorError(
            name,
            f"reason: got {reason!r}, must be a non-empty string of at most "
            f"{MAX_REASON_CHARS} characters",
        )
    lines = tuple(answer.guidance) if isinstance(answer.guidance, (list, tuple)) else None
    if lines is None or not all(isinstance(x, str) and x.strip() and "\n" not in x for x in lines):
        raise ContextInjectorError(name, "guidance: must be a tuple of non-blank one-line strings")
    if lines and not answer.applied:
        raise ContextInjectorError(name, "guidance: an injector that did not apply has none")
    for field_name in ("probability", "roll"):
        value = getattr(answer, field_name)
        ok = value is None or (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and 0.0 <= value <= 1.0
        )
        if not ok:
            raise ContextInjectorError(
                name, f"{field_name}: got {value!r}, must be None or a number in [0, 1]"
            )
    try:
        return InjectorRecord(
            name=name,
            source=item.source,
            module=item.module,
            applied=answer.applied,
            reason=reason,
            probability=answer.probability,
            roll=answer.roll,
            guidance=tuple(line.strip().removeprefix("- ").strip() for line in lines),
            metadata=dict(answer.metadata),
        )
    except (ValidationError, TypeError, ValueError) as exc:
        raise ContextInjectorError(
            name, f"metadata: must map strings to JSON values ({exc})"
        ) from exc
