"""``backend.max_output_tokens``: the output-token limit of every kind of answer, and the
names of the other wire settings of the ``backend`` section (how requests are shaped for
servers that differ from api.openai.com). Documented in ``config/config.yaml``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from image_project.config.fields import _Int, _Section

MAX_TOKEN_LIMIT = 200_000
"""The largest output-token limit the config accepts for one kind of answer."""

RoleStyle = Literal["system", "user"]
SchemaDialect = Literal["openai_strict", "grammar"]
TokenLimitParam = Literal["max_completion_tokens", "max_tokens"]


class TokenLimitsConfig(_Section):
    """The output-token limit sent with each kind of request (field names match
    :class:`image_project.engine.budget.TokenLimits`)."""

    prose: _Int = Field(default=2000, ge=16, le=MAX_TOKEN_LIMIT)
    """Output-token limit of a prose answer (stage drafts, critics, consensus, final drafts)."""
    rewrite: _Int = Field(default=2000, ge=16, le=MAX_TOKEN_LIMIT)
    """Output-token limit of the dislike rewrite (JSON: the concepts)."""
    hints: _Int = Field(default=800, ge=16, le=MAX_TOKEN_LIMIT)
    """Output-token limit of the profile abstraction (JSON: adjectives, avoid)."""
    card: _Int = Field(default=1600, ge=16, le=MAX_TOKEN_LIMIT)
    """Output-token limit of an idea card or a variant (JSON)."""
    judge_base: _Int = Field(default=200, ge=16, le=MAX_TOKEN_LIMIT)
    """A judge's limit is ``judge_base`` + ``judge_per_card`` x the cards it is shown."""
    judge_per_card: _Int = Field(default=60, ge=1, le=10_000)
    """Added to ``judge_base`` per card shown to a judge."""
    judge_reasoned_per_card: _Int = Field(default=120, ge=1, le=10_000)
    """Added to ``judge_base`` per card shown to a ``reasoned`` judge (its rationales)."""
    selector_base: _Int = Field(default=300, ge=16, le=MAX_TOKEN_LIMIT)
    """The LLM selector's limit is ``selector_base`` + ``selector_per_pick`` x the survivors to
    pick."""
    selector_per_pick: _Int = Field(default=150, ge=1, le=10_000)
    """Added to ``selector_base`` per survivor the LLM selector picks."""
    title: _Int = Field(default=60, ge=16, le=MAX_TOKEN_LIMIT)
    """Output-token limit of the title (a few words)."""
    reasoning_headroom: _Int = Field(default=25_000, ge=0, le=MAX_TOKEN_LIMIT)
    """Added to every limit for a model of the capability table that reasons at its default
    effort (its hidden reasoning counts in the same limit)."""
