"""A send task with Airflow retries, run by tests/dags/test_never_twice.py against a faulty sandbox.

``retries=2``: Airflow would try the task three times if the operator let it. A send whose outcome is
unknown must fail at once, without a retry; a refused one (nothing sent) may be retried.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

with DAG("sms_send_with_retries", **dag_arguments(doc_md=__doc__)):
    SmsSendOperator(
        task_id="send",
        message=alert("Your parcel is on its way"),
        recipients=["33612000101", "33612000102"],
        retries=2,
        retry_delay=timedelta(seconds=1),
    )
