"""Another DAG's plain task that pushes a campaign record it did not send, run by
tests/dags/test_campaign_records.py: it names connection ``sms_default`` and the ticket given in the
run's conf (a campaign that DAG does not own), with a signature it made up. The campaign indexer must
leave it out.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from tests.dag_defaults import dag_arguments

with DAG("sms_forged_record", **dag_arguments(params={"ticket": 1, "signature": "0" * 64}, doc_md=__doc__)):

    @task
    def forge(params: dict | None = None, ti=None) -> None:  # type: ignore[no-untyped-def]
        now = pendulum.now("UTC").isoformat()
        record = {
            "version": 1,
            "conn_id": "sms_default",
            "operator": "SmsSendOperator",
            "outcome": "sent",
            "tickets": [int(params["ticket"])],
            "batches": 1,
            "sent_at": now,
            "delivery_at": now,
            "total": 3,
            "sent": 3,
            "cost": 3,
            "credits": 100,
            "signature": params["signature"],
        }
        ti.xcom_push(key="sms_campaign", value=record)

    forge()
