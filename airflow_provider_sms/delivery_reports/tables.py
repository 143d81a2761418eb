"""The delivery-report tables, in Airflow's metadata database, on a MetaData of their own. Not public API.

- ``sms_delivery_report``: every report, once (the unique digest refuses a retried one). ``batch`` is
  empty until the flusher puts the report in an asset event; a report is in exactly one batch.
- ``sms_delivery_flush``: per connection, the last batch made (the watermark) and the row the
  flusher locks, so that one flusher at a time works on a connection.
- ``sms_delivery_message``: per message (campaign and number), its latest status; kept by the flusher.
- ``sms_delivery_count``: per campaign, how many messages stand at each status; kept by the flusher.
- ``sms_delivery_campaign``: per campaign, how many reports and the last arrival (what the retention
  prunes by).
- ``sms_delivery_timeline``: per campaign and minute, how many messages became delivered or failed
  then (by their latest report's date): the campaigns page's chart; kept by the flusher.
- ``sms_delivery_country``: per campaign and country (as the reports name it; ``""`` when none), how
  many messages stand delivered and failed; kept by the flusher.
- ``sms_delivery_refusal``: per connection, what the receiver refused, by reason and minute, per server.

Only the insert of a report is on the receiving call's path; the others are written by the flusher,
a single writer per connection, so no request waits on a row another request holds.
"""

from __future__ import annotations

from airflow.models.base import ID_LEN
from airflow.utils.sqlalchemy import UtcDateTime
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
)

from airflow_provider_sms.models import COUNTRY_CODE_MAX_LENGTH, DESTINATION_MAX_LENGTH, MESSAGE_ID_MAX_LENGTH

# Airflow's migrations never see these tables; ours never see Airflow's.
metadata = MetaData()

# What a connection id may be (Airflow's connection.conn_id column).
CONN_ID_LENGTH = ID_LEN
# Airflow's column type: UTC on every database (SQLite and MySQL store no offset).
Timestamp = UtcDateTime
# The id column: BIGINT, but INTEGER on SQLite, where only INTEGER PRIMARY KEY autoincrements.
ReportId = BigInteger().with_variant(Integer, "sqlite")

delivery_report_table = Table(
    "sms_delivery_report",
    metadata,
    Column("id", ReportId, primary_key=True, autoincrement=True),
    Column("conn_id", String(CONN_ID_LENGTH), nullable=False),
    # SHA-256 of the connection id and the report as re-encoded: equal for a retried delivery.
    Column("digest", String(64), nullable=False),
    Column("campaign_id", BigInteger, nullable=False),
    Column("destination", String(DESTINATION_MAX_LENGTH), nullable=False),
    Column("message_id", String(MESSAGE_ID_MAX_LENGTH)),
    Column("status", Integer, nullable=False),
    Column("final", Boolean, nullable=False),
    Column("country_code", String(COUNTRY_CODE_MAX_LENGTH)),
    Column("reported_at", Timestamp, nullable=False),
    Column("received_at", Timestamp, nullable=False),
    # The flusher's batch (and asset event) the report is in; empty until then. The index below
    # serves both "the reports of batch b" and "the reports not in a batch yet" (batch IS NULL).
    Column("batch", BigInteger),
    UniqueConstraint("conn_id", "digest", name="sms_delivery_report_conn_id_digest_uq"),
    Index("idx_sms_delivery_report_campaign", "conn_id", "campaign_id", "destination"),
    Index("idx_sms_delivery_report_batch", "conn_id", "batch", "id"),
)

delivery_flush_table = Table(
    "sms_delivery_flush",
    metadata,
    Column("conn_id", String(CONN_ID_LENGTH), primary_key=True),
    Column("last_batch", BigInteger, nullable=False),
    Column("reports", BigInteger, nullable=False),
    Column("flushed_at", Timestamp),
)

delivery_message_table = Table(
    "sms_delivery_message",
    metadata,
    Column("conn_id", String(CONN_ID_LENGTH), primary_key=True),
    Column("campaign_id", BigInteger, primary_key=True),
    Column("destination", String(DESTINATION_MAX_LENGTH), primary_key=True),
    Column("status", Integer, nullable=False),
    Column("final", Boolean, nullable=False),
    # Final and not delivered: the failed numbers are read by this flag, in number order.
    Column("failed", Boolean, nullable=False),
    Column("country_code", String(COUNTRY_CODE_MAX_LENGTH)),
    Column("reported_at", Timestamp, nullable=False),
    Column("report_id", BigInteger, nullable=False),
    Index("idx_sms_delivery_message_failed", "conn_id", "campaign_id", "failed", "destination"),
)

delivery_count_table = Table(
    "sms_delivery_count",
    metadata,
    Column("conn_id", String(CONN_ID_LENGTH), primary_key=True),
    Column("campaign_id", BigInteger, primary_key=True),
    Column("status", Integer, primary_key=True),
    Column("messages", BigInteger, nullable=False),
)

delivery_campaign_table = Table(
    "sms_delivery_campaign",
    metadata,
    Column("conn_id", String(CONN_ID_LENGTH), primary_key=True),
    Column("campaign_id", BigInteger, primary_key=True),
    Column("reports", BigInteger, nullable=False),
    Column("last_received_at", Timestamp, nullable=False),
    Index("idx_sms_delivery_campaign_received", "last_received_at"),
)

delivery_timeline_table = Table(
    "sms_delivery_timeline",
    metadata,
    Column("conn_id", String(CONN_ID_LENGTH), primary_key=True),
    Column("campaign_id", BigInteger, primary_key=True),
    # The minute (UTC, seconds cut) of the latest report's date.
    Column("minute", Timestamp, primary_key=True),
    Column("delivered", BigInteger, nullable=False),
    Column("failed", BigInteger, nullable=False),
)

delivery_country_table = Table(
    "sms_delivery_country",
    metadata,
    Column("conn_id", String(CONN_ID_LENGTH), primary_key=True),
    Column("campaign_id", BigInteger, primary_key=True),
    Column("country_code", String(COUNTRY_CODE_MAX_LENGTH), primary_key=True),
    Column("delivered", BigInteger, nullable=False),
    Column("failed", BigInteger, nullable=False),
)

delivery_refusal_table = Table(
    "sms_delivery_refusal",
    metadata,
    Column("conn_id", String(CONN_ID_LENGTH), primary_key=True),
    Column("reason", String(DESTINATION_MAX_LENGTH), primary_key=True),
    Column("minute", Timestamp, primary_key=True),
    # Each API server writes its own rows: no two servers update one row.
    Column("server", String(64), primary_key=True),
    Column("refused", BigInteger, nullable=False),
    Column("last_at", Timestamp, nullable=False),
    Column("last_detail", String(500), nullable=False),
)

TABLES = (
    delivery_report_table,
    delivery_flush_table,
    delivery_message_table,
    delivery_count_table,
    delivery_campaign_table,
    delivery_timeline_table,
    delivery_country_table,
    delivery_refusal_table,
)
