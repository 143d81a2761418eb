"""Test DAG of tests/deployment: 50,000 numbers sent in batches of 5,000.

Scenario 2 kills the worker between two batches (the retry resumes after the last confirmed one), 2b
after the service took a batch but before the worker recorded the answer (the retry refuses to send
that batch again). The numbers are generated, not listed, so the serialized DAG stays small.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import overload

from airflow.sdk import dag

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

NUMBERS = 50_000
BATCH_SIZE = 5_000


def number(index: int) -> str:
    """The ``index``-th number of the campaign (French mobiles, all distinct)."""
    return f"336{30_000_000 + index:08d}"


class CampaignNumbers(Sequence[str]):
    """The campaign's ``count`` numbers, made when read."""

    def __init__(self, count: int) -> None:
        self.count = count

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
        return map(number, range(self.count))

    def __repr__(self) -> str:
        return f"CampaignNumbers({self.count} numbers)"


@dag(**dag_arguments("sms"))
def deployment_batched_send() -> None:
    """One batched send; a retry (after a worker dies) resumes after the last confirmed batch."""
    SmsSendOperator(
        task_id="send",
        message=alert("Your parcel is on its way."),
        recipients=CampaignNumbers(NUMBERS),
        batch_size=BATCH_SIZE,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )


deployment_batched_send()
