"""The standard prompt pipeline's shape, from a run of it on answers that pass every gate: its
chat steps' paths and seeds in declared order and its parallel groups with their sizes. The
shape does not depend on the answers, so it is what every run of the pipeline records."""

from __future__ import annotations

from dataclasses import dataclass

from image_project.engine.context import Context
from image_project.engine.recorder import DefaultStepRecorder
from image_project.engine.runner import ChatRunner
from image_project.record.events import ChatEvent
from image_project.stages.standard import SYSTEM_PROMPT, Brief, Refinement, prompt_pipeline
from image_project.testing import FunctionTextBackend


@dataclass(frozen=True)
class PipelineShape:
    """The chat steps' paths and seeds (declared order), and each parallel group's size."""

    paths: tuple[str, ...]
    seeds: tuple[int | None, ...]
    groups: dict[str, int]


async def pipeline_shape(
    brief: Brief, *, run_seed: int, refinement: Refinement, temperature: float = 0.8
) -> PipelineShape:
    recorder = DefaultStepRecorder()
    ctx = Context.with_system(SYSTEM_PROMPT)
    runner = ChatRunner(FunctionTextBackend(lambda _r: "fine"), recorder=recorder)
    await prompt_pipeline(
        runner.root(ctx),
        brief=brief,
        run_seed=run_seed,
        refinement=refinement,
        temperature=temperature,
    )
    chats = [e for e in ctx.steps if isinstance(e, ChatEvent)]
    return PipelineShape(
        tuple(e.path for e in chats), tuple(e.params.seed for e in chats), dict(recorder.groups)
    )
