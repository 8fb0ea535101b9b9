"""The run driver's public names, kept where earlier code imports them from; the driver
itself is the :mod:`image_project.run` package."""

from image_project.run import (
    PHASES,
    Inputs,
    RunFailed,
    RunResult,
    RunState,
    load_inputs,
    new_generation_id,
    run_generation,
)

__all__ = [
    "PHASES",
    "Inputs",
    "RunFailed",
    "RunResult",
    "RunState",
    "load_inputs",
    "new_generation_id",
    "run_generation",
]
