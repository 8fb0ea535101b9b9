"""The first schema: runs, calls, candidates, judge_results, scores, selections, images.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("generation_id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("run_mode", sa.String(length=16), nullable=False),
        sa.Column("provider", sa.String(length=200), nullable=False),
        sa.Column("text_model", sa.String(length=200), nullable=False),
        sa.Column("image_model", sa.String(length=200), nullable=False),
        sa.Column("execution_mode", sa.String(length=16), nullable=False),
        sa.Column("concepts", sa.JSON(), nullable=False),
        sa.Column("final_image_prompt", sa.Text(), nullable=True),
        sa.Column("scoring", sa.Boolean(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=True),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("image_path", sa.Text(), nullable=True),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("total_tokens", sa.BigInteger(), nullable=False),
        sa.Column("model_calls", sa.Integer(), nullable=False),
        sa.Column("image_calls", sa.Integer(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("error_type", sa.String(length=200), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("error_phase", sa.String(length=32), nullable=True),
        sa.Column("error_path", sa.Text(), nullable=True),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("record_json", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("stored_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("generation_id"),
    )
    op.create_index("ix_runs_created_at", "runs", ["created_at"], unique=False)
    op.create_index("ix_runs_status", "runs", ["status"], unique=False)
    op.create_table(
        "calls",
        sa.Column("generation_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("response_model", sa.String(length=200), nullable=True),
        sa.Column("temperature", sa.Float(), nullable=True),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.String(length=40), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("pacing_wait_ms", sa.Float(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("total_tokens", sa.Integer(), nullable=True),
        sa.Column("cached_tokens", sa.Integer(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=True),
        sa.Column("answers", sa.Integer(), nullable=True),
        sa.Column("reasks", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error_type", sa.String(length=200), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["generation_id"], ["runs.generation_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("generation_id", "position"),
    )
    op.create_index("ix_calls_model", "calls", ["model"], unique=False)
    op.create_table(
        "candidates",
        sa.Column("generation_id", sa.String(length=64), nullable=False),
        sa.Column("card_id", sa.String(length=8), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("direction", sa.Text(), nullable=False),
        sa.Column("hook", sa.Text(), nullable=True),
        sa.Column("card", sa.JSON(), nullable=True),
        sa.Column("median", sa.Float(), nullable=True),
        sa.Column("aggregate", sa.Float(), nullable=True),
        sa.Column("spread", sa.Integer(), nullable=True),
        sa.Column("n_ok", sa.Integer(), nullable=True),
        sa.Column("novelty_penalty", sa.Float(), nullable=True),
        sa.Column("effective_score", sa.Float(), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("selected", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["generation_id"], ["runs.generation_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("generation_id", "card_id"),
    )
    op.create_table(
        "images",
        sa.Column("generation_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("title_source", sa.String(length=32), nullable=False),
        sa.Column("caption", sa.Text(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("size", sa.String(length=32), nullable=True),
        sa.Column("quality", sa.String(length=16), nullable=True),
        sa.ForeignKeyConstraint(["generation_id"], ["runs.generation_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("generation_id"),
    )
    op.create_index("ix_images_seq", "images", ["seq"], unique=False)
    op.create_table(
        "judge_results",
        sa.Column("generation_id", sa.String(length=64), nullable=False),
        sa.Column("judge_id", sa.String(length=200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("temperature", sa.Float(), nullable=False),
        sa.Column("rubric", sa.Text(), nullable=False),
        sa.Column("profile", sa.String(length=32), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("presented_order", sa.JSON(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("output_preview", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["generation_id"], ["runs.generation_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("generation_id", "judge_id"),
    )
    op.create_index("ix_judge_results_judge_id", "judge_results", ["judge_id"], unique=False)
    op.create_table(
        "scores",
        sa.Column("generation_id", sa.String(length=64), nullable=False),
        sa.Column("card_id", sa.String(length=8), nullable=False),
        sa.Column("judge_id", sa.String(length=200), nullable=False),
        sa.Column("score", sa.Integer(), nullable=False),
        sa.Column("presented_position", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["generation_id"], ["runs.generation_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("generation_id", "card_id", "judge_id"),
    )
    op.create_table(
        "selections",
        sa.Column("generation_id", sa.String(length=64), nullable=False),
        sa.Column("aggregation", sa.String(length=32), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=True),
        sa.Column("exploration_rate", sa.Float(), nullable=False),
        sa.Column("roll", sa.Float(), nullable=True),
        sa.Column("explore_roll", sa.Float(), nullable=True),
        sa.Column("ranking", sa.JSON(), nullable=True),
        sa.Column("explore_pool", sa.JSON(), nullable=True),
        sa.Column("selected_id", sa.String(length=8), nullable=True),
        sa.Column("selected_score", sa.Float(), nullable=True),
        sa.Column("novelty_used", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["generation_id"], ["runs.generation_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("generation_id"),
    )


def downgrade() -> None:
    for table in ("images", "selections", "scores", "judge_results", "candidates", "calls"):
        op.drop_table(table)
    op.drop_index("ix_runs_status", table_name="runs")
    op.drop_index("ix_runs_created_at", table_name="runs")
    op.drop_table("runs")
