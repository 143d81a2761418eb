"""The delivery kept on each campaign's row (``airflow_provider_sms.campaigns.totals``) equals the exact
computation from the store, whatever the order of reports, flushes, the indexer's copies and prunes.

The exact computation is the one the list made before the totals (``totals.kept_counts``: the kept
counts summed over the campaign's tickets); the list's page and its delivery filter must answer as they
did with it.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from airflow_provider_sms.campaigns import indexer, queries
from airflow_provider_sms.campaigns.tables import campaign_table
from airflow_provider_sms.campaigns.totals import kept_counts
from airflow_provider_sms.delivery_reports.batches import flush_batch
from airflow_provider_sms.delivery_reports.retention import prune_reports
from airflow_provider_sms.delivery_reports.store import ensure_flush_rows, insert_reports
from airflow_provider_sms.models import DeliveryReport
from tests.campaign_records import dag_rows, sms_connections, xcom_row
from tests.integration.conftest import clear

if TYPE_CHECKING:
    from collections import Counter

pytestmark = pytest.mark.integration

CONN = "sms_totals"
NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
# Sent an hour ago: reports arriving during the test arrive after the send. Sent in an hour: every
# report arrives before it (a clock behind: its reports count all the same).
BEFORE, AFTER = NOW - dt.timedelta(hours=1), NOW + dt.timedelta(hours=1)
# Report dates: after the send of an hour ago; half an hour before it; within a minute before it.
DATES = [
    BEFORE + dt.timedelta(minutes=2),
    BEFORE - dt.timedelta(minutes=30),
    BEFORE - dt.timedelta(seconds=30),
]


def record(tickets: list[int], sent: int, sent_at: dt.datetime, outcome: str = "sent") -> dict[str, Any]:
    return {
        "version": 1,
        "conn_id": CONN,
        "operator": "SmsSendOperator",
        "outcome": outcome,
        "pushtype": "alert",
        "tickets": tickets,
        "batches": len(tickets) or 1,
        "unknown_batches": [1] if outcome == "maybe_sent" else [],
        "sent_at": sent_at.isoformat(),
        "delivery_at": sent_at.isoformat(),
        "total": sent,
        "sent": sent,
        "filtered": {},
        "cost": sent,
        "credits": 1000,
    }


def index(db: Any, dag_id: str, value: dict[str, Any], recorded_at: dt.datetime = NOW) -> None:
    row = xcom_row(dag_id, value, recorded_at, run_id="manual")
    with db.Session() as session, session.begin(), sms_connections(CONN):
        dag_rows(session, [dag_id])
        indexer._copy(session, [row])


def report(campaign_id: int, number: int, status: int, date: dt.datetime = DATES[0]) -> DeliveryReport:
    return DeliveryReport(date=date, status=status, destination=f"3369{number:07d}", campaign_id=campaign_id)


def store(db: Any, reports: list[DeliveryReport]) -> None:
    with db.Session() as session, session.begin():
        insert_reports(session, [(CONN, found) for found in reports])
        ensure_flush_rows(session, {CONN})


def flush(db: Any, size: int = 1000, batches: int | None = None) -> None:
    made = 0
    while batches is None or made < batches:
        with db.Session() as session, session.begin():
            if flush_batch(session, CONN, max_reports=size, min_reports=1, asset=None) is None:
                return
        made += 1


def rows(db: Any) -> dict[str, Any]:
    with db.Session() as session:
        return {row.dag_id: row for row in session.execute(select(campaign_table))}


def delivery_is(state: str, row: Any, statuses: Counter[int]) -> bool:
    """Whether campaign ``row``, with its messages by status, stands as ``state`` says: a campaign whose
    reports were pruned stands as none; one that may have been sent is never complete."""
    delivery = queries.delivery_of(row.sent, statuses, pruned_at=row.reports_pruned_at)
    if delivery.reports_pruned_at is not None:
        return False
    maybe_sent = row.outcome == queries.MAYBE_SENT
    if state == "not_final":
        return delivery.not_final > 0 or maybe_sent
    if state == "complete":
        return delivery.not_final == 0 and not maybe_sent
    return delivery.failed > 0


def assert_totals_exact(db: Any) -> None:
    """Each campaign's delivery as the list shows it (from its row's totals) equals the exact
    computation, and so does each page the delivery filter gives."""
    with db.Session() as session:
        found = list(session.execute(select(campaign_table).order_by(campaign_table.c.id)))
        kept = queries.page_delivery(found)
        exact = kept_counts(session, [row.id for row in found])
        for row in found:
            shown = queries.delivery_of(row.sent, kept[row.id], pruned_at=row.reports_pruned_at)
            assert shown == queries.delivery_of(row.sent, exact[row.id], pruned_at=row.reports_pruned_at), row
            if row.reports_pruned_at is None:
                assert (row.delivered, row.failed) == (shown.delivered, shown.failed), row
        readable = {queries.scope_of(row) for row in found}
        for state in queries.DELIVERY_STATES:
            page = queries.campaign_page(session, readable, delivery=state, limit=queries.MAX_PAGE)
            expected = [
                row.id
                for row in sorted(found, key=lambda r: (r.sent_at, r.id), reverse=True)
                if delivery_is(state, row, exact[row.id])
            ]
            assert [campaign.id for campaign in page.campaigns] == expected, state


def test_reports_flushed_before_their_campaign_is_indexed_are_in_its_totals(db: Any) -> None:
    store(db, [report(11, 1, 3), report(11, 2, 12), report(11, 3, 1)])
    flush(db)
    index(db, "dag_a", record([11], 4, BEFORE))

    row = rows(db)["dag_a"]
    assert (row.by_status, row.delivered, row.failed) == ({"1": 1, "3": 1, "12": 1}, 1, 1)
    # Then more reports, flushed after the row exists: the flusher brings it up to date.
    store(db, [report(11, 3, 3), report(11, 4, 3)])
    flush(db)
    row = rows(db)["dag_a"]
    assert (row.by_status, row.delivered, row.failed) == ({"3": 3, "12": 1}, 3, 1)
    assert_totals_exact(db)


def test_a_resumed_campaign_with_another_ticket_gets_that_tickets_counts(db: Any) -> None:
    store(db, [report(11, 1, 3), report(12, 2, 3)])
    flush(db)
    index(db, "dag_a", record([11], 2, BEFORE))
    assert rows(db)["dag_a"].delivered == 1
    index(db, "dag_a", record([11, 12], 2, BEFORE), recorded_at=NOW + dt.timedelta(seconds=1))
    assert rows(db)["dag_a"].delivered == 2
    assert_totals_exact(db)


def test_a_maybe_sent_campaign_is_never_complete_and_a_pruned_one_in_no_state(db: Any) -> None:
    index(db, "dag_maybe", record([11], 1, BEFORE, outcome="maybe_sent"))
    index(db, "dag_pruned", record([12], 1, BEFORE))
    store(db, [report(12, 2, 3)])
    flush(db)
    with db.Session() as session, session.begin():
        prune_reports(session, older_than=dt.timedelta(days=-1), dry_run=False)
    # Its one number delivered: complete by its figures, but a batch of it may have gone out unreported.
    store(db, [report(11, 1, 3)])
    flush(db)
    assert rows(db)["dag_maybe"].delivered == 1
    with db.Session() as session:
        complete = queries.campaign_page(
            session, {("dag_maybe", ""), ("dag_pruned", "")}, delivery="complete"
        )
        not_final = queries.campaign_page(
            session, {("dag_maybe", ""), ("dag_pruned", "")}, delivery="not_final"
        )
    assert complete.campaigns == []
    assert [c.dag_id for c in not_final.campaigns] == ["dag_maybe"]
    assert rows(db)["dag_pruned"].reports_pruned_at is not None
    assert_totals_exact(db)


# The campaigns the property test indexes (in any order, any number of times): dag, tickets, sent at,
# outcome. Ticket 11 is shared by three, 13 sent "in an hour" (reports arrive before it).
CAMPAIGNS = [
    ("dag_a", [11], BEFORE, "sent"),
    ("dag_b", [11, 12], BEFORE - dt.timedelta(hours=2), "partly_sent"),
    ("dag_c", [13], AFTER, "sent"),
    ("dag_d", [12], BEFORE, "maybe_sent"),
    ("dag_e", [11], BEFORE + dt.timedelta(minutes=40), "sent"),
]

step = st.one_of(
    st.tuples(
        st.just("store"),
        st.lists(
            st.tuples(
                st.sampled_from([11, 12, 13]),
                st.integers(min_value=0, max_value=3),
                st.sampled_from([1, 2, 3, 12]),
                st.sampled_from(range(len(DATES))),
            ),
            min_size=1,
            max_size=6,
        ),
    ),
    st.tuples(st.just("flush"), st.integers(min_value=1, max_value=4)),
    st.tuples(st.just("index"), st.sampled_from(range(len(CAMPAIGNS)))),
    st.tuples(st.just("resume"), st.sampled_from(range(len(CAMPAIGNS)))),
    st.tuples(st.just("prune"), st.just(0)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=1, max_size=12))
def test_totals_equal_the_exact_computation_in_any_order(db: Any, steps: list[tuple[str, Any]]) -> None:
    clear(db)
    resumed = 0
    for kind, arg in steps:
        if kind == "store":
            store(db, [report(cid, number, status, DATES[date]) for cid, number, status, date in arg])
        elif kind == "flush":
            flush(db, size=arg, batches=2)
        elif kind in ("index", "resume"):
            dag_id, tickets, sent_at, outcome = CAMPAIGNS[arg]
            if kind == "resume":  # a later push of the same campaign, with one more ticket
                resumed += 1
                tickets = [*tickets, 13 if 13 not in tickets else 12]
            index(
                db,
                dag_id,
                record(tickets, 3, sent_at, outcome),
                recorded_at=NOW + dt.timedelta(seconds=resumed),
            )
        else:
            with db.Session() as session, session.begin():
                prune_reports(session, older_than=dt.timedelta(days=-1))
        assert_totals_exact(db)
    flush(db)
    assert_totals_exact(db)


def test_the_dag_ids_read_by_a_loose_index_scan_are_those_of_select_distinct(db: Any) -> None:
    with db.Session() as session:
        assert queries.dag_ids_with_campaigns(session) == set()
    for index_, dag_id in enumerate(["dag_c", "dag_a", "dag_b", "dag_a"]):
        index(db, dag_id, record([20 + index_], 1, BEFORE - dt.timedelta(minutes=index_)))
    with db.Session() as session:
        found = queries.dag_ids_with_campaigns(session)
        assert (
            found
            == set(session.scalars(select(campaign_table.c.dag_id).distinct()))
            == {
                "dag_a",
                "dag_b",
                "dag_c",
            }
        )
