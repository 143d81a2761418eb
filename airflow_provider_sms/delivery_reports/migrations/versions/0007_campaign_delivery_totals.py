"""Each campaign's delivery kept on its row, so that a page of the campaigns list reads it with its rows:
``by_status`` (messages by status code), ``delivered``, ``failed`` (final, not delivered) and
``reused_ids`` (a ticket had reports from before the send: no totals kept, the page counts it from the
reports). Kept from now on by the flusher and the indexer (``airflow_provider_sms.campaigns.totals``);
filled here, for the campaigns already copied, from the counts the flusher kept, as the page counted
them: each ticket's counts summed, unless its first report arrived before the campaign's send or is
dated more than a minute before it. Campaigns whose reports were pruned are left at zero (their
delivery is unknown).

Revision ID: 7f3b1d9e5a26
Revises: 2c7e5a9f3d14
Create Date: 2026-11-27 05:00:00.000000
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import timedelta

import sqlalchemy as sa
from airflow.utils.sqlalchemy import UtcDateTime
from alembic import op

revision = "7f3b1d9e5a26"
down_revision = "2c7e5a9f3d14"
branch_labels = None
depends_on = None

# As the page counts them (airflow_provider_sms.models and .counted_since at this revision).
DELIVERED = frozenset({3})
PENDING = frozenset({1})
REPORT_CLOCK_SKEW = timedelta(minutes=1)
# Campaign rows read and updated per statement while filling the columns.
CHUNK = 500


def upgrade() -> None:
    op.add_column("sms_campaign", sa.Column("by_status", sa.JSON(), nullable=True))
    op.add_column("sms_campaign", sa.Column("delivered", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("sms_campaign", sa.Column("failed", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column(
        "sms_campaign", sa.Column("reused_ids", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    campaign = sa.table(
        "sms_campaign",
        sa.column("id"),
        sa.column("sent_at", UtcDateTime()),
        sa.column("reports_pruned_at", UtcDateTime()),
        sa.column("by_status", sa.JSON()),
        sa.column("delivered"),
        sa.column("failed"),
        sa.column("reused_ids", sa.Boolean()),
    )
    ticket = sa.table(
        "sms_campaign_ticket", sa.column("campaign_row"), sa.column("conn_id"), sa.column("campaign_id")
    )
    count = sa.table(
        "sms_delivery_count",
        sa.column("conn_id"),
        sa.column("campaign_id"),
        sa.column("status"),
        sa.column("messages"),
    )
    arrival = sa.table(
        "sms_delivery_campaign",
        sa.column("conn_id"),
        sa.column("campaign_id"),
        sa.column("first_received_at", UtcDateTime()),
        sa.column("first_reported_at", UtcDateTime()),
    )
    bind = op.get_bind()
    sent_at = dict(
        bind.execute(
            sa.select(campaign.c.id, campaign.c.sent_at).where(campaign.c.reports_pruned_at.is_(None))
        ).all()
    )
    ids = sorted(sent_at)
    update = (
        sa.update(campaign)
        .where(campaign.c.id == sa.bindparam("row_id"))
        .values(
            by_status=sa.bindparam("by_status"),
            delivered=sa.bindparam("delivered"),
            failed=sa.bindparam("failed"),
            reused_ids=sa.bindparam("reused_ids"),
        )
    )
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        statuses: dict[int, Counter[int]] = defaultdict(Counter)
        reused: set[int] = set()
        found = bind.execute(
            sa.select(
                ticket.c.campaign_row,
                count.c.status,
                count.c.messages,
                arrival.c.first_received_at,
                arrival.c.first_reported_at,
            )
            .select_from(
                count.join(
                    arrival,
                    sa.and_(
                        arrival.c.conn_id == count.c.conn_id, arrival.c.campaign_id == count.c.campaign_id
                    ),
                ).join(
                    ticket,
                    sa.and_(ticket.c.conn_id == count.c.conn_id, ticket.c.campaign_id == count.c.campaign_id),
                )
            )
            .where(ticket.c.campaign_row.in_(chunk))
        )
        for row_id, status, messages, first_received_at, first_reported_at in found:
            since = sent_at[row_id]
            if first_received_at < since or first_reported_at < since - REPORT_CLOCK_SKEW:
                reused.add(row_id)
            else:
                statuses[row_id][int(status)] += int(messages)
        values = []
        for row_id in chunk:
            kept = statuses.get(row_id, Counter())
            delivered = sum(n for status, n in kept.items() if status in DELIVERED)
            final = sum(n for status, n in kept.items() if status not in PENDING)
            values.append(
                {"row_id": row_id, "by_status": {}, "delivered": 0, "failed": 0, "reused_ids": True}
                if row_id in reused
                else {
                    "row_id": row_id,
                    "by_status": {str(status): n for status, n in sorted(kept.items()) if n},
                    "delivered": delivered,
                    "failed": final - delivered,
                    "reused_ids": False,
                }
            )
        if values:
            bind.execute(update, values)


def downgrade() -> None:
    with op.batch_alter_table("sms_campaign") as batch:
        batch.drop_column("reused_ids")
        batch.drop_column("failed")
        batch.drop_column("delivered")
        batch.drop_column("by_status")
