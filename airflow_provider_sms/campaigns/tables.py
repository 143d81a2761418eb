"""The campaigns page's tables, in Airflow's metadata database beside the delivery-report tables (on
their MetaData: one migration chain, made by ``airflow db migrate``). Not public API.

- ``sms_campaign``: one row per campaign a send task instance sent (or may have sent), copied from its
  XCom record by the indexer; ``record`` holds the record as the task pushed it (no phone number).
- ``sms_campaign_ticket``: the service's campaign id of each batch, to find a campaign's delivery
  reports (``sms_delivery_count`` and the others are keyed by connection and campaign id).
- ``sms_campaign_indexer``: how far the indexer has read the XCom table, and the row it locks, so
  that one API server at a time indexes.
"""

from __future__ import annotations

from airflow.models.base import ID_LEN
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Index,
    Integer,
    String,
    Table,
    UniqueConstraint,
)

from airflow_provider_sms.delivery_reports.tables import CONN_ID_LENGTH, ReportId, Timestamp, metadata

campaign_table = Table(
    "sms_campaign",
    metadata,
    Column("id", ReportId, primary_key=True, autoincrement=True),
    Column("dag_id", String(ID_LEN), nullable=False),
    Column("run_id", String(ID_LEN), nullable=False),
    Column("task_id", String(ID_LEN), nullable=False),
    Column("map_index", Integer, nullable=False),
    Column("conn_id", String(CONN_ID_LENGTH), nullable=False),
    # sent, partly_sent or maybe_sent.
    Column("outcome", String(16), nullable=False),
    Column("sent_at", Timestamp, nullable=False),
    # The XCom row's time: a later push of the same campaign (a retry that resumed it) replaces it.
    Column("recorded_at", Timestamp, nullable=False),
    Column("record", JSON, nullable=False),
    # The record's ``sent`` (numbers the service accepted): the list's delivery filter compares the
    # kept counts with it in SQL.
    Column("sent", BigInteger, nullable=False, server_default="0"),
    # When the retention deleted its delivery reports (``prune-delivery-reports``): its delivery is then
    # unknown, not "not yet final".
    Column("reports_pruned_at", Timestamp, nullable=True),
    # Its delivery, kept by the flusher and the indexer (:mod:`.totals`), so that a page of the list
    # reads it with its rows: messages by status code (``{"3": 950, ...}``), of which delivered and
    # failed (final, not delivered).
    Column("by_status", JSON, nullable=True),
    Column("delivered", BigInteger, nullable=False, server_default="0"),
    Column("failed", BigInteger, nullable=False, server_default="0"),
    # The team the campaign was sent under, as the indexer found its DAG's bundle: "" for none (no
    # multi-team mode, or a bundle of no team); NULL when its DAG had no row. Only the users who may read
    # every DAG see a campaign whose DAG no longer stands under this team.
    Column("team", String(ID_LEN), nullable=True),
    # A task instance sends one campaign per send guard: a new one (the guard deleted, the task cleared)
    # starts at another time and gets its own row.
    UniqueConstraint("dag_id", "run_id", "task_id", "map_index", "sent_at", name="sms_campaign_task_uq"),
    Index("idx_sms_campaign_sent", "sent_at", "id"),
    Index("idx_sms_campaign_dag_sent", "dag_id", "sent_at"),
    Index("idx_sms_campaign_run", "dag_id", "run_id"),
)

campaign_ticket_table = Table(
    "sms_campaign_ticket",
    metadata,
    Column("campaign_row", BigInteger, primary_key=True),
    Column("conn_id", String(CONN_ID_LENGTH), nullable=False),
    Column("campaign_id", BigInteger, primary_key=True),
    Index("idx_sms_campaign_ticket_campaign", "conn_id", "campaign_id"),
)

campaign_indexer_table = Table(
    "sms_campaign_indexer",
    metadata,
    Column("name", String(32), primary_key=True),
    # The time of the last XCom row read (rows are read in time order).
    Column("read_until", Timestamp, nullable=False),
)

TABLES = (campaign_table, campaign_ticket_table, campaign_indexer_table)
