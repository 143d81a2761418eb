"""Test DAG of tests/deployment: a daily reminder for 10:00 Paris two days after the run's day.

Its scheduled run and a manual run for the same day make the same campaign: the second is refused.
Runs for consecutive days make two campaigns. (Two days ahead, so that a run for the day before the
scheduled one, the scenario's other day, still has its delivery in the future: Airflow does not start a
run whose logical date is in the future.)
"""

from __future__ import annotations

from airflow.sdk import dag

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments


@dag(**dag_arguments("sms", schedule="0 9 * * *", tz="Europe/Paris"))
def deployment_daily_reminder() -> None:
    """Remind the customers of their appointment, in two days at 10:00 Paris time."""
    SmsSendOperator(
        task_id="send",
        message=alert("Reminder: your appointment is in two days at 10:00"),
        recipients=["33612000301", "33612000302", "33612000303"],
        delay="{{ logical_date.in_tz('Europe/Paris').add(days=2).at(10) }}",
    )


deployment_daily_reminder()
