"""Test DAG of tests/deployment: 50,000 numbers sent in batches of 5,000, read from a slow source.

The numbers come from a source that pauses at each batch boundary, as a database cursor fetching the
next page would: between two batches the task is neither sending nor recording anything, which is where
scenario 2 kills the worker (a worker killed during a POST leaves a batch of unknown outcome, which the
retry rightly refuses to send again).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import overload

import pendulum
from airflow.sdk import dag

from airflow_provider_sms.operators.sms import SmsSendOperator

NUMBERS = 50_000
BATCH_SIZE = 5_000
# Seconds the source takes to fetch each batch after the first.
FETCH_PAUSE = 0.5


def number(index: int) -> str:
    """The ``index``-th number of the campaign (French mobiles, all distinct)."""
    return f"336{30_000_000 + index:08d}"


class SlowNumbers(Sequence[str]):
    """The campaign's numbers, with a pause every ``every`` numbers on each pass over them."""

    def __init__(self, count: int, every: int, pause: float) -> None:
        self.count, self.every, self.pause = count, every, pause

    def __len__(self) -> int:
        return self.count

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [number(i) for i in range(*index.indices(self.count))]
        if not 0 <= index < self.count:
            raise IndexError(index)
        return number(index)

    def __iter__(self) -> Iterator[str]:
        for index in range(self.count):
            if index and index % self.every == 0:
                time.sleep(self.pause)
            yield number(index)

    def __repr__(self) -> str:
        return f"SlowNumbers({self.count} numbers, {self.pause} s pause every {self.every})"


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["sms", "test"],
)
def deployment_batched_send() -> None:
    """One batched send; a retry (after a worker dies) resumes after the last confirmed batch."""
    SmsSendOperator(
        task_id="send",
        message={"text": "Your parcel is on its way.", "pushtype": "alert"},
        recipients=SlowNumbers(NUMBERS, BATCH_SIZE, FETCH_PAUSE),
        batch_size=BATCH_SIZE,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )


deployment_batched_send()
