"""Context injectors: ``contexts`` (one row per run with context injectors: the
date used, where the guidance went, the guidance) and ``context_injectors`` (one row per
injector: applied or not, why, the probability and the roll, its lines and metadata).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "contexts",
        sa.Column("generation_id", sa.String(length=64), nullable=False),
        sa.Column("date_used", sa.String(length=10), nullable=False),
        sa.Column("date_source", sa.String(length=8), nullable=False),
        sa.Column("injection_location", sa.String(length=8), nullable=False),
        sa.Column("guidance", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["generation_id"], ["runs.generation_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("generation_id"),
    )
    op.create_table(
        "context_injectors",
        sa.Column("generation_id", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=8), nullable=False),
        sa.Column("module", sa.Text(), nullable=True),
        sa.Column("applied", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.String(length=200), nullable=False),
        sa.Column("probability", sa.Float(), nullable=True),
        sa.Column("roll", sa.Float(), nullable=True),
        sa.Column("guidance", sa.JSON(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["generation_id"], ["runs.generation_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("generation_id", "name"),
    )


def downgrade() -> None:
    op.drop_table("context_injectors")
    op.drop_table("contexts")
