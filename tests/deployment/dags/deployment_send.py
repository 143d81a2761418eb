"""Test DAG of tests/deployment: one send, its text and numbers given by the run's conf.

Four runs of it at once, each with its own campaign, spread over both Celery workers (scenario 4).
"""

from __future__ import annotations

from airflow.sdk import Param, dag

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import dag_arguments


@dag(
    **dag_arguments(
        "sms",
        # The recipients param is a list: rendered as one, not as its text.
        render_template_as_native_obj=True,
        params={
            "text": Param("Deployment test", type="string"),
            "recipients": Param(["33611110001"], type="array"),
        },
    )
)
def deployment_send() -> None:
    """Send the conf's text to the conf's numbers, once."""
    SmsSendOperator(
        task_id="send",
        message={"text": "{{ params.text }}", "pushtype": "alert"},
        recipients="{{ params.recipients }}",
    )


deployment_send()
