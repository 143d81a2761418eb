"""The delivery kept on each campaign's row, so that a page of the list reads it with its rows (one
indexed statement). Not public API.

``sms_campaign.by_status`` (messages by status code), ``delivered`` and ``failed`` (final, not
delivered) are the kept counts (``sms_delivery_count``) summed over the campaign's tickets: its
delivery counted from its send, as the list showed it when it read the counts per page. A campaign
with a ticket that had reports from before its send (a campaign id the service reused:
:func:`~airflow_provider_sms.delivery_reports.counted_since.reported_before`) has ``reused_ids`` set
and no totals: the page counts its delivery from the reports, as before (only such campaigns pay it).

The totals are worked out again from the kept counts (a few rows per ticket), never added up by
deltas, whenever what they are made of changes:

- by the flusher, in each batch's transaction, after the batch's counts and arrivals are written, for
  the campaigns with a ticket among the batch's campaign ids;
- by the indexer, for each campaign row it adds or updates, with the connection's flusher row locked
  (the lock the flusher holds for a batch), so that a batch committed while the indexer reads the
  counts is never missed: reports flushed before their campaign's row was indexed count too.

A campaign whose reports the retention deleted (``reports_pruned_at``) is left as it stands: its
delivery is unknown, whatever its totals say. Migration 0007 fills the totals of the campaigns copied
before it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, select, update

from airflow_provider_sms.campaigns.tables import campaign_table, campaign_ticket_table
from airflow_provider_sms.delivery_reports.counted_since import counts_with_arrival, reported_before
from airflow_provider_sms.delivery_reports.tables import delivery_count_table, delivery_flush_table
from airflow_provider_sms.models import DELIVERED_STATUSES, PENDING_DELIVERY_STATUSES

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence
    from datetime import datetime

    from sqlalchemy.orm import Session

# Ids per IN list (SQLite allows 32,766 parameters per statement).
CHUNK = 500
# What a campaign row keeps of its delivery.
TOTALS = ("by_status", "delivered", "failed", "reused_ids")


def kept_counts(
    session: Session, sent_at: dict[int, datetime]
) -> tuple[dict[int, Counter[int]], dict[tuple[int, str], set[int]]]:
    """The kept counts of the campaign rows ``sent_at`` names (row id: its send), summed per row over
    its tickets, one statement per :data:`CHUNK` rows; and the tickets with reports from before their
    row's send (``{(row id, conn_id): campaign ids}``), left out of the sums."""
    tickets = campaign_ticket_table.c
    counts = delivery_count_table.c
    statuses: dict[int, Counter[int]] = defaultdict(Counter)
    reused: dict[tuple[int, str], set[int]] = defaultdict(set)
    ids = sorted(sent_at)
    for start in range(0, len(ids), CHUNK):
        found = session.execute(
            counts_with_arrival(tickets.campaign_row)
            .join(
                campaign_ticket_table,
                and_(tickets.conn_id == counts.conn_id, tickets.campaign_id == counts.campaign_id),
            )
            .where(tickets.campaign_row.in_(ids[start : start + CHUNK]))
        ).all()
        for count in found:
            since = sent_at[count.campaign_row]
            if reported_before(count.first_received_at, count.first_reported_at, since):
                reused[(count.campaign_row, count.conn_id)].add(count.campaign_id)
            else:
                statuses[count.campaign_row][int(count.status)] += int(count.messages)
    return statuses, reused


def totals_of(statuses: Counter[int], *, reused: bool = False) -> dict[str, Any]:
    """What a campaign row keeps of its delivery, from its messages by status (none when ``reused``)."""
    if reused:
        return {"by_status": {}, "delivered": 0, "failed": 0, "reused_ids": True}
    delivered = sum(count for status, count in statuses.items() if status in DELIVERED_STATUSES)
    final = sum(count for status, count in statuses.items() if status not in PENDING_DELIVERY_STATUSES)
    return {
        "by_status": {str(status): count for status, count in sorted(statuses.items()) if count},
        "delivered": delivered,
        "failed": final - delivered,
        "reused_ids": False,
    }


def statuses_of(row: Any) -> Counter[int]:
    """A campaign row's kept messages by status (``by_status``: empty before its first totals)."""
    return Counter({int(status): int(count) for status, count in (row.by_status or {}).items()})


def _refresh(session: Session, rows: Sequence[Any]) -> int:
    """Work out again the totals of ``rows`` (each with ``id``, ``sent_at`` and the totals it holds)
    and write those that changed; how many did."""
    if not rows:
        return 0
    statuses, reused = kept_counts(session, {row.id: row.sent_at for row in rows})
    reused_rows = {row_id for row_id, _ in reused}
    changed = []
    for row in rows:
        values = totals_of(statuses.get(row.id, Counter()), reused=row.id in reused_rows)
        if any(getattr(row, name) != values[name] for name in TOTALS):
            changed.append({"row_id": row.id, **values})
    if changed:
        session.execute(
            update(campaign_table)
            .where(campaign_table.c.id == bindparam("row_id"))
            .values({name: bindparam(name) for name in TOTALS}),
            changed,
        )
    return len(changed)


def _rows(session: Session, condition: Any) -> list[Any]:
    table = campaign_table.c
    return list(
        session.execute(
            select(table.id, table.sent_at, *(table[name] for name in TOTALS)).where(
                condition, table.reports_pruned_at.is_(None)
            )
        ).all()
    )


def refresh_for_tickets(session: Session, conn_id: str, campaign_ids: Collection[int]) -> int:
    """The flusher's part, in a batch's transaction after its counts and arrivals are written: the totals
    of the campaigns with a ticket among ``campaign_ids`` of ``conn_id``."""
    tickets = campaign_ticket_table.c
    ids = sorted(set(campaign_ids))
    rows: dict[int, Any] = {}
    for start in range(0, len(ids), CHUNK):
        for row in _rows(
            session,
            campaign_table.c.id.in_(
                select(tickets.campaign_row).where(
                    tickets.conn_id == conn_id, tickets.campaign_id.in_(ids[start : start + CHUNK])
                )
            ),
        ):
            rows[row.id] = row
    return _refresh(session, list(rows.values()))


def refresh_rows(session: Session, row_ids: Iterable[int]) -> int:
    """The indexer's part: the totals of the campaign rows ``row_ids``, which it just added or updated
    (after :func:`lock_connections`)."""
    ids = sorted(set(row_ids))
    rows = [
        row
        for start in range(0, len(ids), CHUNK)
        for row in _rows(session, campaign_table.c.id.in_(ids[start : start + CHUNK]))
    ]
    return _refresh(session, rows)


def lock_connections(session: Session, conn_ids: Collection[str]) -> None:
    """Lock the flusher rows of ``conn_ids`` (made if missing) until ``session``'s transaction ends: no
    batch of theirs commits meanwhile, so totals read from their counts stay right. Taken before any
    campaign row is written (the flusher takes its row, then campaign rows: one order, no deadlock)."""
    from airflow_provider_sms.delivery_reports.store import ensure_flush_rows

    if not conn_ids:
        return
    ensure_flush_rows(session, sorted(conn_ids))
    flush = delivery_flush_table.c
    # SQLite has no row locks (FOR UPDATE is not said): the indexer already holds its write lock.
    session.execute(
        select(flush.conn_id)
        .where(flush.conn_id.in_(sorted(conn_ids)))
        .order_by(flush.conn_id)
        .with_for_update()
    ).all()
