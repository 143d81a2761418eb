"""The durable record of delivery reports: one table in Airflow's metadata database. Not public API.

A report is stored once per connection: the same report posted again (the service retries until it
gets a 2xx) has the same digest, which the table's unique key refuses. The API server's receiver
writes here; its summary endpoint reads here. Imported on the API server only.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import TYPE_CHECKING

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
    func,
    select,
)

from airflow_provider_sms import codec
from airflow_provider_sms.delivery_reports.summary import DeliverySummary
from airflow_provider_sms.models import (
    DELIVERED_STATUSES,
    DELIVERY_STATUSES,
    PENDING_DELIVERY_STATUSES,
    DeliveryReport,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy.orm import Session

TABLE_NAME = "sms_delivery_report"
# A table of our own, on a MetaData of our own: Airflow's migrations never see it, ours never see Airflow's.
metadata = MetaData()


delivery_report_table = Table(
    TABLE_NAME,
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("conn_id", String(250), nullable=False),
    # SHA-256 of the connection id and the report as re-encoded: equal for a retried delivery.
    Column("digest", String(64), nullable=False),
    Column("campaign_id", BigInteger, nullable=False),
    Column("destination", String(32), nullable=False),
    Column("message_id", String(128)),
    Column("status", Integer, nullable=False),
    Column("final", Boolean, nullable=False),
    Column("country_code", String(8)),
    # Airflow's column type: UTC on every database (SQLite and MySQL store no offset).
    Column("reported_at", UtcDateTime, nullable=False),
    Column("received_at", UtcDateTime, nullable=False),
    UniqueConstraint("conn_id", "digest", name="sms_delivery_report_conn_id_digest_uq"),
    Index("idx_sms_delivery_report_campaign", "conn_id", "campaign_id", "destination"),
)


def report_digest(conn_id: str, report: DeliveryReport) -> str:
    """What makes a report the same report: its connection and every field, as re-encoded."""
    return hashlib.sha256(conn_id.encode() + b"\0" + codec.encode_delivery_report(report)).hexdigest()


def insert_report(session: Session, conn_id: str, report: DeliveryReport) -> None:
    """Add ``report`` to the table in ``session``'s transaction; a duplicate raises IntegrityError."""
    session.execute(
        delivery_report_table.insert().values(
            conn_id=conn_id,
            digest=report_digest(conn_id, report),
            campaign_id=report.campaign_id,
            destination=report.destination,
            message_id=report.message_id,
            status=report.status,
            final=report.final,
            country_code=report.country_code,
            reported_at=report.date.astimezone(timezone.utc),
            received_at=datetime.now(timezone.utc),
        )
    )


def campaign_summary(
    session: Session, conn_id: str, campaign_ids: Sequence[int], *, with_failed: bool = False
) -> DeliverySummary:
    """Where the messages of ``campaign_ids`` stand: each at its latest status (final first, then date).

    :param with_failed: also list the numbers whose final status is not ``delivered``.
    """
    columns = delivery_report_table.c
    rank = (
        func.row_number()
        .over(
            partition_by=(columns.campaign_id, columns.destination),
            order_by=(columns.final.desc(), columns.reported_at.desc(), columns.id.desc()),
        )
        .label("rank")
    )
    latest = (
        select(columns.destination, columns.status, columns.final, rank)
        .where(columns.conn_id == conn_id, columns.campaign_id.in_(list(campaign_ids)))
        .subquery()
    )
    counts = session.execute(
        select(latest.c.status, func.count()).where(latest.c.rank == 1).group_by(latest.c.status)
    ).all()
    by_status = {DELIVERY_STATUSES.get(status, f"status {status}"): count for status, count in counts}
    final_statuses = [status for status, _ in counts if status not in PENDING_DELIVERY_STATUSES]
    failed_statuses = [status for status in final_statuses if status not in DELIVERED_STATUSES]
    failed: list[str] | None = None
    if with_failed:
        failed = list(
            session.scalars(
                select(latest.c.destination)
                .where(latest.c.rank == 1, latest.c.status.in_(failed_statuses))
                .order_by(latest.c.destination)
            )
        )
    return DeliverySummary(
        campaign_ids=list(campaign_ids),
        reported=sum(count for _, count in counts),
        by_status=by_status,
        final=sum(count for status, count in counts if status in final_statuses),
        failed_count=sum(count for status, count in counts if status in failed_statuses),
        failed=failed,
    )
