"""Create the delivery-report table.

Revision ID: 5d1f0c2a9b71
Revises:
Create Date: 2026-11-24 00:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from airflow.utils.sqlalchemy import UtcDateTime
from alembic import op

revision = "5d1f0c2a9b71"
down_revision = None
branch_labels = None
depends_on = None

TABLE = "sms_delivery_report"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.Column("destination", sa.String(length=32), nullable=False),
        sa.Column("message_id", sa.String(length=128), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("country_code", sa.String(length=8), nullable=True),
        sa.Column("reported_at", UtcDateTime(), nullable=False),
        sa.Column("received_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("conn_id", "digest", name="sms_delivery_report_conn_id_digest_uq"),
    )
    op.create_index("idx_sms_delivery_report_campaign", TABLE, ["conn_id", "campaign_id", "destination"])


def downgrade() -> None:
    op.drop_table(TABLE)
