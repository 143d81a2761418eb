"""Test DAG of tests/deployment: one send, its text and numbers given by the run's conf.

Four runs of it at once, each with its own campaign, spread over both Celery workers (scenario 4).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag

from airflow_provider_sms.operators.sms import SmsSendOperator


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    # The recipients param is a list: rendered as one, not as its text.
    render_template_as_native_obj=True,
    params={
        "text": Param("Deployment test", type="string"),
        "recipients": Param(["33611110001"], type="array"),
    },
    tags=["sms", "test"],
)
def deployment_send() -> None:
    """Send the conf's text to the conf's numbers, once."""
    SmsSendOperator(
        task_id="send",
        message={"text": "{{ params.text }}", "pushtype": "alert"},
        recipients="{{ params.recipients }}",
    )


deployment_send()
