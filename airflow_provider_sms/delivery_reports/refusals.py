"""What the receiver refused, counted per connection and reason, so that a waiting task can say why
nothing arrives. Not public API.

Each API server counts in memory (no refused body is kept, only its answer's text, once per reason,
its numbers masked), and the flusher writes the counts to ``sms_delivery_refusal`` every few seconds,
one row per connection, reason, minute and server; the summary sums the last hour. A refusal counted
while the database is down is written when it is back.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from sqlalchemy import delete, func, select

from airflow_provider_sms.delivery_reports.store import Row, write_rows
from airflow_provider_sms.delivery_reports.summary import REFUSAL_REASONS, RefusalCount
from airflow_provider_sms.delivery_reports.tables import delivery_refusal_table
from airflow_provider_sms.phone_numbers import mask_numbers_in

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# How far back the summary counts refusals, and how long their rows are kept.
REFUSAL_WINDOW = timedelta(hours=1)
REFUSAL_KEPT = timedelta(hours=2)
# An answer's text is kept this long at most (the column's length).
DETAIL_LENGTH = 500


@dataclass
class Tally:
    """Refusals of one connection, reason and minute, not written yet."""

    refused: int
    last_at: datetime
    last_detail: str


def this_server() -> str:
    """This API server process, as its refusal rows name it."""
    return f"{socket.gethostname()[:50]}:{os.getpid()}"


class RefusalCounter:
    """This process's refusals since they were last written, by connection, reason and minute."""

    def __init__(self) -> None:
        self._tallies: dict[tuple[str, str, datetime], Tally] = {}
        self._lock = threading.Lock()

    def count(self, conn_id: str, reason: str, detail: str) -> None:
        """Count one refusal of a call for ``conn_id`` (a connection that receives reports).

        :param detail: what the call was answered; kept with its numbers masked
            (:func:`~airflow_provider_sms.phone_numbers.mask_numbers_in`): the summary returns it.
        """
        if reason not in REFUSAL_REASONS:
            raise ValueError(f"unknown refusal reason {reason!r}")
        # A refused report's reason may quote its destination: masked already, and here again.
        detail = mask_numbers_in(detail)
        now = datetime.now(timezone.utc)
        key = (conn_id, reason, now.replace(second=0, microsecond=0))
        with self._lock:
            tally = self._tallies.get(key)
            if tally is None:
                self._tallies[key] = Tally(1, now, detail[:DETAIL_LENGTH])
            else:
                tally.refused += 1
                tally.last_at, tally.last_detail = now, detail[:DETAIL_LENGTH]

    def take(self) -> dict[tuple[str, str, datetime], Tally]:
        """The tallies so far, which this counter forgets (give them back if they cannot be written)."""
        with self._lock:
            tallies, self._tallies = self._tallies, {}
        return tallies

    def give_back(self, tallies: dict[tuple[str, str, datetime], Tally]) -> None:
        """Tallies :meth:`take` gave that could not be written: counted again with those since."""
        with self._lock:
            for key, tally in tallies.items():
                held = self._tallies.get(key)
                if held is None:
                    self._tallies[key] = tally
                else:
                    held.refused += tally.refused
                    if tally.last_at > held.last_at:
                        held.last_at, held.last_detail = tally.last_at, tally.last_detail


def write_refusals(session: Session, tallies: dict[tuple[str, str, datetime], Tally], server: str) -> None:
    """Add ``tallies`` to this server's rows and drop rows older than :data:`REFUSAL_KEPT`."""
    table = delivery_refusal_table.c
    now = datetime.now(timezone.utc)
    session.execute(delete(delivery_refusal_table).where(table.minute < now - REFUSAL_KEPT))
    if not tallies:
        return
    held = {
        (row.conn_id, row.reason, row.minute): row.refused
        for row in session.execute(
            select(table.conn_id, table.reason, table.minute, table.refused).where(
                table.server == server, table.minute.in_({minute for _, _, minute in tallies})
            )
        )
    }
    new: list[Row] = []
    moved: list[tuple[Row, Row]] = []
    for (conn_id, reason, minute), tally in tallies.items():
        key = {"conn_id": conn_id, "reason": reason, "minute": minute}
        refused = held.get((conn_id, reason, minute))
        values = {
            "refused": tally.refused + (refused or 0),
            "last_at": tally.last_at,
            "last_detail": tally.last_detail,
        }
        if refused is None:
            new.append({**key, **values})
        else:
            moved.append((key, values))
    write_rows(session, delivery_refusal_table, {"server": server}, new, moved)


def recent_refusals(session: Session, conn_id: str) -> list[RefusalCount]:
    """What the receivers refused for ``conn_id`` in the last hour, by reason, the most recent first."""
    table = delivery_refusal_table.c
    since = datetime.now(timezone.utc) - REFUSAL_WINDOW
    totals = session.execute(
        select(table.reason, func.sum(table.refused), func.max(table.last_at))
        .where(table.conn_id == conn_id, table.minute >= since.replace(second=0, microsecond=0))
        .group_by(table.reason)
    ).all()
    counts = []
    for reason, refused, last_at in totals:
        detail = session.scalar(
            select(table.last_detail)
            .where(table.conn_id == conn_id, table.reason == reason, table.last_at == last_at)
            .limit(1)
        )
        counts.append(
            RefusalCount(reason=reason, count=int(refused), last_at=last_at, last_detail=detail or "")
        )
    return sorted(counts, key=lambda count: count.last_at, reverse=True)
