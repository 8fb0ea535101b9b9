"""``backend.max_output_tokens``: the output-token limit of every kind of answer, and the
names of the other wire settings of the ``backend`` section (how requests are shaped for
servers that differ from api.openai.com). Documented in ``config/config.yaml``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from image_project.config.fields import _Int, _Section

__all__ = [
    "MAX_TOKEN_LIMIT",
    "RoleStyle",
    "SchemaDialect",
    "TokenLimitParam",
    "TokenLimitsConfig",
]

MAX_TOKEN_LIMIT = 200_000
"""The largest output-token limit the config accepts for one kind of answer."""

RoleStyle = Literal["system", "user"]
SchemaDialect = Literal["openai_strict", "grammar"]
TokenLimitParam = Literal["max_completion_tokens", "max_tokens"]


class TokenLimitsConfig(_Section):
    """The output-token limit sent with each kind of request (field names match
    :class:`image_project.engine.budget.TokenLimits`)."""

    prose: _Int = Field(default=2000, ge=16, le=MAX_TOKEN_LIMIT)
    rewrite: _Int = Field(default=2000, ge=16, le=MAX_TOKEN_LIMIT)
    hints: _Int = Field(default=800, ge=16, le=MAX_TOKEN_LIMIT)
    card: _Int = Field(default=1600, ge=16, le=MAX_TOKEN_LIMIT)
    judge_base: _Int = Field(default=200, ge=16, le=MAX_TOKEN_LIMIT)
    judge_per_card: _Int = Field(default=60, ge=1, le=10_000)
    judge_reasoned_per_card: _Int = Field(default=120, ge=1, le=10_000)
    selector_base: _Int = Field(default=300, ge=16, le=MAX_TOKEN_LIMIT)
    selector_per_pick: _Int = Field(default=150, ge=1, le=10_000)
    title: _Int = Field(default=60, ge=16, le=MAX_TOKEN_LIMIT)
    reasoning_headroom: _Int = Field(default=25_000, ge=0, le=MAX_TOKEN_LIMIT)
