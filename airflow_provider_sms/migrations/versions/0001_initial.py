"""The provider's tables: the delivery reports and what the flusher keeps of them, the campaigns page's,
and the claim store's (with SmsNotifier's alert folds).

Revision ID: 71acd0083919
Revises:
Create Date: 2026-11-27 19:00:00.000000
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa
from airflow.utils.sqlalchemy import UtcDateTime
from alembic import op
from sqlalchemy.dialects import mysql

if TYPE_CHECKING:
    from datetime import datetime

revision = "71acd0083919"
down_revision = None
branch_labels = None
depends_on = None

# BIGINT, but INTEGER on SQLite, where only INTEGER PRIMARY KEY autoincrements.
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
# Airflow's ID_LEN: what a connection, DAG, run or task id may be.
ID_LENGTH = 250
# A chunk of claimed numbers' keyed digests, packed (MySQL's BLOB holds 64 KiB: a MEDIUMBLOB there).
PACKED_KEYS = sa.LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql")
# As the reports' model bounds them.
DESTINATION_LENGTH, MESSAGE_ID_LENGTH, COUNTRY_CODE_LENGTH = 32, 128, 8


def _id(name: str) -> sa.Column[str]:
    return sa.Column(name, sa.String(length=ID_LENGTH), nullable=False)


def _campaign_id() -> sa.Column[int]:
    return sa.Column("campaign_id", sa.BigInteger(), nullable=False)


def _time(name: str, *, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, UtcDateTime(), nullable=nullable)


def _count(name: str) -> sa.Column[int]:
    return sa.Column(name, sa.BigInteger(), nullable=False)


def upgrade() -> None:
    _delivery_report_tables()
    _campaign_tables()
    _claim_tables()


def _delivery_report_tables() -> None:
    op.create_table(
        "sms_delivery_report",
        sa.Column("id", ROW_ID, autoincrement=True, nullable=False),
        _id("conn_id"),
        sa.Column("digest", sa.String(length=64), nullable=False),
        _campaign_id(),
        sa.Column("destination", sa.String(length=DESTINATION_LENGTH), nullable=False),
        sa.Column("message_id", sa.String(length=MESSAGE_ID_LENGTH), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("country_code", sa.String(length=COUNTRY_CODE_LENGTH), nullable=True),
        _time("reported_at"),
        _time("received_at"),
        sa.Column("batch", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("conn_id", "digest", name="sms_delivery_report_conn_id_digest_uq"),
    )
    op.create_index(
        "idx_sms_delivery_report_campaign", "sms_delivery_report", ["conn_id", "campaign_id", "destination"]
    )
    op.create_index("idx_sms_delivery_report_batch", "sms_delivery_report", ["conn_id", "batch", "id"])
    op.create_table(
        "sms_delivery_flush",
        _id("conn_id"),
        _count("last_batch"),
        _count("reports"),
        _time("flushed_at", nullable=True),
        sa.PrimaryKeyConstraint("conn_id"),
    )
    op.create_table(
        "sms_delivery_message",
        _id("conn_id"),
        _campaign_id(),
        sa.Column("destination", sa.String(length=DESTINATION_LENGTH), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("failed", sa.Boolean(), nullable=False),
        sa.Column("country_code", sa.String(length=COUNTRY_CODE_LENGTH), nullable=True),
        _time("reported_at"),
        sa.Column("report_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("conn_id", "campaign_id", "destination"),
    )
    op.create_index(
        "idx_sms_delivery_message_failed",
        "sms_delivery_message",
        ["conn_id", "campaign_id", "failed", "destination"],
    )
    op.create_table(
        "sms_delivery_count",
        _id("conn_id"),
        _campaign_id(),
        sa.Column("status", sa.Integer(), nullable=False),
        _count("messages"),
        sa.PrimaryKeyConstraint("conn_id", "campaign_id", "status"),
    )
    op.create_table(
        "sms_delivery_campaign",
        _id("conn_id"),
        _campaign_id(),
        _count("reports"),
        _time("last_received_at"),
        sa.PrimaryKeyConstraint("conn_id", "campaign_id"),
    )
    op.create_index("idx_sms_delivery_campaign_received", "sms_delivery_campaign", ["last_received_at"])
    op.create_table(
        "sms_delivery_timeline",
        _id("conn_id"),
        _campaign_id(),
        _time("minute"),
        _count("delivered"),
        _count("failed"),
        sa.PrimaryKeyConstraint("conn_id", "campaign_id", "minute"),
    )
    op.create_table(
        "sms_delivery_country",
        _id("conn_id"),
        _campaign_id(),
        sa.Column("country_code", sa.String(length=COUNTRY_CODE_LENGTH), nullable=False),
        _count("delivered"),
        _count("failed"),
        sa.PrimaryKeyConstraint("conn_id", "campaign_id", "country_code"),
    )
    op.create_table(
        "sms_delivery_refusal",
        _id("conn_id"),
        sa.Column("reason", sa.String(length=DESTINATION_LENGTH), nullable=False),
        _time("minute"),
        sa.Column("server", sa.String(length=64), nullable=False),
        _count("refused"),
        _time("last_at"),
        sa.Column("last_detail", sa.String(length=500), nullable=False),
        sa.PrimaryKeyConstraint("conn_id", "reason", "minute", "server"),
    )


def _campaign_tables() -> None:
    op.create_table(
        "sms_campaign",
        sa.Column("id", ROW_ID, autoincrement=True, nullable=False),
        _id("dag_id"),
        _id("run_id"),
        _id("task_id"),
        sa.Column("map_index", sa.Integer(), nullable=False),
        _id("conn_id"),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        _time("sent_at"),
        _time("recorded_at"),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.Column("sent", sa.BigInteger(), server_default="0", nullable=False),
        _time("reports_pruned_at", nullable=True),
        sa.Column("by_status", sa.JSON(), nullable=True),
        sa.Column("delivered", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("failed", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("team", sa.String(length=ID_LENGTH), nullable=True),
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
        _id("conn_id"),
        _campaign_id(),
        sa.PrimaryKeyConstraint("campaign_row", "campaign_id"),
    )
    op.create_index("idx_sms_campaign_ticket_campaign", "sms_campaign_ticket", ["conn_id", "campaign_id"])
    op.create_table(
        "sms_campaign_indexer",
        sa.Column("name", sa.String(length=32), nullable=False),
        _time("read_until"),
        sa.PrimaryKeyConstraint("name"),
    )


def _claim_tables() -> None:
    op.create_table(
        "sms_claim",
        sa.Column("id", ROW_ID, autoincrement=True, nullable=False),
        _id("conn_id"),
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("per_number", sa.Boolean(), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        _id("dag_id"),
        _id("task_id"),
        _id("run_id"),
        sa.Column("map_index", sa.Integer(), nullable=False),
        _time("delivery"),
        sa.Column("delayed", sa.Boolean(), nullable=False),
        sa.Column("window_seconds", sa.Float(), nullable=False),
        sa.Column("forced", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("tickets", sa.Text(), nullable=False),
        _time("claimed_at"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("idx_sms_claim_scope", "sms_claim", ["scope", "delivery"])
    op.create_index("idx_sms_claim_task", "sms_claim", ["dag_id", "run_id", "task_id", "map_index"])
    op.create_table(
        "sms_claim_chunk",
        sa.Column("claim_id", sa.BigInteger(), nullable=False),
        sa.Column("chunk_start", sa.BigInteger(), nullable=False),
        sa.Column("numbers", sa.Integer(), nullable=False),
        sa.Column("number_keys", PACKED_KEYS, nullable=False),
        sa.PrimaryKeyConstraint("claim_id", "chunk_start"),
    )
    op.create_table(
        "sms_claim_lock",
        sa.Column("scope", sa.String(length=64), nullable=False),
        _count("decisions"),
        sa.PrimaryKeyConstraint("scope"),
    )
    op.create_table(
        "sms_alert_fold",
        _id("conn_id"),
        sa.Column("number_key", sa.String(length=32), nullable=False),
        _time("sent_at"),
        sa.Column("held", sa.Integer(), nullable=False),
        sa.Column("held_texts", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("conn_id", "number_key"),
    )


def downgrade() -> None:
    # Dropping a table drops its indexes.
    for name in (
        "sms_alert_fold",
        "sms_claim_lock",
        "sms_claim_chunk",
        "sms_claim",
        "sms_campaign_indexer",
        "sms_campaign_ticket",
        "sms_campaign",
        "sms_delivery_refusal",
        "sms_delivery_country",
        "sms_delivery_timeline",
        "sms_delivery_campaign",
        "sms_delivery_count",
        "sms_delivery_message",
        "sms_delivery_flush",
        "sms_delivery_report",
    ):
        op.drop_table(name)
