"""Test DAG of tests/deployment: one send, its text and numbers given by the run's conf, retried once.

Two runs of it race for one campaign across two workers and two API servers, one of the workers killed
in some repetitions: the retry of a killed send resumes its own claim.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import Param, dag

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import dag_arguments


@dag(
    **dag_arguments(
        "sms",
        render_template_as_native_obj=True,
        params={
            "text": Param("Deployment claim race", type="string"),
            "recipients": Param(["33611110001"], type="array"),
        },
        default_args={"retries": 1, "retry_delay": dt.timedelta(seconds=1)},
    )
)
def deployment_claim_race() -> None:
    """Send the conf's text to the conf's numbers, once; a try whose worker died is retried."""
    SmsSendOperator(
        task_id="send",
        message={"text": "{{ params.text }}", "pushtype": "alert"},
        recipients="{{ params.recipients }}",
    )


deployment_claim_race()
