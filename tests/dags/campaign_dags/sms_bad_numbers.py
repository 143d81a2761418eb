"""Sends with bad numbers among the recipients, run by tests/dags/test_numbers_masked.py.

``skip``: the bad numbers are left out with a warning, the others sent; ``fail``: the task fails on
them before any request. Either way the task's log quotes the bad numbers masked.
"""

from __future__ import annotations

from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

# Valid, national (0...), letters in it; every one made up for this test.
RECIPIENTS = ["33612000301", "0612000302", "+33 6 12 ab 03 03"]

with DAG("sms_bad_numbers", **dag_arguments(doc_md=__doc__)):
    SmsSendOperator(
        task_id="send_skipping",
        message=alert("Your parcel is on its way"),
        recipients=RECIPIENTS,
        invalid_numbers="skip",
    )
    SmsSendOperator(
        task_id="send_failing",
        message=alert("Your parcel is out for delivery"),
        recipients=RECIPIENTS,
        invalid_numbers="fail",
    )
