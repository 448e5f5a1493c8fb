"""path_probes.connections: how many connections carried a throughput row's rate.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: existing rows are "not known" (read as 1).
    with op.batch_alter_table("path_probes") as batch:
        batch.add_column(sa.Column("connections", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("path_probes") as batch:
        batch.drop_column("connections")
