"""mirror_reports.access_limited: the client's access link was full during the
download, so the reported rate is a floor of what the mirror gives, not its rate.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 08:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Existing rows were taken as the mirror's rate: they stay so (false).
    with op.batch_alter_table("mirror_reports") as batch:
        batch.add_column(
            sa.Column("access_limited", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("mirror_reports") as batch:
        batch.drop_column("access_limited")
