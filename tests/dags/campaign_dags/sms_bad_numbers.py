"""Sends with bad numbers among the recipients, run by tests/dags/test_numbers_masked.py.

``skip``: the bad numbers are left out with a warning, the others sent; ``fail``: the task fails on
them before any request. Either way the task's log quotes the bad numbers masked.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator

# Valid, national (0...), letters in it; every one made up for this test.
RECIPIENTS = ["33612000301", "0612000302", "+33 6 12 ab 03 03"]

with DAG(
    "sms_bad_numbers",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["test"],
    doc_md=__doc__,
):
    SmsSendOperator(
        task_id="send_skipping",
        message={"text": "Your parcel is on its way", "pushtype": "alert"},
        recipients=RECIPIENTS,
        invalid_numbers="skip",
    )
    SmsSendOperator(
        task_id="send_failing",
        message={"text": "Your parcel is out for delivery", "pushtype": "alert"},
        recipients=RECIPIENTS,
        invalid_numbers="fail",
    )
