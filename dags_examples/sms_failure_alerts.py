"""Page the on-call team by SMS when a task of a pipeline fails.

What it shows: ``SmsNotifier`` as every task's ``on_failure_callback`` (through ``default_args``). When
a task fails for good (``retries`` exhausted), an ``alert`` SMS naming the DAG, task and run goes to the
on-call numbers; alerts are sent at any hour. A notification is sent once: the notifier never repeats
a POST /send.

To see it, trigger the DAG with ``fail=true`` (``airflow dags test sms_failure_alerts -c '{"fail":
true}'`` or the trigger form): the ``load`` task fails on purpose and the SMS goes out. By default
the run succeeds and nothing is sent. Connection: ``sms_default``.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import AirflowFailException
from airflow.sdk import Param, dag, task

from airflow_provider_sms.notifications.sms import SmsNotifier

ON_CALL = ["33612345678", "33612345679"]
ALERT = SmsNotifier(
    text="[Airflow] {{ dag.dag_id }}.{{ ti.task_id }} failed (run {{ run_id }}, try {{ ti.try_number }})",
    recipients=ON_CALL,
)


@dag(
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="Europe/Paris"),
    catchup=False,
    default_args={"retries": 0, "on_failure_callback": ALERT},
    params={"fail": Param(False, type="boolean", description="Make the load task fail, to see the alert.")},
    tags=["sms", "example"],
)
def sms_failure_alerts() -> None:
    """Extract -> load; a failure of either sends the on-call SMS."""

    @task
    def extract() -> int:
        """Stand-in for reading new rows from a source."""
        return 42

    @task
    def load(rows: int, params: dict[str, Any] | None = None) -> int:
        """Stand-in for loading them; fails when the ``fail`` param is true (``params``: the context's)."""
        if params and params["fail"]:
            # AirflowFailException: fail at once, whatever ``retries`` says.
            raise AirflowFailException(f"load of {rows} rows failed on purpose (param fail=true)")
        return rows

    load(extract())


sms_failure_alerts()
