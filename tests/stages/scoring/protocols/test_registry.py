"""The registry of judging protocols: every name the configuration accepts has exactly one
protocol, each in its own module ``protocols/<name>.py``; what the configuration checks a
protocol needs before any call (``config.capabilities.PROTOCOL_NEEDS``) is what the
protocol asks for; a name that is not a protocol is refused naming the ones there are."""

from __future__ import annotations

import importlib
from typing import get_args

import pytest

from image_project.config.capabilities import PROTOCOL_NEEDS
from image_project.config.models import JudgeProtocol, ScoringConfig
from image_project.errors import PipelineDefinitionError
from image_project.record.scoring import DEFAULT_PROTOCOL, named_protocol
from image_project.stages.scoring.protocols import PROTOCOLS, protocol_of


def test_the_registry_holds_exactly_the_protocols_the_configuration_accepts() -> None:
    assert tuple(PROTOCOLS) == get_args(JudgeProtocol)
    assert all(p.name == name for name, p in PROTOCOLS.items())


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_each_protocol_is_the_value_of_its_own_module(name: str) -> None:
    module = importlib.import_module(f"image_project.stages.scoring.protocols.{name}")
    assert module.PROTOCOL is PROTOCOLS[name] is protocol_of(name)


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_the_configuration_checks_what_each_protocol_asks_for(name: str) -> None:
    asks_for_logprobs = PROTOCOLS[name].top_logprobs is not None
    assert ("logprobs" in PROTOCOL_NEEDS.get(name, ())) == asks_for_logprobs
    assert set(PROTOCOL_NEEDS) <= set(PROTOCOLS)


def test_another_name_is_refused_naming_the_protocols() -> None:
    with pytest.raises(PipelineDefinitionError) as caught:
        protocol_of("votes")
    assert str(caught.value) == f"judge protocol 'votes' is not one of {', '.join(PROTOCOLS)}"
    assert "list, reasoned, pointwise, pairwise, logprobs" in str(caught.value)


def test_records_name_every_protocol_but_the_configurations_default() -> None:
    assert ScoringConfig.model_fields["judge_protocol"].default == DEFAULT_PROTOCOL
    assert named_protocol(DEFAULT_PROTOCOL) is None
    assert [named_protocol(p) for p in PROTOCOLS if p != DEFAULT_PROTOCOL] == [
        p for p in PROTOCOLS if p != DEFAULT_PROTOCOL
    ]
