"""Send an SMS to every customer an upstream pipeline exported, as soon as the export is updated.

What it shows:

- data-aware scheduling: the DAG runs whenever the ``sms_recipients`` Asset (a CSV file) is updated by
  an upstream DAG (any task with ``outlets=[RECIPIENTS]``), not on a clock;
- a ``@task`` reading the numbers from the CSV (column ``phone``); its path is the ``csv_path`` param,
  by default the Asset's file (``SMS_RECIPIENTS_CSV`` in the environment, else
  ``/tmp/sms_example/recipients.csv``);
- ``SmsSendOperator`` with batching (``batch_size`` numbers per request, each batch recorded by the
  send guard so a retry never sends a batch twice) behind a cost gate: when the whole campaign would
  cost more than ``max_cost`` credits, the task fails before sending anything.

It sends an ``alert`` (a transactional message), which the marketing send window does not restrict.
Connection: ``sms_default``.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pendulum
from airflow.sdk import Asset, Param, dag, task

from airflow_provider_sms.operators.sms import SmsSendOperator

RECIPIENTS_CSV = Path(os.environ.get("SMS_RECIPIENTS_CSV", "/tmp/sms_example/recipients.csv"))
RECIPIENTS = Asset(name="sms_recipients", uri=RECIPIENTS_CSV.absolute().as_uri())
# Numbers per POST /send; the service takes large campaigns, smaller batches bound what a failure costs.
BATCH_SIZE = int(os.environ.get("SMS_BATCH_SIZE", "1000"))


@dag(
    schedule=[RECIPIENTS],
    start_date=pendulum.datetime(2026, 1, 1, tz="Europe/Paris"),
    catchup=False,
    params={
        "csv_path": Param(str(RECIPIENTS_CSV), type="string", description="CSV with a 'phone' column."),
        "max_cost": Param(500, type="integer", minimum=0, description="Most credits the campaign may cost."),
    },
    tags=["sms", "example"],
)
def sms_triggered_by_data() -> None:
    """Read the exported numbers, then send them the message in batches behind a cost gate."""

    @task
    def read_numbers(csv_path: str) -> list[str]:
        """The non-empty ``phone`` values of the CSV (the operator normalizes and deduplicates them)."""
        with open(csv_path, newline="", encoding="utf-8") as handle:
            return [
                row["phone"].strip() for row in csv.DictReader(handle) if (row.get("phone") or "").strip()
            ]

    SmsSendOperator(
        task_id="send",
        message={"text": "Your order has shipped. Track it in your customer area.", "pushtype": "alert"},
        recipients=read_numbers("{{ params.csv_path }}"),
        batch_size=BATCH_SIZE,
        max_cost="{{ params.max_cost }}",
        on_cost_exceeded="fail",
    )


sms_triggered_by_data()
