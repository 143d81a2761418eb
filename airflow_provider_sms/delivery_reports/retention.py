"""Pruning old delivery reports: ``python -m airflow_provider_sms prune-delivery-reports``. Not public API.

The report table grows by a row per report. A campaign is pruned whole (its reports, latest statuses,
counts and row; the campaigns page marks it, its delivery then unknown) once its last report arrived
longer ago than the retention (default 90 days, ``[sms] delivery_report_retention_days``). A report not
yet in a batch (asset event) is never removed: the connection's flusher row is locked while a campaign
is pruned, and only reports in a batch are deleted; a campaign that still has one waiting is kept and
reported. The asset events themselves are Airflow's (``airflow db clean`` prunes them).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow.providers.common.compat.sdk import conf
from sqlalchemy import delete, func, select, update

from airflow_provider_sms.delivery_reports.tables import (
    delivery_campaign_table,
    delivery_count_table,
    delivery_flush_table,
    delivery_message_table,
    delivery_report_table,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

DEFAULT_RETENTION_DAYS = 90.0


def report_retention() -> dt.timedelta:
    """How long a campaign is kept after its last report (``[sms] delivery_report_retention_days``)."""
    days = conf.getfloat("sms", "delivery_report_retention_days", fallback=DEFAULT_RETENTION_DAYS)
    return dt.timedelta(days=days)


@dataclass
class ReportsPruned:
    """What a prune of delivery reports deleted and kept."""

    campaigns: list[tuple[str, int]] = field(default_factory=list)
    reports: int = 0
    waiting: list[tuple[str, int]] = field(default_factory=list)

    def summary(self, *, dry_run: bool) -> str:
        """One line: how many campaigns and reports (would have) gone, and how many were kept."""
        verb = "would delete" if dry_run else "deleted"
        line = f"{verb} {len(self.campaigns)} campaign(s) with {self.reports} delivery report(s)"
        if self.waiting:
            line += f"; kept {len(self.waiting)} campaign(s) with reports not yet in an asset event"
        return line


def prune_reports(session: Session, *, older_than: dt.timedelta, dry_run: bool = False) -> ReportsPruned:
    """Delete the campaigns whose last report arrived before now - ``older_than``, in ``session``.

    :param dry_run: count what would be deleted; delete nothing (the caller rolls back).
    """
    cutoff = dt.datetime.now(dt.timezone.utc) - older_than
    campaigns = delivery_campaign_table.c
    old = session.execute(
        select(campaigns.conn_id, campaigns.campaign_id)
        .where(campaigns.last_received_at < cutoff)
        .order_by(campaigns.conn_id, campaigns.campaign_id)
    ).all()
    pruned = ReportsPruned()
    reports = delivery_report_table.c
    locked: set[str] = set()
    for conn_id, campaign_id in old:
        if conn_id not in locked:
            # The flusher of this connection waits until this transaction ends.
            session.execute(
                select(delivery_flush_table.c.conn_id)
                .where(delivery_flush_table.c.conn_id == conn_id)
                .with_for_update()
            )
            locked.add(conn_id)
        of_campaign = (reports.conn_id == conn_id) & (reports.campaign_id == campaign_id)
        if session.scalar(select(func.count()).where(of_campaign, reports.batch.is_(None))):
            pruned.waiting.append((conn_id, campaign_id))
            continue
        pruned.campaigns.append((conn_id, campaign_id))
        pruned.reports += session.scalar(select(func.count()).where(of_campaign)) or 0
        if dry_run:
            continue
        session.execute(delete(delivery_report_table).where(of_campaign, reports.batch.is_not(None)))
        for table in (delivery_message_table, delivery_count_table, delivery_campaign_table):
            session.execute(
                delete(table).where(table.c.conn_id == conn_id, table.c.campaign_id == campaign_id)
            )
        mark_pruned(session, conn_id, campaign_id)
    return pruned


def mark_pruned(session: Session, conn_id: str, campaign_id: int) -> None:
    """Mark the listed campaigns that sent ``campaign_id``: their delivery is unknown from now on, not
    "not yet final"."""
    from airflow_provider_sms.campaigns.tables import campaign_table, campaign_ticket_table

    tickets = campaign_ticket_table.c
    session.execute(
        update(campaign_table)
        .where(
            campaign_table.c.id.in_(
                select(tickets.campaign_row).where(
                    tickets.conn_id == conn_id, tickets.campaign_id == campaign_id
                )
            ),
            campaign_table.c.reports_pruned_at.is_(None),
        )
        .values(reports_pruned_at=dt.datetime.now(dt.timezone.utc))
    )
