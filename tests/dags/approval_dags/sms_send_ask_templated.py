"""A send whose on_cost_exceeded comes from the run's params, run by tests/dags/test_approval_on_3_0.py.

On Airflow 3.0, which has no human-in-the-loop, a rendered "ask" fails the task before any request.
"""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

with DAG("sms_send_ask_templated", **dag_arguments(params={"on_cost_exceeded": "ask"}, doc_md=__doc__)):
    SmsSendOperator(
        task_id="send",
        message=alert("Spring sale: 20 % off everything until Sunday"),
        recipients=["33612000201", "33612000202"],
        max_cost=1,
        on_cost_exceeded="{{ params.on_cost_exceeded }}",
    )
