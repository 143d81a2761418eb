"""Your first SMS campaign: simulate it, send it behind a cost gate for tomorrow 10:00 Paris time, then
wait for the numbers of that campaign that turned out to be unreachable (NPAI).

What it shows, in the order a new user meets it:

- recipients from a CSV export with a header (``customer_id,name,phone,gsmsmsid``):
  ``recipients_column="phone"`` names the numbers' column, the ``gsmsmsid`` column links each number to
  its delivery report; ``+33 6 ...`` is normalized to digits;
- ``SmsSimulateOperator``: what the campaign would cost and how many numbers the service would filter,
  with nothing created;
- ``SmsSendOperator`` with ``max_cost``: the exact campaign is simulated again and sent only when it
  costs at most that many credits; ``delay`` is tomorrow 10:00 in Paris, counted from when the run was
  due, which works for every kind of run (a marketing SMS on a Sunday or a French public holiday is
  moved to the next opening, and the result says so under ``send_window``);
- ``SmsNpaiSensor(campaign_id=send.output["ticket"])``: the ticket of the send, pulled from its own
  XCom key, feeds the sensor; deferrable, so the wait runs in the triggerer, not in a worker slot;
- a last task logging the unreachable numbers, for a CRM clean-up.

The recipients file is ``SMS_FIRST_CAMPAIGN_CSV`` in the environment, else the sample next to this file.
Connection: ``sms_default``.
"""

from __future__ import annotations

# --8<-- [start:code] README.md and docs/sensors.md show the file from here to the end marker.
import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_sms.operators.sms import SmsSendOperator, SmsSimulateOperator
from airflow_provider_sms.sensors.sms import SmsNpaiSensor

RECIPIENTS = Path(
    os.environ.get("SMS_FIRST_CAMPAIGN_CSV", Path(__file__).parent / "data" / "first_campaign.csv")
)
MESSAGE = {
    "text": "Winter sale: -20% on everything until Sunday. See you in store: <-short->",
    "pushtype": "marketing",
    "links": ["https://shop.example.com/winter-sale"],
}
# Tomorrow 10:00 in Paris, counted from when the run was due. Every kind of run has a run_after: a
# scheduled one, one triggered in the UI, one triggered through the REST API with no logical date
# (which has no data_interval_end). A "Y-m-d H:i:s" delay is read as Paris time.
TOMORROW_10_PARIS = (
    "{{ (dag_run.run_after.astimezone(macros.dateutil.tz.gettz('Europe/Paris'))"
    " + macros.timedelta(days=1)).strftime('%Y-%m-%d') }} 10:00:00"
)


@dag(
    schedule="0 9 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="Europe/Paris"),
    catchup=False,
    tags=["sms", "example"],
)
def sms_first_campaign() -> None:
    """Simulate, send behind a cost gate for tomorrow 10:00 Paris, wait for the campaign's NPAI entries."""
    simulate = SmsSimulateOperator(
        task_id="simulate", message=MESSAGE, recipients=RECIPIENTS, recipients_column="phone"
    )
    send = SmsSendOperator(
        task_id="send",
        message=MESSAGE,
        recipients=RECIPIENTS,
        recipients_column="phone",
        delay=TOMORROW_10_PARIS,
        max_cost=50,
    )
    unreachable = SmsNpaiSensor(
        task_id="unreachable",
        campaign_id=send.output["ticket"],
        deferrable=True,
        poke_interval=60,
        timeout=6 * 3600,
    )

    @task
    def clean_up(npai: dict[str, Any]) -> list[str]:
        """What a CRM clean-up would get: the numbers to stop sending to."""
        print(f"{npai['count']} unreachable number(s) in this campaign: {', '.join(npai['destinations'])}")
        return list(npai["destinations"])

    simulate >> send >> unreachable
    clean_up(unreachable.output)


sms_first_campaign()
# --8<-- [end:code]
