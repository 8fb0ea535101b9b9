"""The step engine: a tree of chat calls, actions and blocks, run concurrently where the tree
says so and recorded in declared order. Knows nothing of art, OpenAI or files."""

from image_project.engine.context import Context, StepRecord, json_safe
from image_project.engine.fanout import ordered_fanout
from image_project.engine.nodes import (
    MERGE_MODES,
    ActionStep,
    Block,
    ChatStep,
    MergeMode,
    Node,
    capture_keys,
    default_name,
    walk,
)
from image_project.engine.patterns import fanout_then_reduce, generate_then_select, iterate
from image_project.engine.recorder import (
    DefaultStepRecorder,
    NullStepRecorder,
    StepRecorder,
    check_recorder,
)
from image_project.engine.runner import ChatRunner, ExecutionMode, NodeOutcome

__all__ = [
    "MERGE_MODES",
    "ActionStep",
    "Block",
    "ChatRunner",
    "ChatStep",
    "Context",
    "DefaultStepRecorder",
    "ExecutionMode",
    "MergeMode",
    "Node",
    "NodeOutcome",
    "NullStepRecorder",
    "StepRecord",
    "StepRecorder",
    "capture_keys",
    "check_recorder",
    "default_name",
    "fanout_then_reduce",
    "generate_then_select",
    "iterate",
    "json_safe",
    "ordered_fanout",
    "walk",
]
