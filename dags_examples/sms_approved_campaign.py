"""A weekly marketing campaign that asks a person before it goes over its budget.

What it shows:

- ``SmsSendListsOperator`` with ``max_cost`` (a DAG param, 50 credits by default, so a run can be
  triggered with another cap: ``-c '{"max_cost": 5}'`` or the trigger form): the exact campaign is
  simulated first and sent at once when it costs at most that;
- ``on_cost_exceeded="ask"``: when it costs more, it is not refused outright: the send task asks in
  Airflow's **Required actions** (the DAG run's and the task's tab, and Browse -> Required Actions),
  with the figures (cost and cap, credits left after it, numbers sent and filtered, SMS parts, the
  text), "Send" or "Do not send". Only the ``approvers`` may answer (user names with the simple auth
  manager; ``{"id": ..., "name": ...}`` with another). "Send" resumes the task, which simulates again
  and sends at no more than the cost shown (a dearer or changed campaign is refused); "Do not send",
  or no answer within ``approval_timeout`` (6 hours: this week's slot is missed), skips it, nothing
  sent. The wait holds no worker slot;
- ``approval_notifiers``: as the question is asked, ``SmsNotifier`` with ``APPROVAL_TEXT`` texts the
  approvers the cost, the gate and the link to the question (set ``[api] base_url`` on the workers
  for the link); an ``alert`` SMS, sent at any hour;
- a ``marketing`` campaign obeys the send window (08:00-20:00 Paris, Monday to Saturday, no French
  public holidays): approved in the evening, it is postponed to the next opening.

**Airflow 3.0.** ``ask`` needs Airflow's human-in-the-loop (Airflow 3.1 and later); on 3.0 the
operator refuses it when the DAG file is parsed. So this file asks only where Airflow can
(``ON_COST_EXCEEDED``): on 3.0 a campaign over its cap fails the task instead (not retried, with the
same figures in its log), nothing sent, and the approvers' arguments are unused. Raise the cap and
trigger the DAG again to send it.

Connection: ``sms_default``.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow import __version__ as airflow_version
from airflow.sdk import Param, dag
from packaging.version import Version

from airflow_provider_sms.notifications.sms import APPROVAL_TEXT, SmsNotifier
from airflow_provider_sms.operators.sms import SmsSendListsOperator

LISTS = [1, 2]
MESSAGE = {
    "text": "This week only: a second pair of shoes at half price, in all our stores.",
    "pushtype": "marketing",
}
# Airflow users who may answer, and the phones of those to text.
APPROVERS = ["marketing.lead", "head.of.sales"]
APPROVER_PHONES = ["33612345690", "33612345691"]
# Human-in-the-loop came with Airflow 3.1: there, ask; on 3.0, fail (see the docstring).
ON_COST_EXCEEDED = "ask" if Version(airflow_version).release >= (3, 1) else "fail"


@dag(
    schedule="0 10 * * 2",
    start_date=pendulum.datetime(2026, 1, 6, tz="Europe/Paris"),
    catchup=False,
    params={
        "max_cost": Param(
            50, type="integer", minimum=0, description="Most credits the campaign may cost unasked."
        ),
    },
    tags=["sms", "example"],
)
def sms_approved_campaign() -> None:
    """Tuesdays 10:00 Paris: send the week's offer to the stored lists; over budget, ask first."""
    SmsSendListsOperator(
        task_id="send",
        message=MESSAGE,
        lists=LISTS,
        max_cost="{{ params.max_cost }}",
        on_cost_exceeded=ON_COST_EXCEEDED,
        approvers=APPROVERS,
        approval_timeout=timedelta(hours=6),
        approval_notifiers=[SmsNotifier(text=APPROVAL_TEXT, recipients=APPROVER_PHONES)],
    )


sms_approved_campaign()
