"""The campaigns page's tables: the campaigns the send tasks recorded, their tickets, the indexer's place.

The indexer fills them from the send tasks' XCom records on its first look, records pushed before
this revision included (as long as Airflow still keeps those XComs).

Revision ID: 6b2f8e1d4c93
Revises: 3a9d4e6c1b52
Create Date: 2026-11-26 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from airflow.utils.sqlalchemy import UtcDateTime
from alembic import op

revision = "6b2f8e1d4c93"
down_revision = "3a9d4e6c1b52"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "sms_campaign",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("task_id", sa.String(length=250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("sent_at", UtcDateTime(), nullable=False),
        sa.Column("recorded_at", UtcDateTime(), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "dag_id", "run_id", "task_id", "map_index", "sent_at", name="sms_campaign_task_uq"
        ),
    )
    op.create_index("idx_sms_campaign_sent", "sms_campaign", ["sent_at", "id"])
    op.create_index("idx_sms_campaign_dag_sent", "sms_campaign", ["dag_id", "sent_at"])
    op.create_index("idx_sms_campaign_run", "sms_campaign", ["dag_id", "run_id"])
    op.create_table(
        "sms_campaign_ticket",
        sa.Column("campaign_row", sa.BigInteger(), nullable=False),
        sa.Column("conn_id", sa.String(length=250), nullable=False),
        sa.Column("campaign_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("campaign_row", "campaign_id"),
    )
    op.create_index("idx_sms_campaign_ticket_campaign", "sms_campaign_ticket", ["conn_id", "campaign_id"])
    op.create_table(
        "sms_campaign_indexer",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("read_until", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("sms_campaign_indexer")
    op.drop_index("idx_sms_campaign_ticket_campaign", table_name="sms_campaign_ticket")
    op.drop_table("sms_campaign_ticket")
    op.drop_index("idx_sms_campaign_run", table_name="sms_campaign")
    op.drop_index("idx_sms_campaign_dag_sent", table_name="sms_campaign")
    op.drop_index("idx_sms_campaign_sent", table_name="sms_campaign")
    op.drop_table("sms_campaign")
