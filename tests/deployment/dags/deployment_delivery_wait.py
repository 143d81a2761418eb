"""Test DAG of tests/deployment: the deferred wait for every delivery report of one campaign.

The campaign is sent by the test itself (20,000 numbers do not fit a run's conf); the run's conf names
it and how many messages it sent. The sensor waits until every message has a final status, and
returns the counts the scenarios compare with the sandbox's ground truth (two API servers, PostgreSQL
down).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Param, dag

from airflow_provider_sms.sensors.sms import SmsDeliveryReportsSensor
from tests.dag_defaults import dag_arguments


@dag(
    **dag_arguments(
        "sms", params={"campaign_id": Param(1, type="integer"), "expected": Param(1, type="integer")}
    )
)
def deployment_delivery_wait() -> None:
    """Wait in the triggerer until every message of the conf's campaign has a final status."""
    SmsDeliveryReportsSensor(
        task_id="wait_for_delivery",
        campaign="{{ params.campaign_id }}",
        expected="{{ params.expected }}",
        min_final_share=1.0,
        # The scenario gives up long before: this only bounds a run left behind.
        deadline=timedelta(minutes=15),
        poke_interval=2,
        deferrable=True,
    )


deployment_delivery_wait()
