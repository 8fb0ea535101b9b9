"""The store's tables (SQLAlchemy Core), one definition for SQLite and PostgreSQL.

The Alembic migrations in ``migrations/versions`` create exactly these tables; a test
compares the migrated database with this metadata, so the two cannot drift apart.
:data:`SCHEMA_REVISION` is the newest migration: a store at that revision is opened without
loading Alembic at all.

Every child table's rows belong to one run (``generation_id``, deleted with it). Times are
UTC, stored without a zone. Multi-round selection (``prompt.scoring.evolution``) keeps every
round: ``candidates``, ``judge_results`` and ``scores`` carry the ``round`` they belong to
(a one-round run's rows are all round 0), ``rounds`` has one row per round (its selector)
and ``survivors`` one per survivor; the final pick is made from the last round's rows. A run
with context injectors has a ``contexts`` row (the date, where the guidance went, the
guidance) and a ``context_injectors`` row per injector (applied or not, why, the
probability and the roll). ``runs.record_json`` is the run's whole
:class:`~image_project.record.RunRecord` as the transcript holds it, so a record read back
from the store is the record the run wrote (the other columns are for queries).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)

SCHEMA_REVISION: Final = "0002"
"""The newest migration's revision id (``migrations/versions/v0002_context.py``)."""

metadata = MetaData()

_ID = String(64)
_NAME = String(200)


def _round() -> Column[int]:
    """The round a row belongs to: 0 for the first card set (and every row of a one-round
    run), then 1, 2, … for the rounds of variants."""
    return Column("round", Integer, nullable=False)


def _run_fk() -> Column[str]:
    return Column(
        "generation_id",
        _ID,
        ForeignKey("runs.generation_id", ondelete="CASCADE"),
        nullable=False,
    )


runs = Table(
    "runs",
    metadata,
    Column("generation_id", _ID, primary_key=True),
    Column("status", String(16), nullable=False),  # ok | failed | interrupted
    Column("created_at", DateTime(), nullable=False),
    Column("seed", BigInteger, nullable=False),
    Column("run_mode", String(16), nullable=False),
    Column("provider", _NAME, nullable=False),
    Column("text_model", _NAME, nullable=False),
    Column("image_model", _NAME, nullable=False),
    Column("execution_mode", String(16), nullable=False),
    Column("concepts", JSON, nullable=False),
    Column("final_image_prompt", Text),
    Column("scoring", Boolean, nullable=False),
    Column("seq", Integer),
    Column("title", Text),
    Column("image_path", Text),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("total_tokens", BigInteger, nullable=False),
    Column("model_calls", Integer, nullable=False),
    Column("image_calls", Integer, nullable=False),
    Column("wall_s", Float, nullable=False),
    Column("error_type", _NAME),
    Column("error_message", Text),
    Column("error_phase", String(32)),
    Column("error_path", Text),
    Column("schema_version", Integer, nullable=False),
    Column("record_json", Text, nullable=False),
    Column("source", String(16), nullable=False),  # run | import
    Column("stored_at", DateTime(), nullable=False),
    Index("ix_runs_created_at", "created_at"),
    Index("ix_runs_status", "status"),
)

calls = Table(
    "calls",
    metadata,
    _run_fk(),
    Column("position", Integer, nullable=False),  # the step's index in record.steps
    Column("kind", String(8), nullable=False),  # chat | image
    Column("path", Text, nullable=False),
    Column("name", _NAME, nullable=False),
    Column("model", _NAME, nullable=False),
    Column("response_model", _NAME),
    Column("temperature", Float),
    Column("seed", BigInteger),
    Column("params", JSON, nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("latency_ms", Float, nullable=False),
    Column("pacing_wait_ms", Float, nullable=False),
    Column("prompt_tokens", Integer),
    Column("completion_tokens", Integer),
    Column("total_tokens", Integer),
    Column("cached_tokens", Integer),
    Column("attempts", Integer),
    Column("answers", Integer),
    Column("reasks", Integer, nullable=False),
    Column("status", String(16), nullable=False),  # ok | error | cancelled
    Column("error_type", _NAME),
    Column("error_message", Text),
    PrimaryKeyConstraint("generation_id", "position"),
    Index("ix_calls_model", "model"),
)

candidates = Table(
    "candidates",
    metadata,
    _run_fk(),
    _round(),
    Column("card_id", String(8), nullable=False),
    Column("position", Integer, nullable=False),  # place in its round
    Column("kind", String(8), nullable=False),  # card | variant | parent
    Column("parent", String(8)),  # the survivor a variant was bred from
    Column("seed", BigInteger, nullable=False),
    Column("direction", Text, nullable=False),  # diversity direction or mutation directive
    Column("dropped_of", String(8)),  # dropped as a near-duplicate of this candidate
    Column("dropped_distance", Float),
    Column("dropped_threshold", Float),
    Column("hook", Text),
    Column("card", JSON),
    Column("median", Float),
    Column("aggregate", Float),
    Column("spread", Integer),
    Column("n_ok", Integer),
    Column("novelty_penalty", Float),
    Column("effective_score", Float),
    Column("rank", Integer),  # 1 = first in the final selector's ranking (last round)
    Column("selected", Boolean, nullable=False),  # the final pick (a last-round row)
    PrimaryKeyConstraint("generation_id", "round", "card_id"),
)

judge_results = Table(
    "judge_results",
    metadata,
    _run_fk(),
    _round(),
    Column("judge_id", _NAME, nullable=False),
    Column("position", Integer, nullable=False),
    Column("model", _NAME, nullable=False),
    Column("temperature", Float, nullable=False),
    Column("rubric", Text, nullable=False),
    Column("profile", String(32), nullable=False),
    Column("weight", Float, nullable=False),
    Column("status", String(16), nullable=False),  # ok | parse_error | degenerate | refused | error
    Column("attempts", Integer, nullable=False),
    Column("presented_order", JSON, nullable=False),
    Column("path", Text, nullable=False),
    Column("error", Text),
    Column("output_preview", Text),
    PrimaryKeyConstraint("generation_id", "round", "judge_id"),
    Index("ix_judge_results_judge_id", "judge_id"),
)

scores = Table(
    "scores",
    metadata,
    _run_fk(),
    _round(),
    Column("card_id", String(8), nullable=False),
    Column("judge_id", _NAME, nullable=False),
    Column("score", Integer, nullable=False),
    Column("presented_position", Integer),  # 0-based place of the card in this judge's order
    PrimaryKeyConstraint("generation_id", "round", "card_id", "judge_id"),
)

rounds = Table(
    "rounds",
    metadata,
    _run_fk(),
    _round(),
    Column("selector_kind", String(8)),  # code | llm; null for the last round (no survivors)
    Column("selector_status", String(16)),  # ok | fallback
    Column("selector_attempts", Integer),
    Column("selector_model", _NAME),
    Column("selector_path", Text),
    Column("selector_summary", Text),
    Column("selector_warning", Text),
    PrimaryKeyConstraint("generation_id", "round"),
)

survivors = Table(
    "survivors",
    metadata,
    _run_fk(),
    _round(),  # the round the survivor was chosen from (it is judged again in round + 1)
    Column("card_id", String(8), nullable=False),
    Column("position", Integer, nullable=False),
    Column("category", String(16), nullable=False),  # performance | diversity | potential
    Column("reason", Text, nullable=False),
    Column("proposed_by", String(8), nullable=False),  # code | llm
    PrimaryKeyConstraint("generation_id", "round", "card_id"),
    ForeignKeyConstraint(
        ["generation_id", "round", "card_id"],
        ["candidates.generation_id", "candidates.round", "candidates.card_id"],
        ondelete="CASCADE",
    ),
)

selections = Table(
    "selections",
    metadata,
    Column(
        "generation_id",
        _ID,
        ForeignKey("runs.generation_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("aggregation", String(32), nullable=False),
    Column("mode", String(16)),  # exploit | explore
    Column("exploration_rate", Float, nullable=False),
    Column("roll", Float),
    Column("explore_roll", Float),
    Column("ranking", JSON),
    Column("explore_pool", JSON),
    Column("selected_id", String(8)),
    Column("selected_score", Float),
    Column("novelty_used", Boolean, nullable=False),
    Column("evolution", JSON),  # multi-round config; null for a one-round run
)

images = Table(
    "images",
    metadata,
    Column(
        "generation_id",
        _ID,
        ForeignKey("runs.generation_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("seq", Integer, nullable=False),
    Column("title", Text, nullable=False),
    Column("title_source", String(32), nullable=False),
    Column("caption", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("bytes", BigInteger),
    Column("model", _NAME),
    Column("size", String(32)),
    Column("quality", String(16)),
    Index("ix_images_seq", "seq"),
)

# -- context injectors (migration 0002) -------------------------------------------------

contexts = Table(
    "contexts",
    metadata,
    Column(
        "generation_id",
        _ID,
        ForeignKey("runs.generation_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("date_used", String(10), nullable=False),  # YYYY-MM-DD
    Column("date_source", String(8), nullable=False),  # fixed | today
    Column("injection_location", String(8), nullable=False),  # system | prompt | both
    Column("guidance", Text, nullable=False),  # the rendered block; "" when none applied
)

context_injectors = Table(
    "context_injectors",
    metadata,
    _run_fk(),
    Column("position", Integer, nullable=False),  # the order the injectors ran in
    Column("name", String(64), nullable=False),
    Column("source", String(8), nullable=False),  # builtin | plugin
    Column("module", Text),  # a plugin's module
    Column("applied", Boolean, nullable=False),
    Column("reason", String(200), nullable=False),
    Column("probability", Float),
    Column("roll", Float),
    Column("guidance", JSON, nullable=False),  # its lines
    Column("metadata", JSON, nullable=False),
    PrimaryKeyConstraint("generation_id", "name"),
)

ALL_TABLES: tuple[Table, ...] = (
    runs,
    calls,
    candidates,
    judge_results,
    scores,
    rounds,
    survivors,
    selections,
    images,
    contexts,
    context_injectors,
)
"""Every table, parents first (insert in this order)."""
