"""Initial schema: every table in pftp_coordinator.models.

Revision ID: 0001
Revises:
Create Date: 2026-11-21 06:16:52.719744
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=1024), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("piece_size", sa.BigInteger(), nullable=True),
        sa.Column("piece_sha256", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "job_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job", sa.String(length=100), nullable=False),
        sa.Column("runner", sa.String(length=200), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ok", sa.Boolean(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job"),
    )
    op.create_table(
        "mirrors",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("region", sa.String(length=100), nullable=True),
        sa.Column("asn", sa.BigInteger(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("last_probe_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_scan_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "predictor_fits",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("a", sa.Float(), nullable=False),
        sa.Column("b", sa.Float(), nullable=False),
        sa.Column("r2", sa.Float(), nullable=False),
        sa.Column("n_samples", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "agents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("mirror_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["mirror_id"], ["mirrors.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("mirror_id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_table(
        "congestion_penalties",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("mirror_a_id", sa.Integer(), nullable=False),
        sa.Column("mirror_b_id", sa.Integer(), nullable=False),
        sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reports", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["mirror_a_id"], ["mirrors.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["mirror_b_id"], ["mirrors.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("mirror_a_id", "mirror_b_id"),
    )
    op.create_table(
        "downloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("file_id", sa.Integer(), nullable=True),
        sa.Column("file_name", sa.String(length=1024), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("sha256_ok", sa.Boolean(), nullable=False),
        sa.Column("access_bandwidth_bps", sa.BigInteger(), nullable=True),
        sa.Column("mode", sa.String(length=16), nullable=True),
        sa.Column("client_addr", sa.String(length=64), nullable=True),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["file_id"], ["files.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_downloads_reported_at", "downloads", ["reported_at"], unique=False)
    op.create_index("ix_downloads_request_id", "downloads", ["request_id"], unique=False)

    op.create_table(
        "mirror_urls",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("mirror_id", sa.Integer(), nullable=False),
        sa.Column("protocol", sa.String(length=10), nullable=False),
        sa.Column("base_url", sa.String(length=2000), nullable=False),
        sa.ForeignKeyConstraint(["mirror_id"], ["mirrors.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("mirror_id", "protocol"),
    )
    op.create_table(
        "path_probes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("mirror_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("method", sa.String(length=32), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("rtt_s", sa.Float(), nullable=True),
        sa.Column("loss", sa.Float(), nullable=True),
        sa.Column("capacity_bps", sa.Float(), nullable=True),
        sa.Column("throughput_bps", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["mirror_id"], ["mirrors.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_path_probes_mirror_ts", "path_probes", ["mirror_id", "ts"], unique=False)

    op.create_table(
        "replicas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("mirror_id", sa.Integer(), nullable=False),
        sa.Column("file_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(length=2000), nullable=False),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.Column("size_seen", sa.BigInteger(), nullable=True),
        sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["file_id"], ["files.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["mirror_id"], ["mirrors.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("mirror_id", "file_id"),
    )
    op.create_index("ix_replicas_file", "replicas", ["file_id"], unique=False)

    op.create_table(
        "utilization_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("mirror_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cpu_percent", sa.Float(), nullable=False),
        sa.Column("memory_percent", sa.Float(), nullable=False),
        sa.Column("load1", sa.Float(), nullable=True),
        sa.Column("load5", sa.Float(), nullable=True),
        sa.Column("load15", sa.Float(), nullable=True),
        sa.Column("nic_tx_bps", sa.Float(), nullable=True),
        sa.Column("connections", sa.Integer(), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["mirror_id"], ["mirrors.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_utilization_mirror_ts", "utilization_samples", ["mirror_id", "ts"], unique=False
    )

    op.create_table(
        "mirror_reports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("download_id", sa.Integer(), nullable=False),
        sa.Column("mirror_id", sa.Integer(), nullable=True),
        sa.Column("mirror_name", sa.String(length=200), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("throughput_bps", sa.Float(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("slow", sa.Boolean(), nullable=False),
        sa.Column("congested", sa.Boolean(), nullable=False),
        sa.Column("bad_data", sa.Boolean(), nullable=False),
        sa.Column("congested_with", sa.JSON(), nullable=True),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["download_id"], ["downloads.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["mirror_id"], ["mirrors.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_mirror_reports_mirror", "mirror_reports", ["mirror_id"], unique=False)


def downgrade() -> None:
    op.drop_table("mirror_reports")
    op.drop_table("utilization_samples")
    op.drop_table("replicas")
    op.drop_table("path_probes")
    op.drop_table("mirror_urls")
    op.drop_table("downloads")
    op.drop_table("congestion_penalties")
    op.drop_table("agents")
    op.drop_table("predictor_fits")
    op.drop_table("mirrors")
    op.drop_table("job_runs")
    op.drop_table("files")
