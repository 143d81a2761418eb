"""The flusher's batches on a real Airflow metadata database (SQLite): exactly once, and counts that
agree with a scan of every report, however the reports are split into batches.

The reference is what the summary did before batches: rank every report of a message (a final status
first, then the latest date, then the latest id) and count the first of each.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, insert, select, update

from airflow_provider_sms.delivery_reports.batches import flush_batch
from airflow_provider_sms.delivery_reports.retention import prune_reports
from airflow_provider_sms.delivery_reports.store import campaign_summary, ensure_flush_rows, insert_reports
from airflow_provider_sms.delivery_reports.tables import (
    delivery_campaign_table,
    delivery_country_table,
    delivery_message_table,
    delivery_report_table,
    delivery_timeline_table,
)
from airflow_provider_sms.models import DELIVERED_STATUSES, DELIVERY_STATUSES, DeliveryReport
from tests.integration.conftest import clear

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration

PARIS = dt.timezone(dt.timedelta(hours=1))


def campaign_reports(
    campaign_id: int, count: int, *, status: int = 3, prefix: str = "3361"
) -> list[DeliveryReport]:
    """One report per number of a campaign, all at 10:00 Paris time."""
    return [
        DeliveryReport(
            date=dt.datetime(2026, 11, 24, 10, tzinfo=PARIS),
            status=status,
            destination=f"{prefix}{index:07d}",
            campaign_id=campaign_id,
        )
        for index in range(count)
    ]


def store(metadata_db: Any, reports: list[DeliveryReport], conn_id: str = "sms_default") -> list[bool]:
    with metadata_db.Session() as session, session.begin():
        stored = insert_reports(session, [(conn_id, report) for report in reports])
        ensure_flush_rows(session, {conn_id})
    return stored


def flush_all(
    metadata_db: Any, sizes: Iterator[int], conn_id: str = "sms_default", batches: int | None = None
) -> list[int]:
    """Flush until nothing waits (or ``batches`` are made), each batch at most the next of ``sizes``;
    the batches' sizes."""
    made: list[int] = []
    while batches is None or len(made) < batches:
        with metadata_db.Session() as session, session.begin():
            batch = flush_batch(session, conn_id, max_reports=next(sizes), min_reports=1, asset=None)
        if batch is None:
            break
        made.append(batch.reports)
    return made


def reference_counts(reports: list[DeliveryReport], campaign_ids: set[int]) -> tuple[Counter[str], list[str]]:
    """The old summary's answer: each message at its best-ranked report; and the failed numbers."""
    latest: dict[tuple[int, str], tuple[bool, dt.datetime, int, int]] = {}
    for index, report in enumerate(reports):
        if report.campaign_id not in campaign_ids:
            continue
        rank = (report.final, report.date, index, report.status)
        key = (report.campaign_id, report.destination)
        if key not in latest or rank[:3] > latest[key][:3]:
            latest[key] = rank
    counts = Counter(DELIVERY_STATUSES[rank[3]] for rank in latest.values())
    failed = sorted(
        {number for (_, number), rank in latest.items() if rank[0] and rank[3] not in DELIVERED_STATUSES}
    )
    return counts, failed


report_strategy = st.builds(
    DeliveryReport,
    date=st.sampled_from([dt.datetime(2026, 11, 24, 10, minute, tzinfo=PARIS) for minute in (0, 1, 2)]),
    status=st.sampled_from([1, 2, 3, 12]),
    destination=st.sampled_from([f"3360000000{index}" for index in range(4)]),
    campaign_id=st.sampled_from([11, 12]),
    country_code=st.sampled_from(["FR", "BE", None]),
)


def reference_tallies(
    reports: list[DeliveryReport],
) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    """The final messages at their best-ranked report, by (campaign, minute, outcome) and by (campaign,
    country, outcome): what the chart and the failures by country show."""
    latest: dict[tuple[int, str], tuple[bool, dt.datetime, int, DeliveryReport]] = {}
    for index, report in enumerate(reports):
        key = (report.campaign_id, report.destination)
        rank = (report.final, report.date, index, report)
        if key not in latest or rank[:3] > latest[key][:3]:
            latest[key] = rank
    minutes: Counter[tuple[Any, ...]] = Counter()
    countries: Counter[tuple[Any, ...]] = Counter()
    for final, date, _, report in latest.values():
        if final:
            outcome = "delivered" if report.status in DELIVERED_STATUSES else "failed"
            minutes[(report.campaign_id, date.astimezone(dt.timezone.utc).replace(second=0), outcome)] += 1
            countries[(report.campaign_id, report.country_code or "", outcome)] += 1
    return minutes, countries


def kept_tallies(db: Any, table: Any, key: str) -> Counter[tuple[Any, ...]]:
    """What the flusher keeps in ``table`` (timeline or countries), as ``reference_tallies`` counts."""
    kept: Counter[tuple[Any, ...]] = Counter()
    with db.Session() as session:
        for row in session.execute(select(table)):
            for outcome in ("delivered", "failed"):
                if getattr(row, outcome):
                    kept[(row.campaign_id, getattr(row, key), outcome)] = getattr(row, outcome)
    return kept


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    reports=st.lists(report_strategy, min_size=1, max_size=30),
    sizes=st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=10),
    posts=st.integers(min_value=1, max_value=4),
)
# Found once: two final reports of one number with the same date, in one commit; the later one wins,
# so ids must follow arrival (they did not when a commit's rows were inserted in digest order).
@example(
    reports=[
        DeliveryReport(
            date=dt.datetime(2026, 11, 24, 10, 1, tzinfo=PARIS),
            status=status,
            destination="33600000001",
            campaign_id=11,
            country_code="FR",
        )
        for status in (3, 2)
    ],
    sizes=[1],
    posts=1,
)
def test_counts_kept_in_batches_equal_a_scan_of_every_report(
    db: Any, reports: list[DeliveryReport], sizes: list[int], posts: int
) -> None:
    clear(db)
    # The reports arrive in several commits, with flushes of any size between them.
    cycle = iter(sizes * 100)
    stored: list[DeliveryReport] = []
    for part in range(posts):
        chunk = reports[part::posts]
        new = store(db, chunk)
        stored += [report for report, is_new in zip(chunk, new, strict=True) if is_new]
        flush_all(db, cycle)
    for campaign_ids in ({11}, {12}, {11, 12}):
        expected, failed = reference_counts(stored, campaign_ids)
        with db.Session() as session:
            summary = campaign_summary(session, "sms_default", sorted(campaign_ids), with_failed=True)
        assert Counter(summary.by_status) == expected
        assert summary.reported == sum(expected.values())
        assert summary.failed == failed
        assert summary.failed_count == sum(
            count for name, count in expected.items() if name not in ("sent", "delivered")
        )
    minutes, countries = reference_tallies(stored)
    assert kept_tallies(db, delivery_timeline_table, "minute") == minutes
    assert kept_tallies(db, delivery_country_table, "country_code") == countries


def test_a_repeated_report_is_stored_once_even_within_one_commit(db: Any) -> None:
    report = DeliveryReport(
        date=dt.datetime(2026, 11, 24, 10, tzinfo=PARIS), status=3, destination="33600000001", campaign_id=5
    )
    assert store(db, [report, report]) == [True, False]
    assert store(db, [report]) == [False]


def test_two_flushers_at_once_put_each_report_in_exactly_one_batch(db: Any) -> None:
    reports = campaign_reports(21, 600)
    store(db, reports)
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            flush_all(db, iter([25] * 1000))
        except Exception as exc:  # SQLite refuses one of two concurrent writers: that flusher stops
            errors.append(exc)

    threads = [threading.Thread(target=flusher) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    flush_all(db, iter([25] * 1000))  # whatever a refused flusher left
    reports_table = delivery_report_table.c
    with db.engine.connect() as connection:
        batches = Counter(connection.scalars(select(reports_table.batch)))
        assert None not in batches
        assert sorted(batches) == list(range(1, 25))
        assert set(batches.values()) == {25}
    with db.Session() as session:
        assert campaign_summary(session, "sms_default", [21]).by_status == {"delivered": 600}


def test_failed_numbers_come_in_pages(db: Any) -> None:
    reports = campaign_reports(31, 7, status=12, prefix="3362")
    store(db, reports)
    flush_all(db, iter([1000] * 10))
    numbers: list[str] = []
    after = None
    with db.Session() as session:
        while True:
            page = campaign_summary(
                session, "sms_default", [31], with_failed=True, failed_after=after, failed_limit=3
            )
            assert page.failed is not None
            numbers += page.failed
            after = page.failed_next
            if after is None:
                break
    assert numbers == sorted(report.destination for report in reports)


def test_prune_removes_old_campaigns_whole_and_never_a_report_not_yet_in_an_event(db: Any) -> None:
    def campaign(campaign_id: int, count: int) -> list[DeliveryReport]:
        return campaign_reports(campaign_id, count, prefix="3363")

    store(db, campaign(41, 3) + campaign(42, 2))
    flush_all(db, iter([1000] * 10))
    store(db, campaign(43, 2))  # not in a batch yet
    flush_all(db, iter([1]), batches=1)  # one of 43's reports gets a batch, the other waits
    long_ago = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=100)
    with db.engine.begin() as connection:
        connection.execute(
            update(delivery_campaign_table)
            .where(delivery_campaign_table.c.campaign_id.in_([41, 43]))
            .values(last_received_at=long_ago)
        )
        connection.execute(
            update(delivery_campaign_table)
            .where(delivery_campaign_table.c.campaign_id == 43)
            .values(reports=2)  # as if the waiting one were counted: it is kept all the same
        )

    def left() -> dict[int, int]:
        with db.engine.connect() as connection:
            rows = connection.execute(
                select(delivery_report_table.c.campaign_id, func.count()).group_by(
                    delivery_report_table.c.campaign_id
                )
            )
            return {campaign_id: count for campaign_id, count in rows}

    # The campaigns page lists the sends of 41 and 42: 41's is marked pruned, its delivery unknown.
    from airflow_provider_sms.campaigns.tables import campaign_table, campaign_ticket_table

    now = dt.datetime.now(dt.timezone.utc)
    with db.engine.begin() as connection:
        for row_id, ticket in ((1, 41), (2, 42)):
            connection.execute(
                insert(campaign_table).values(
                    id=row_id,
                    dag_id="d",
                    run_id="r",
                    task_id=f"t{ticket}",
                    map_index=-1,
                    conn_id="sms_default",
                    outcome="sent",
                    sent_at=now,
                    recorded_at=now,
                    record={},
                    sent=3,
                )
            )
            connection.execute(
                insert(campaign_ticket_table).values(
                    campaign_row=row_id, conn_id="sms_default", campaign_id=ticket
                )
            )

    def pruned_rows() -> list[int]:
        with db.engine.connect() as connection:
            return list(
                connection.scalars(
                    select(campaign_table.c.id).where(campaign_table.c.reports_pruned_at.is_not(None))
                )
            )

    with db.Session() as session:
        dry = prune_reports(session, older_than=dt.timedelta(days=90), dry_run=True)
        session.rollback()
    assert pruned_rows() == []
    assert (dry.campaigns, dry.reports, dry.waiting) == ([("sms_default", 41)], 3, [("sms_default", 43)])
    assert left() == {41: 3, 42: 2, 43: 2}
    with db.Session() as session, session.begin():
        done = prune_reports(session, older_than=dt.timedelta(days=90))
    assert done.summary(dry_run=False) == (
        "deleted 1 campaign(s) with 3 delivery report(s); kept 1 campaign(s) with reports not yet in an "
        "asset event"
    )
    assert left() == {42: 2, 43: 2}
    with db.engine.connect() as connection:
        messages = connection.scalars(select(delivery_message_table.c.campaign_id).distinct()).all()
    assert sorted(messages) == [42, 43]
    assert pruned_rows() == [1]


def test_the_prune_command_line_says_what_it_did(db: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from airflow_provider_sms.__main__ import main

    store(
        db,
        [
            DeliveryReport(
                date=dt.datetime(2026, 11, 24, 10, tzinfo=PARIS),
                status=3,
                destination="33600000001",
                campaign_id=51,
            )
        ],
    )
    flush_all(db, iter([10, 10]))
    assert main(["prune-delivery-reports", "--older-than", "0h", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip() == "would delete 1 campaign(s) with 1 delivery report(s)"
    assert main(["prune-delivery-reports", "--older-than", "1d"]) == 0
    assert capsys.readouterr().out.strip() == "deleted 0 campaign(s) with 0 delivery report(s)"
    assert main(["prune-delivery-reports", "--older-than", "0h"]) == 0
    assert capsys.readouterr().out.strip() == "deleted 1 campaign(s) with 1 delivery report(s)"
    with db.engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(delivery_report_table)) == 0


# ------------------------------------------------------------------ the summary


def reports_of(campaign_id: int, outcomes: dict[str, int], date: dt.datetime) -> list[DeliveryReport]:
    return [
        DeliveryReport(date=date, status=status, destination=number, campaign_id=campaign_id)
        for number, status in outcomes.items()
    ]


def summary_of(metadata_db: Any, *campaign_ids: int, **kwargs: Any) -> Any:
    with metadata_db.Session() as session:
        return campaign_summary(session, "sms_default", list(campaign_ids), with_failed=True, **kwargs)


def test_a_summary_is_read_from_the_kept_counts(db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sent_at = dt.datetime.now(dt.timezone.utc)
    # Dated 30 s before the send by the service's clock: counted all the same.
    store(db, reports_of(42, {"33700000001": 3, "33700000002": 2}, sent_at - dt.timedelta(seconds=30)))
    flush_all(db, iter([1000] * 10))
    read: list[Any] = []
    real_execute = type(db.Session()).execute

    def recorded(session: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(str(statement))
        return real_execute(session, statement, *args, **kwargs)

    monkeypatch.setattr(type(db.Session()), "execute", recorded)
    summary = summary_of(db, 42)
    assert summary.by_status == {"delivered": 1, "not delivered": 1}
    assert summary.failed == ["33700000002"]
    # The counts were read, and no statement read the reports themselves.
    assert any("sms_delivery_count" in statement for statement in read)
    assert not any(re.search(r"\bsms_delivery_report\b", statement) for statement in read)
