"""The step engine: a tree of chat calls, actions and blocks, run concurrently where the tree
says so and recorded in declared order. Knows nothing of art, OpenAI or files.

Internal: import the public names from ``image_project`` (docs/api.md); this package's
modules may change without notice."""

from image_project.engine.budget import TOKEN_KINDS, TokenBudget, TokenKind, TokenLimits
from image_project.engine.context import Context, EngineEvent
from image_project.engine.fanout import ordered_fanout
from image_project.engine.nodes import (
    MERGE_MODES,
    ActionStep,
    Block,
    ChatStep,
    ImageStep,
    MergeMode,
    Node,
    PromptFn,
    PromptSource,
    default_name,
    walk,
)
from image_project.engine.output import JsonOutput, ReaskPolicy, TextOutput
from image_project.engine.patterns import fanout_then_reduce
from image_project.engine.recorder import (
    DefaultStepRecorder,
    NullStepRecorder,
    StepRecorder,
    check_recorder,
)
from image_project.engine.runner import ChatRunner, ExecutionMode, NodeOutcome, as_json
from image_project.engine.scope import Answer, Scope

__all__ = [
    "MERGE_MODES",
    "TOKEN_KINDS",
    "ActionStep",
    "Answer",
    "Block",
    "ChatRunner",
    "ChatStep",
    "Context",
    "DefaultStepRecorder",
    "EngineEvent",
    "ExecutionMode",
    "ImageStep",
    "JsonOutput",
    "MergeMode",
    "Node",
    "NodeOutcome",
    "NullStepRecorder",
    "PromptFn",
    "PromptSource",
    "ReaskPolicy",
    "Scope",
    "StepRecorder",
    "TextOutput",
    "TokenBudget",
    "TokenKind",
    "TokenLimits",
    "as_json",
    "check_recorder",
    "default_name",
    "fanout_then_reduce",
    "ordered_fanout",
    "walk",
]
