"""Counting campaigns from a send's time, for a campaign id the service reused. Not public API.

The flusher keeps one latest status per (campaign, number) and counts per campaign, whatever sent
them: after a campaign id is handed out again (the sandbox after a reset), both campaigns' reports
share those rows. A summary given the send's time (``since``) reads the counts of a campaign only when
every report of it came after the send; for a campaign with earlier reports it ranks the reports that
qualify (received from ``since`` on, dated no more than :data:`REPORT_CLOCK_SKEW` before it) and takes
each number's latest among them. That read grows with the campaign: only reused ids pay it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, func, not_, select

from airflow_provider_sms.delivery_reports.tables import (
    delivery_campaign_table,
    delivery_count_table,
    delivery_report_table,
)
from airflow_provider_sms.models import DELIVERED_STATUSES

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Sequence
    from datetime import datetime

    from sqlalchemy import ColumnElement, Select, Subquery
    from sqlalchemy.orm import Session

# How much earlier than the send a report of its campaign may be dated: the service's clock and ours
# may disagree. A summary counted from a send leaves out reports dated earlier still (a reused id's).
REPORT_CLOCK_SKEW = timedelta(minutes=1)


def counts_with_arrival(*columns: Any) -> Select[Any]:
    """The kept counts (campaign, status, messages) with their campaign's first arrival and first date,
    in one statement (``columns`` first, e.g. those of a table joined on by the caller): what decides
    whether a campaign's counts may be read from a send's time on (:func:`reported_before`)."""
    counts = delivery_count_table.c
    campaigns = delivery_campaign_table.c
    return select(
        *columns,
        counts.conn_id,
        counts.campaign_id,
        counts.status,
        counts.messages,
        campaigns.first_received_at,
        campaigns.first_reported_at,
    ).join(
        delivery_campaign_table,
        and_(campaigns.conn_id == counts.conn_id, campaigns.campaign_id == counts.campaign_id),
    )


def read_counts(
    session: Session, conn_id: str, campaign_ids: Sequence[int], since: datetime | None, into: Counter[int]
) -> set[int]:
    """Add the kept counts (messages by status) of ``campaign_ids`` to ``into``, leaving out the
    campaigns with reports from before ``since``, which are returned (none without ``since``).

    One statement: the counts and each campaign's first arrival and date are read together, so a
    flusher committing meanwhile cannot make an id look new while its counts hold the earlier campaign.
    """
    counts = delivery_count_table.c
    rows = session.execute(
        counts_with_arrival().where(counts.conn_id == conn_id, counts.campaign_id.in_(list(campaign_ids)))
    ).all()
    reused = (
        {
            row.campaign_id
            for row in rows
            if reported_before(row.first_received_at, row.first_reported_at, since)
        }
        if since is not None
        else set()
    )
    for row in rows:
        if row.campaign_id not in reused:
            into[int(row.status)] += int(row.messages)
    return reused


def reported_before(first_received_at: datetime, first_reported_at: datetime, since: datetime) -> bool:
    """Whether a campaign id's first report came before ``since`` (arrived before it, or dated more than
    :data:`REPORT_CLOCK_SKEW` before it): then its kept counts may hold an earlier campaign's reports."""
    return first_received_at < since or first_reported_at < since - REPORT_CLOCK_SKEW


def _qualifies(since: datetime) -> ColumnElement[bool]:
    reports = delivery_report_table.c
    return and_(reports.received_at >= since, reports.reported_at >= since - REPORT_CLOCK_SKEW)


def latest_since(conn_id: str, campaign_ids: Sequence[int], since: datetime) -> Subquery:
    """Each message of ``campaign_ids`` at its latest qualifying report (``rank`` 1), with the rule the
    flusher applies (a final status first, then the later date, then the later id); only reports in a
    batch, as the counts."""
    reports = delivery_report_table.c
    rank = func.row_number().over(
        partition_by=(reports.campaign_id, reports.destination),
        order_by=(reports.final.desc(), reports.reported_at.desc(), reports.id.desc()),
    )
    return (
        select(reports.destination, reports.status, reports.final, rank.label("rank"))
        .where(
            reports.conn_id == conn_id,
            reports.campaign_id.in_(list(campaign_ids)),
            reports.batch.is_not(None),
            _qualifies(since),
        )
        .subquery()
    )


def count_since(
    session: Session, conn_id: str, campaign_ids: Sequence[int], since: datetime, into: Counter[int]
) -> int:
    """Add the messages by status of ``campaign_ids`` counted from ``since`` to ``into``; return how many
    of their reports were left out (arrived before ``since``, or dated too early)."""
    latest = latest_since(conn_id, campaign_ids, since)
    for status, count in session.execute(
        select(latest.c.status, func.count()).where(latest.c.rank == 1).group_by(latest.c.status)
    ):
        into[int(status)] += int(count)
    reports = delivery_report_table.c
    left_out = session.scalar(
        select(func.count()).where(
            reports.conn_id == conn_id,
            reports.campaign_id.in_(list(campaign_ids)),
            reports.batch.is_not(None),
            not_(_qualifies(since)),
        )
    )
    return int(left_out or 0)


def failed_since(conn_id: str, campaign_ids: Sequence[int], since: datetime) -> Any:
    """A SELECT of the failed numbers (``destination``) of ``campaign_ids`` counted from ``since``."""
    latest = latest_since(conn_id, campaign_ids, since)
    return select(latest.c.destination).where(
        latest.c.rank == 1, latest.c.final.is_(True), latest.c.status.not_in(list(DELIVERED_STATUSES))
    )
