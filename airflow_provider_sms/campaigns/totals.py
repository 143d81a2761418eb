"""The delivery kept on each campaign's row, so that a page of the list reads it with its rows (one
indexed statement). Not public API.

``sms_campaign.by_status`` (messages by status code), ``delivered`` and ``failed`` (final, not
delivered) are the kept counts (``sms_delivery_count``) summed over the campaign's tickets. The
service's campaign id is unique and is its campaign's key: every report of a ticket is the campaign's.

The totals are worked out again from the kept counts (a few rows per ticket), never added up by
deltas, whenever what they are made of changes:

- by the flusher, in each batch's transaction, after the batch's counts are written, for
  the campaigns with a ticket among the batch's campaign ids;
- by the indexer, for each campaign row it adds or updates, with the connection's flusher row locked
  (the lock the flusher holds for a batch), so that a batch committed while the indexer reads the
  counts is never missed: reports flushed before their campaign's row was indexed count too.

A campaign whose reports the retention deleted (``reports_pruned_at``) is left as it stands: its
delivery is unknown, whatever its totals say.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, select, update

from airflow_provider_sms.campaigns.tables import campaign_table, campaign_ticket_table
from airflow_provider_sms.delivery_reports.tables import delivery_count_table, delivery_flush_table
from airflow_provider_sms.models import DELIVERED_STATUSES, PENDING_DELIVERY_STATUSES

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence

    from sqlalchemy.orm import Session

# Ids per IN list (SQLite allows 32,766 parameters per statement).
CHUNK = 500
# What a campaign row keeps of its delivery.
TOTALS = ("by_status", "delivered", "failed")


def kept_counts(session: Session, row_ids: Iterable[int]) -> dict[int, Counter[int]]:
    """The kept counts of the campaign rows ``row_ids``, summed per row over its tickets, one statement
    per :data:`CHUNK` rows."""
    tickets = campaign_ticket_table.c
    counts = delivery_count_table.c
    statuses: dict[int, Counter[int]] = defaultdict(Counter)
    ids = sorted(set(row_ids))
    for start in range(0, len(ids), CHUNK):
        found = session.execute(
            select(tickets.campaign_row, counts.status, counts.messages)
            .join(
                campaign_ticket_table,
                and_(tickets.conn_id == counts.conn_id, tickets.campaign_id == counts.campaign_id),
            )
            .where(tickets.campaign_row.in_(ids[start : start + CHUNK]))
        ).all()
        for count in found:
            statuses[count.campaign_row][int(count.status)] += int(count.messages)
    return statuses


def totals_of(statuses: Counter[int]) -> dict[str, Any]:
    """What a campaign row keeps of its delivery, from its messages by status."""
    delivered = sum(count for status, count in statuses.items() if status in DELIVERED_STATUSES)
    final = sum(count for status, count in statuses.items() if status not in PENDING_DELIVERY_STATUSES)
    return {
        "by_status": {str(status): count for status, count in sorted(statuses.items()) if count},
        "delivered": delivered,
        "failed": final - delivered,
    }


def statuses_of(row: Any) -> Counter[int]:
    """A campaign row's kept messages by status (``by_status``: empty before its first totals)."""
    return Counter({int(status): int(count) for status, count in (row.by_status or {}).items()})


def _refresh(session: Session, rows: Sequence[Any]) -> int:
    """Work out again the totals of ``rows`` (each with ``id`` and the totals it holds) and write those
    that changed; how many did."""
    if not rows:
        return 0
    statuses = kept_counts(session, [row.id for row in rows])
    changed = []
    for row in rows:
        values = totals_of(statuses.get(row.id, Counter()))
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
            select(table.id, *(table[name] for name in TOTALS)).where(
                condition, table.reports_pruned_at.is_(None)
            )
        ).all()
    )


def refresh_for_tickets(session: Session, conn_id: str, campaign_ids: Collection[int]) -> int:
    """The flusher's part, in a batch's transaction after its counts are written: the totals
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
