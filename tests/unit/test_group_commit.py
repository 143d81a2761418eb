"""The receiver's group commit, with a writer that records its calls instead of a database."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.exc import DataError, OperationalError

from airflow_provider_sms.delivery_reports.ingest import GroupCommit, Pending, StoreFailed
from airflow_provider_sms.models import DeliveryReport

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tests.metrics_recorder import MetricsRecorder


def report(index: int) -> DeliveryReport:
    return DeliveryReport(
        date=dt.datetime(2026, 11, 24, 10, tzinfo=dt.timezone.utc),
        status=3,
        destination=f"3360{index:07d}",
        campaign_id=1,
    )


class Writer:
    """Stores nothing; records each commit's reports, takes ``delay`` seconds, fails as told."""

    def __init__(
        self, delay: float = 0.02, fail: type[Exception] | None = None, bad: int | None = None
    ) -> None:
        self.delay = delay
        self.fail = fail
        self.bad = bad
        self.commits: list[list[str]] = []
        self.lock = threading.Lock()

    def __call__(self, reports: Sequence[Pending]) -> list[bool]:
        # Not time.sleep: the unit tests' fixture records tenacity's sleeps instead of sleeping.
        threading.Event().wait(self.delay)
        numbers = [item.destination for _, item in reports]
        if self.fail is not None:
            raise self.fail("INSERT", {}, Exception("the database is gone"))
        if self.bad is not None and report(self.bad).destination in numbers:
            raise DataError("INSERT", {}, Exception("value too long"))
        with self.lock:
            self.commits.append(numbers)
        return [not number.endswith("7") for number in numbers]  # ...7: stored before


async def store_all(group: GroupCommit, count: int) -> list[bool | BaseException]:
    return await asyncio.gather(
        *(group.store("sms_default", report(index)) for index in range(count)), return_exceptions=True
    )


def test_concurrent_calls_share_commits_and_each_gets_its_own_outcome() -> None:
    writer = Writer()
    outcomes = asyncio.run(store_all(GroupCommit(writer, max_rows=500), 50))
    assert outcomes == [index % 10 != 7 for index in range(50)]
    # All 50 arrived before the writer ran: one commit.
    assert [len(commit) for commit in writer.commits] == [50]


def test_a_commit_takes_at_most_max_rows() -> None:
    writer = Writer()
    asyncio.run(store_all(GroupCommit(writer, max_rows=20), 50))
    assert [len(commit) for commit in writer.commits] == [20, 20, 10]
    assert sorted(number for commit in writer.commits for number in commit) == [
        report(index).destination for index in range(50)
    ]


def test_with_max_rows_one_each_call_commits_alone() -> None:
    writer = Writer(delay=0.0)
    asyncio.run(store_all(GroupCommit(writer, max_rows=1), 10))
    assert [len(commit) for commit in writer.commits] == [1] * 10


def test_a_failed_commit_fails_each_of_its_calls_with_its_own_error(caplog: pytest.LogCaptureFixture) -> None:
    outcomes = asyncio.run(store_all(GroupCommit(Writer(fail=OperationalError)), 30))
    assert all(isinstance(outcome, StoreFailed) for outcome in outcomes)
    assert len({id(outcome) for outcome in outcomes}) == 30
    assert isinstance(outcomes[0].__cause__, OperationalError)
    # Logged once per commit, not once per call.
    assert len([r for r in caplog.records if "not stored" in r.message]) == 1


def test_one_report_the_database_refuses_does_not_fail_the_others_of_its_commit() -> None:
    writer = Writer(bad=12)
    outcomes = asyncio.run(store_all(GroupCommit(writer), 30))
    assert isinstance(outcomes[12], StoreFailed)
    assert [outcome for index, outcome in enumerate(outcomes) if index != 12] == [
        index % 10 != 7 for index in range(30) if index != 12
    ]


def test_a_caller_that_hangs_up_does_not_cancel_the_others_commit() -> None:
    writer = Writer(delay=0.05)

    async def scenario() -> list[bool | BaseException]:
        group = GroupCommit(writer)
        first = asyncio.ensure_future(group.store("sms_default", report(0)))
        await asyncio.sleep(0.01)  # the first commit is under way; these two wait for the next
        leaving = asyncio.ensure_future(group.store("sms_default", report(1)))
        staying = asyncio.ensure_future(group.store("sms_default", report(2)))
        await asyncio.sleep(0.01)
        leaving.cancel()
        return await asyncio.gather(first, staying, return_exceptions=True)

    assert asyncio.run(scenario()) == [True, True]
    # The report of the call that hung up was committed all the same (its retry is a duplicate).
    assert writer.commits == [[report(0).destination], [report(1).destination, report(2).destination]]


def test_a_commit_is_counted_in_one_metric_call_per_connection_and_outcome(
    metrics_recorder: MetricsRecorder,
) -> None:
    # A second connection's calls share the commit.
    async def both() -> None:
        group = GroupCommit(Writer(), max_rows=500)
        await asyncio.gather(store_all(group, 20), group.store("sms_other", report(21)))

    asyncio.run(both())

    counted = [(sent.name, sent.value, sent.tags) for sent in metrics_recorder.sent if sent.tags is not None]
    assert sorted(counted) == [
        ("sms.receiver.duplicates", 2, {"conn_id": "sms_default"}),
        ("sms.receiver.stored", 1, {"conn_id": "sms_other"}),
        ("sms.receiver.stored", 18, {"conn_id": "sms_default"}),
    ]


@pytest.mark.parametrize("max_rows", [1, 500])
def test_a_report_not_stored_is_counted_neither_stored_nor_duplicate(
    metrics_recorder: MetricsRecorder, max_rows: int
) -> None:
    # Report 12 the database refuses (its call's refusal is the receiver's to count); the others are stored.
    asyncio.run(store_all(GroupCommit(Writer(delay=0.0, bad=12), max_rows=max_rows), 30))

    assert metrics_recorder.total("receiver.stored") == 26
    assert metrics_recorder.total("receiver.duplicates") == 3
