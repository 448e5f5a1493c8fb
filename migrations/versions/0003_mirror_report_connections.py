"""mirror_reports.connections: how many connections to the mirror a client's own
trials kept (the first and the extra ones that paid).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28 12:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: existing rows (and clients that do not say) are "not known".
    with op.batch_alter_table("mirror_reports") as batch:
        batch.add_column(sa.Column("connections", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("mirror_reports") as batch:
        batch.drop_column("connections")
