"""The judging protocols, by name (:data:`PROTOCOLS`): how a judge is asked and read.

Each protocol is one :class:`~.base.JudgingProtocol` value in a module of its own; the panel,
the judges' prompts and system prompts find a judge's by its name (``judges[i].protocol``,
``judge_protocol``) through :func:`protocol_of`. Adding one: docs/judging.md, "Adding a
protocol".
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from image_project.errors import PipelineDefinitionError
from image_project.stages.scoring.protocols import list as listed
from image_project.stages.scoring.protocols import logprobs, pairwise, pointwise, reasoned
from image_project.stages.scoring.protocols.base import JudgingProtocol

PROTOCOLS: Mapping[str, JudgingProtocol] = MappingProxyType(
    {
        p.name: p
        for p in (
            listed.PROTOCOL,
            reasoned.PROTOCOL,
            pointwise.PROTOCOL,
            pairwise.PROTOCOL,
            logprobs.PROTOCOL,
        )
    }
)
"""Every judging protocol by its name, in the order of ``config.JudgeProtocol`` (the names
the configuration accepts)."""


def protocol_of(name: str) -> JudgingProtocol:
    """The protocol called ``name``; :class:`PipelineDefinitionError` for another name (the
    configuration accepts only the registered ones)."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise PipelineDefinitionError(
            f"judge protocol {name!r} is not one of {', '.join(PROTOCOLS)}"
        ) from None
