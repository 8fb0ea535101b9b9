"""Output-token limits: what a step may spend (:class:`TokenBudget`), per kind of answer, and
the table of limits a runner resolves them with (:class:`TokenLimits`).

A step names the *kind* of its answer (``ChatStep(max_output_tokens=TokenBudget("card"))``);
the runner turns it into a number from its :class:`TokenLimits` (the configuration's
``backend.max_output_tokens``, built by the run driver) and sends it with every request of the
step. A plain int on a step is sent as it is. A per-item kind's answer grows with its items:
a judge's with the cards it scores, ``TokenBudget("judge", items=n)`` is ``judge_base + n *
judge_per_card``; the selector's with the survivors it picks, ``TokenBudget("selector",
items=n)`` is ``selector_base + n * selector_per_pick``. A step whose items are longer names
the limit each adds (``per_item``): a judge that writes a rationale before every score asks
for ``TokenBudget("judge", items=n, per_item="judge_reasoned_per_card")``.

A reasoning model counts its hidden reasoning in the same limit
(``max_completion_tokens``); for a model the limits name as reasoning
(``TokenLimits.reasoning_models``) ``reasoning_headroom`` is added to every limit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Literal, TypeAlias, get_args

from image_project.errors import PipelineDefinitionError

TokenKind: TypeAlias = Literal["prose", "rewrite", "hints", "card", "judge", "selector", "title"]
TOKEN_KINDS: tuple[str, ...] = get_args(TokenKind)
_PER_ITEM: dict[str, tuple[str, str]] = {
    "judge": ("judge_base", "judge_per_card"),
    "selector": ("selector_base", "selector_per_pick"),
}
"""A per-item kind -> the :class:`TokenLimits` fields of its base and of what an item adds."""


@dataclass(frozen=True)
class TokenBudget:
    """A step's output-token limit by the kind of its answer; ``items`` counts the items a
    per-item kind (``judge``: cards) answers for, ``per_item`` names the
    :class:`TokenLimits` field each adds when not the kind's own (``judge_per_card``,
    ``selector_per_pick``)."""

    kind: TokenKind
    items: int = 0
    per_item: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in TOKEN_KINDS:
            raise PipelineDefinitionError(
                f"TokenBudget.kind must be one of {', '.join(TOKEN_KINDS)}; got {self.kind!r}"
            )
        if isinstance(self.items, bool) or not isinstance(self.items, int) or self.items < 0:
            raise PipelineDefinitionError(
                f"TokenBudget.items must be an int >= 0, got {self.items!r}"
            )
        if self.per_item is not None and (
            self.kind not in _PER_ITEM or self.per_item not in _RATES
        ):
            raise PipelineDefinitionError(
                f"TokenBudget.per_item must be one of {', '.join(sorted(_RATES))} for a kind "
                f"of {', '.join(_PER_ITEM)}; got {self.per_item!r} for {self.kind!r}"
            )


@dataclass(frozen=True)
class TokenLimits:
    """The output-token limit of every kind of answer (defaults: ``config/config.yaml``,
    ``backend.max_output_tokens``)."""

    prose: int = 2000
    rewrite: int = 2000
    hints: int = 800
    card: int = 1600
    judge_base: int = 200
    judge_per_card: int = 60
    judge_reasoned_per_card: int = 120
    selector_base: int = 300
    selector_per_pick: int = 150
    title: int = 60
    reasoning_headroom: int = 0
    reasoning_models: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "reasoning_models":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PipelineDefinitionError(f"TokenLimits.{f.name} must be an int >= 0")

    @classmethod
    def of(cls, limits: dict[str, int], *, reasoning_models: Iterable[str] = ()) -> TokenLimits:
        """The limits from a mapping of field name to limit (the config section's dump)."""
        return cls(**limits, reasoning_models=frozenset(reasoning_models))

    def resolve(self, limit: int | TokenBudget | None, model: str) -> int | None:
        """The number to send for a step's ``max_output_tokens`` on ``model``."""
        if limit is None or isinstance(limit, int):
            return limit
        if limit.kind in _PER_ITEM:
            base, rate = _PER_ITEM[limit.kind]
            each = int(getattr(self, limit.per_item or rate))
            tokens = int(getattr(self, base)) + limit.items * each
        else:
            tokens = int(getattr(self, limit.kind))
        if model in self.reasoning_models:
            tokens += self.reasoning_headroom
        return tokens


_RATES = frozenset(f.name for f in fields(TokenLimits) if "_per_" in f.name)
"""The :class:`TokenLimits` fields an item of a per-item kind may add."""
