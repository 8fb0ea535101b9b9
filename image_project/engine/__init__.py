"""The step engine: chat calls, image calls and actions run from code on a scope, concurrently
where the code gathers them and recorded in declared order. Knows nothing of art, OpenAI or
files.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice."""

from image_project.engine.budget import TOKEN_KINDS, TokenBudget, TokenKind, TokenLimits
from image_project.engine.context import Context, EngineEvent
from image_project.engine.fanout import ordered_fanout
from image_project.engine.nodes import MERGE_MODES, ChatStep, ImageStep, MergeMode
from image_project.engine.outcome import Answer, Drawn
from image_project.engine.output import JsonOutput, ReaskPolicy, TextOutput
from image_project.engine.recorder import (
    DefaultStepRecorder,
    NullStepRecorder,
    StepRecorder,
    check_recorder,
)
from image_project.engine.runner import ChatRunner, ExecutionMode, as_json
from image_project.engine.scope import Scope

__all__ = [
    "MERGE_MODES",
    "TOKEN_KINDS",
    "Answer",
    "ChatRunner",
    "ChatStep",
    "Context",
    "DefaultStepRecorder",
    "Drawn",
    "EngineEvent",
    "ExecutionMode",
    "ImageStep",
    "JsonOutput",
    "MergeMode",
    "NullStepRecorder",
    "ReaskPolicy",
    "Scope",
    "StepRecorder",
    "TextOutput",
    "TokenBudget",
    "TokenKind",
    "TokenLimits",
    "as_json",
    "check_recorder",
    "ordered_fanout",
]
