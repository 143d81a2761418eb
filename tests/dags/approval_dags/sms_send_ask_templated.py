"""A send whose on_cost_exceeded comes from the run's params, run by tests/dags/test_approval_on_3_0.py.

On Airflow 3.0, which has no human-in-the-loop, a rendered "ask" fails the task before any request.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator

with DAG(
    "sms_send_ask_templated",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"on_cost_exceeded": "ask"},
    tags=["test"],
    doc_md=__doc__,
):
    SmsSendOperator(
        task_id="send",
        message={"text": "Spring sale: 20 % off everything until Sunday", "pushtype": "alert"},
        recipients=["33612000201", "33612000202"],
        max_cost=1,
        on_cost_exceeded="{{ params.on_cost_exceeded }}",
    )
