"""When each campaign's first report arrived.

A summary counted from a send's time reads the per-campaign counts only when every report of the
campaign arrived after the send; a campaign id the service reused (e.g. a sandbox reset) has reports
that arrived before, and is counted from its messages instead. Campaigns stored before this revision
get the arrival of their first stored report.

Revision ID: 3a9d4e6c1b52
Revises: 8c3e5b7d2f40
Create Date: 2026-11-26 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from airflow.utils.sqlalchemy import UtcDateTime
from alembic import op

revision = "3a9d4e6c1b52"
down_revision = "8c3e5b7d2f40"
branch_labels = None
depends_on = None

CAMPAIGN = "sms_delivery_campaign"


def upgrade() -> None:
    with op.batch_alter_table(CAMPAIGN) as table:
        table.add_column(sa.Column("first_received_at", UtcDateTime(), nullable=True))
    campaign = sa.table(
        CAMPAIGN,
        sa.column("conn_id"),
        sa.column("campaign_id"),
        sa.column("first_received_at"),
        sa.column("last_received_at"),
    )
    report = sa.table(
        "sms_delivery_report", sa.column("conn_id"), sa.column("campaign_id"), sa.column("received_at")
    )
    first_stored = (
        sa.select(sa.func.min(report.c.received_at))
        .where(report.c.conn_id == campaign.c.conn_id, report.c.campaign_id == campaign.c.campaign_id)
        .scalar_subquery()
    )
    # A campaign with no report left (none: prune deletes them whole) would keep its last arrival.
    op.get_bind().execute(
        sa.update(campaign).values(
            first_received_at=sa.func.coalesce(first_stored, campaign.c.last_received_at)
        )
    )
    with op.batch_alter_table(CAMPAIGN) as table:
        table.alter_column("first_received_at", existing_type=UtcDateTime(), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table(CAMPAIGN) as table:
        table.drop_column("first_received_at")
