"""A DAG scheduled on delivery reports: the API server records an asset event per batch of reports.

Each run reads the reports of the events that triggered it (one or many: Airflow makes one run for the
events queued since the last; each event names up to 1,000 reports, read from the API server) and
counts their statuses. Needs the receiver set up (see the "Delivery reports" page);
``sms_campaign_delivery`` is the DAG that waits for one campaign's reports after its send.
"""

from __future__ import annotations

# --8<-- [start:code] docs/delivery-reports.md shows the file from here to the end marker.
from collections import Counter
from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_sms.delivery_reports import delivery_reports_asset, reports_from_events


@dag(
    schedule=[delivery_reports_asset("sms_default")],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["sms", "example"],
)
def sms_on_delivery_reports() -> None:
    """Run on delivery reports: count the statuses of the reports that triggered this run."""

    @task
    def count_statuses(*, triggering_asset_events: Any = None) -> dict[str, int]:
        reports = reports_from_events(triggering_asset_events)
        counts = dict(Counter(report.status_name for report in reports))
        print(f"{len(reports)} delivery report(s): {counts}")
        return counts

    count_statuses()


sms_on_delivery_reports()
# --8<-- [end:code]
