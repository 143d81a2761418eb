"""Delivery over time and by country, per campaign: the campaigns page's chart and its failures by
country, kept by the flusher as it keeps the counts by status.

The messages already counted (their latest status in ``sms_delivery_message``) are added up here: each
final one in the minute of its latest report's date, and under its report's country.

Revision ID: 9e4a1c7b2d68
Revises: 6b2f8e1d4c93
Create Date: 2026-11-26 21:40:00.000000
"""

from __future__ import annotations

from collections import Counter
from datetime import timezone

import sqlalchemy as sa
from airflow.utils.sqlalchemy import UtcDateTime
from alembic import op

revision = "9e4a1c7b2d68"
down_revision = "6b2f8e1d4c93"
branch_labels = None
depends_on = None

DELIVERED = 3
# Rows inserted per statement while adding up.
CHUNK = 5000


def upgrade() -> None:
    timeline = op.create_table(
        "sms_delivery_timeline",
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.Column("minute", UtcDateTime(), nullable=False),
        sa.Column("delivered", sa.BigInteger(), nullable=False),
        sa.Column("failed", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("conn_id", "campaign_id", "minute"),
    )
    country = op.create_table(
        "sms_delivery_country",
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.Column("country_code", sa.String(length=8), nullable=False),
        sa.Column("delivered", sa.BigInteger(), nullable=False),
        sa.Column("failed", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("conn_id", "campaign_id", "country_code"),
    )
    message = sa.table(
        "sms_delivery_message",
        sa.column("conn_id"),
        sa.column("campaign_id"),
        sa.column("status"),
        sa.column("final"),
        sa.column("country_code"),
        sa.column("reported_at", UtcDateTime()),
    )
    minutes: Counter[tuple[str, int, object, str]] = Counter()
    countries: Counter[tuple[str, int, object, str]] = Counter()
    rows = op.get_bind().execute(
        sa.select(
            message.c.conn_id,
            message.c.campaign_id,
            message.c.status,
            message.c.country_code,
            message.c.reported_at,
        ).where(message.c.final.is_(True))
    )
    for conn_id, campaign_id, status, country_code, reported_at in rows:
        outcome = "delivered" if status == DELIVERED else "failed"
        minute = reported_at.astimezone(timezone.utc).replace(second=0, microsecond=0)
        minutes[(conn_id, campaign_id, minute, outcome)] += 1
        countries[(conn_id, campaign_id, country_code or "", outcome)] += 1
    _insert(timeline, "minute", minutes)
    _insert(country, "country_code", countries)


def _insert(table: sa.Table, key: str, tallies: Counter[tuple[str, int, object, str]]) -> None:
    rows: dict[tuple[str, int, object], dict[str, object]] = {}
    for (conn_id, campaign_id, value, outcome), count in tallies.items():
        row = rows.setdefault(
            (conn_id, campaign_id, value),
            {"conn_id": conn_id, "campaign_id": campaign_id, key: value, "delivered": 0, "failed": 0},
        )
        row[outcome] = count
    values = list(rows.values())
    for start in range(0, len(values), CHUNK):
        op.get_bind().execute(sa.insert(table), values[start : start + CHUNK])


def downgrade() -> None:
    op.drop_table("sms_delivery_country")
    op.drop_table("sms_delivery_timeline")
