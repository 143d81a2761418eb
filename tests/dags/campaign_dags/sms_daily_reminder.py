"""A daily reminder for tomorrow 10:00 Paris, run by tests/dags/test_never_twice.py on chosen logical dates.

Two runs for the same day (a scheduled one and a manual one) make the same campaign: the second is
refused. Runs on consecutive days make two campaigns. ``on_duplicate`` comes from the run's conf.
"""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

with DAG(
    "sms_daily_reminder",
    **dag_arguments(
        schedule="0 9 * * *",
        tz="Europe/Paris",
        params={"on_duplicate": "fail"},
        doc_md=__doc__,
    ),
):
    SmsSendOperator(
        task_id="send",
        message=alert("Reminder: your appointment is tomorrow at 10:00"),
        recipients=["33612000201", "33612000202", "33612000203"],
        delay="{{ logical_date.in_tz('Europe/Paris').add(days=1).at(10) }}",
        on_duplicate="{{ params.on_duplicate }}",
    )
