"""A weekly marketing campaign to stored lists, with a cost gate, then the NPAI clean-up.

What it shows:

- a cron schedule in Europe/Paris time (Mondays 09:00 Paris, whatever the DST), ``catchup=False``;
- ``SmsWebhookSensor``: the delivery-report (DLR) webhook must be live before anything is sent;
- ``SmsSimulateOperator``: the figures of the campaign (cost, filtered numbers) in the UI and XCom;
- ``SmsSendListsOperator`` behind a cost gate: ``max_cost`` and ``on_cost_exceeded`` come from the
  DAG's params, so a run can be triggered with another cap (``-c '{"max_cost": 5}'`` or the trigger
  form); the gate simulates the exact campaign and sends only when it costs at most ``max_cost``;
- a delay computed from the data interval: the SMS go out two hours after the run's interval ends
  (11:00 Paris for the Monday 09:00 run). As a ``marketing`` campaign it obeys the send window
  (08:00-20:00 Paris, Monday to Saturday, no public holidays): a manual run in the evening is
  postponed to the next opening (``send_window="postpone"``, logged). A run started more than two
  hours late would compute a delay in the past and fail before sending: clear it with a new run;
- ``SmsNpaiSensor`` (deferrable: the wait runs in the triggerer) on the campaign's ticket, then a task
  that reports the unreachable numbers found, for the CRM.

Connection: ``sms_default`` (e.g. ``AIRFLOW_CONN_SMS_DEFAULT``); ``make demo`` runs this DAG.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow.sdk import Param, dag, task

from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSimulateOperator
from airflow_provider_sms.sensors.sms import SmsNpaiSensor, SmsWebhookSensor

log = logging.getLogger(__name__)

LISTS = [1, 2]
MESSAGE = {
    "text": "Weekly deals: 20% off everything until Sunday in all our stores.",
    "pushtype": "marketing",
}
# Two hours after the data interval ends (an ISO-8601 string with offset; converted to Paris time). A run
# triggered without a logical date (REST API, UI) has no data interval: two hours after it was triggered.
DELAY = (
    "{{ ((data_interval_end if data_interval_end is defined else dag_run.run_after)"
    " + macros.timedelta(hours=2)).isoformat() }}"
)


@dag(
    schedule="0 9 * * 1",
    start_date=pendulum.datetime(2026, 1, 5, tz="Europe/Paris"),
    catchup=False,
    params={
        "max_cost": Param(50, type="integer", minimum=0, description="Most credits the campaign may cost."),
        "on_cost_exceeded": Param(
            "skip", enum=["skip", "fail"], description="What to do when the campaign costs more."
        ),
    },
    tags=["sms", "example"],
)
def sms_weekly_campaign() -> None:
    """Webhook live -> simulate -> cost-gated send -> wait for NPAI entries -> report them."""
    dlr_live = SmsWebhookSensor(
        task_id="dlr_webhook_live", webhook_id="1", deferrable=True, poke_interval=30, timeout=1800
    )
    simulate = SmsSimulateOperator(task_id="simulate", message=MESSAGE, lists=LISTS, delay=DELAY)
    send = SmsSendListsOperator(
        task_id="send",
        message=MESSAGE,
        lists=LISTS,
        delay=DELAY,
        max_cost="{{ params.max_cost }}",
        on_cost_exceeded="{{ params.on_cost_exceeded }}",
    )
    npai = SmsNpaiSensor(
        task_id="wait_for_npai",
        campaign_id="{{ ti.xcom_pull(task_ids='send')['ticket'] }}",
        min_entries=1,
        deferrable=True,
        poke_interval=5,
        exponential_backoff=True,
        timeout=6 * 3600,
    )

    @task
    def report_npai(found: dict[str, Any]) -> list[str]:
        """Log the campaign's unreachable numbers (a real DAG would remove them from the CRM)."""
        for entry in found["entries"]:
            log.info(
                "NPAI: %s (since %s, campaign %s)", entry["destination"], entry["date"], entry["campaign_id"]
            )
        log.info("%s unreachable number(s) to remove from the CRM", found["count"])
        return found["destinations"]

    dlr_live >> simulate >> send >> npai
    report_npai(npai.output)


sms_weekly_campaign()
