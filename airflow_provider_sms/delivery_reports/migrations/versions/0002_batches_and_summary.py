"""Batches of reports, and the tables of the summary and the refusal counts.

Reports stored before this revision each had an asset event of their own: they are marked batch 0
(no new event is made for them) and counted into the new summary tables here.

Revision ID: 8c3e5b7d2f40
Revises: 5d1f0c2a9b71
Create Date: 2026-11-25 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from airflow.utils.sqlalchemy import UtcDateTime
from alembic import op

revision = "8c3e5b7d2f40"
down_revision = "5d1f0c2a9b71"
branch_labels = None
depends_on = None

REPORT = "sms_delivery_report"
DELIVERED = 3


def upgrade() -> None:
    with op.batch_alter_table(REPORT) as table:
        table.add_column(sa.Column("batch", sa.BigInteger(), nullable=True))
        table.create_index("idx_sms_delivery_report_batch", ["conn_id", "batch", "id"])
    op.create_table(
        "sms_delivery_flush",
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("last_batch", sa.BigInteger(), nullable=False),
        sa.Column("reports", sa.BigInteger(), nullable=False),
        sa.Column("flushed_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("conn_id"),
    )
    message = op.create_table(
        "sms_delivery_message",
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.Column("destination", sa.String(length=32), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("failed", sa.Boolean(), nullable=False),
        sa.Column("country_code", sa.String(length=8), nullable=True),
        sa.Column("reported_at", UtcDateTime(), nullable=False),
        sa.Column("report_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("conn_id", "campaign_id", "destination"),
    )
    op.create_index(
        "idx_sms_delivery_message_failed",
        "sms_delivery_message",
        ["conn_id", "campaign_id", "failed", "destination"],
    )
    count = op.create_table(
        "sms_delivery_count",
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("messages", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("conn_id", "campaign_id", "status"),
    )
    campaign = op.create_table(
        "sms_delivery_campaign",
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.Column("reports", sa.BigInteger(), nullable=False),
        sa.Column("first_reported_at", UtcDateTime(), nullable=False),
        sa.Column("last_received_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("conn_id", "campaign_id"),
    )
    op.create_index("idx_sms_delivery_campaign_received", "sms_delivery_campaign", ["last_received_at"])
    op.create_table(
        "sms_delivery_refusal",
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("minute", UtcDateTime(), nullable=False),
        sa.Column("server", sa.String(length=64), nullable=False),
        sa.Column("refused", sa.BigInteger(), nullable=False),
        sa.Column("last_at", UtcDateTime(), nullable=False),
        sa.Column("last_detail", sa.String(length=500), nullable=False),
        sa.PrimaryKeyConstraint("conn_id", "reason", "minute", "server"),
    )
    _count_reports_stored_before(message, count, campaign)


def _count_reports_stored_before(message: sa.Table, count: sa.Table, campaign: sa.Table) -> None:
    """Mark the reports already stored as batch 0 and count them into the summary's tables."""
    bind = op.get_bind()
    report = sa.table(
        REPORT,
        *(
            sa.column(name)
            for name in (
                "id",
                "conn_id",
                "campaign_id",
                "destination",
                "status",
                "final",
                "country_code",
                "reported_at",
                "received_at",
                "batch",
            )
        ),
    )
    flush = sa.table(
        "sms_delivery_flush", sa.column("conn_id"), sa.column("last_batch"), sa.column("reports")
    )
    bind.execute(sa.update(report).values(batch=0))
    rank = (
        sa.func.row_number()
        .over(
            partition_by=(report.c.conn_id, report.c.campaign_id, report.c.destination),
            order_by=(report.c.final.desc(), report.c.reported_at.desc(), report.c.id.desc()),
        )
        .label("rank")
    )
    ranked = sa.select(report, rank).subquery()
    failed = sa.and_(ranked.c.final, ranked.c.status != DELIVERED)
    bind.execute(
        sa.insert(message).from_select(
            [c.name for c in message.c],
            sa.select(
                ranked.c.conn_id,
                ranked.c.campaign_id,
                ranked.c.destination,
                ranked.c.status,
                ranked.c.final,
                sa.case((failed, sa.true()), else_=sa.false()),
                ranked.c.country_code,
                ranked.c.reported_at,
                ranked.c.id,
            ).where(ranked.c.rank == 1),
        )
    )
    bind.execute(
        sa.insert(count).from_select(
            ["conn_id", "campaign_id", "status", "messages"],
            sa.select(message.c.conn_id, message.c.campaign_id, message.c.status, sa.func.count()).group_by(
                message.c.conn_id, message.c.campaign_id, message.c.status
            ),
        )
    )
    bind.execute(
        sa.insert(campaign).from_select(
            ["conn_id", "campaign_id", "reports", "first_reported_at", "last_received_at"],
            sa.select(
                report.c.conn_id,
                report.c.campaign_id,
                sa.func.count(),
                sa.func.min(report.c.reported_at),
                sa.func.max(report.c.received_at),
            ).group_by(report.c.conn_id, report.c.campaign_id),
        )
    )
    bind.execute(
        sa.insert(flush).from_select(
            ["conn_id", "last_batch", "reports"],
            sa.select(report.c.conn_id, sa.literal(0), sa.func.count()).group_by(report.c.conn_id),
        )
    )


def downgrade() -> None:
    for name in (
        "sms_delivery_refusal",
        "sms_delivery_campaign",
        "sms_delivery_count",
        "sms_delivery_message",
        "sms_delivery_flush",
    ):
        op.drop_table(name)
    with op.batch_alter_table(REPORT) as table:
        table.drop_index("idx_sms_delivery_report_batch")
        table.drop_column("batch")
