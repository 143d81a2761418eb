"""The flusher: runs in each API server (the provider's app's lifespan) and turns stored reports into
asset events of up to ``dlr_event_max_reports`` reports, at most ``dlr_event_interval`` seconds after
they arrived, keeping the campaigns' counts on the way (:mod:`.batches`). Not public API.

Every :data:`TICK` seconds it looks at each connection that has received reports: a full batch is
made at once; a partial one when its oldest report has waited the interval. Several API servers each
run one; the lock on the connection's row makes them take turns, and the watermark makes it no matter
which one makes a batch. It also writes the receiver's refusal counts (:mod:`.refusals`). Its metrics:
``flusher.asset_events`` for each batch committed with an asset event, and ``flusher.lag``, once per look
that makes batches, how long the oldest report waited for one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from airflow_provider_sms import metrics
from airflow_provider_sms.db_manager import registration_hint
from airflow_provider_sms.delivery_reports.batches import Batch, DeclaredAssets, flush_batch, pending
from airflow_provider_sms.delivery_reports.refusals import RefusalCounter, this_server, write_refusals
from airflow_provider_sms.delivery_reports.settings import (
    DEFAULT_EVENT_INTERVAL,
    DEFAULT_EVENT_MAX_REPORTS,
    asset_name,
)
from airflow_provider_sms.delivery_reports.store import without_parameters
from airflow_provider_sms.delivery_reports.tables import delivery_flush_table

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger(__name__)

# How often the flusher looks for reports to put in events (the shortest interval it honours).
TICK = 0.1
# A connection with nothing waiting is looked at again after a quarter of its interval (within these
# bounds): a report arriving just after a look waits at most about 1.25 intervals for its event.
IDLE_LOOK = (TICK, 2.0)
# Refusal counts are written at most this often, and their old rows removed.
REFUSALS_EVERY = 5.0
# The most batches one connection gets per look, so that a backlog on one does not starve the others.
MAX_BATCHES_PER_LOOK = 20
# After a failure (the database is down), the flusher waits this long, doubling up to the maximum.
BACKOFF, MAX_BACKOFF = 1.0, 30.0


class Flusher:
    """Makes the batches (asset events) of every connection that received reports.

    :param limits: a connection's (most reports per event, longest wait in seconds).
    :param refusals: the receiver's refusal counts, written on each look.
    """

    def __init__(self, limits: Callable[[str], tuple[int, float]], refusals: RefusalCounter) -> None:
        self._limits = limits
        self._refusals = refusals
        self._assets = DeclaredAssets()
        self._server = this_server()
        self._next_look: dict[str, float] = {}
        self._refusals_written = 0.0

    def look(self) -> list[Batch]:
        """One look at every connection (blocking: run it in a thread); the batches made."""
        from airflow.utils.session import create_session

        now = time.monotonic()
        if now - self._refusals_written >= REFUSALS_EVERY:
            self.write_refusals()
            self._refusals_written = now
        with create_session(scoped=False) as session:
            conn_ids = list(session.scalars(select(delivery_flush_table.c.conn_id)))
        made: list[Batch] = []
        for conn_id in conn_ids:
            if self._next_look.get(conn_id, 0.0) <= now:
                made += self.flush_connection(conn_id)
        return made

    def write_refusals(self) -> None:
        """Add the refusals counted since the last write to the table (kept for later if it fails)."""
        from airflow.utils.session import create_session

        tallies = self._refusals.take()
        try:
            with create_session(scoped=False) as session:
                write_refusals(session, tallies, self._server)
        except Exception:
            self._refusals.give_back(tallies)
            raise

    def flush_connection(self, conn_id: str) -> list[Batch]:
        """The batches ``conn_id`` is due: every full one, and a partial one once it has waited enough."""
        from airflow.utils.session import create_session

        max_reports, interval = self._limits(conn_id)
        with create_session(scoped=False) as session:
            waiting = pending(session, conn_id)
        if not waiting.reports or waiting.oldest is None:
            self._next_look[conn_id] = time.monotonic() + min(max(interval / 4, IDLE_LOOK[0]), IDLE_LOOK[1])
            return []
        waited = (datetime.now(timezone.utc) - waiting.oldest).total_seconds()
        overdue = waited >= interval
        if not overdue and waiting.reports < max_reports:
            # Nothing is due before the oldest report has waited the interval.
            self._next_look[conn_id] = time.monotonic() + interval - waited
            return []
        made: list[Batch] = []
        for _ in range(MAX_BATCHES_PER_LOOK):
            with create_session(scoped=False) as session:
                asset = self._assets.get(asset_name(conn_id), session)
                batch = flush_batch(
                    session,
                    conn_id,
                    max_reports=max_reports,
                    min_reports=1 if overdue else max_reports,
                    asset=asset,
                )
            if batch is None:
                break
            if not made:
                # The first batch holds the oldest report (batches take reports in the order they came).
                lag = (datetime.now(timezone.utc) - waiting.oldest).total_seconds()
                metrics.timing("flusher.lag", lag, conn_id=conn_id)
            if asset is not None:
                metrics.count("flusher.asset_events", conn_id=conn_id)
            made.append(batch)
            if batch.reports < max_reports:
                break
        if made:
            log.info(
                "Delivery reports for %s: %d report(s) put in batch(es) %d-%d",
                conn_id,
                sum(batch.reports for batch in made),
                made[0].number,
                made[-1].number,
            )
        return made

    async def run(self) -> None:
        """Look every :data:`TICK` seconds until cancelled; a failure is logged once per streak."""
        backoff = 0.0
        while True:
            await asyncio.sleep(backoff or TICK)
            try:
                await run_in_threadpool(self.look)
            except Exception as exc:
                if not backoff:
                    without_parameters(exc)  # the rows it wrote hold numbers
                    # On Airflow 3.0 and 3.1 the first line also says what to set for the tables to be made.
                    log.exception(
                        "The delivery-report flusher cannot reach the tables (is the database up, and "
                        "migrated with `airflow db migrate`?)%s; trying again, quietly until it works",
                        registration_hint(),
                    )
                backoff = min(max(backoff * 2, BACKOFF), MAX_BACKOFF)
                continue
            if backoff:
                log.info("The delivery-report flusher works again")
            backoff = 0.0


def default_limits(_conn_id: str) -> tuple[int, float]:
    """The limits of a connection whose settings cannot be read (e.g. since removed)."""
    return DEFAULT_EVENT_MAX_REPORTS, DEFAULT_EVENT_INTERVAL
