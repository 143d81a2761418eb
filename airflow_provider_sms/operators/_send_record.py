"""The record stage of a send: the campaign record, built from what the send guard says went out.

The record (:class:`~airflow_provider_sms.campaigns.record.CampaignRecord`) is pushed under the XCom
key :data:`~airflow_provider_sms.campaigns.record.RECORD_KEY` whenever anything may have gone out,
whether the send finished or failed, signed for the task instance with the connection's token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_sms.campaigns.record import (
    RECORD_KEY,
    CampaignRecord,
    Outcome,
    SendWindowMove,
    TaskInstance,
)
from airflow_provider_sms.delay import parse_instant
from airflow_provider_sms.models import FILTER_FIELDS
from airflow_provider_sms.operators._recipient_batches import combine

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Mapping

    from airflow_provider_sms.operators._campaign import Campaign
    from airflow_provider_sms.operators._send_guard import SendGuard
    from airflow_provider_sms.send_window import Logger


def record_of(
    campaign: Campaign,
    guard: SendGuard,
    *,
    operator: str,
    result: Mapping[str, Any] | None,
    max_cost: float | None,
) -> CampaignRecord | None:
    """The record of what ``guard`` says was sent (and of ``result``, the send's return value, when the
    send finished); None when nothing may have gone out.

    :param campaign: the campaign the task ran.
    :param guard: the task instance's send guard, as the send left it.
    :param operator: the operator's class name.
    :param result: the operator's return value, when the send finished.
    :param max_cost: the cost gate, as rendered.
    """
    if not guard.batches:
        return None
    sent = {index: batch.campaign_result() for index, batch in guard.batches.items() if batch.state == "sent"}
    unknown = sorted(index + 1 for index, batch in guard.batches.items() if batch.state == "sending")
    sent_at = min(parse_instant(batch.started, field="started") for batch in guard.batches.values()).in_tz(
        "UTC"
    )
    if result is not None:
        figures: Mapping[str, Any] = result
        delivery_at: dt.datetime = parse_instant(result["delivery_at"], field="delivery_at")
    else:
        results = [sent[index] for index in sorted(sent)]
        figures = combine(results) if results else {"total": 0, "sent": 0, "cost": 0, "credits": 0}
        delay = campaign.message.delay
        delivery_at = parse_instant(delay) if delay else sent_at
    if unknown:
        outcome: Outcome = "maybe_sent"
    elif len(sent) < campaign.plan.batches:
        outcome = "partly_sent"
    else:
        outcome = "sent"
    return CampaignRecord(
        conn_id=campaign.hook.sms_conn_id,
        operator=operator,
        outcome=outcome,
        pushtype=campaign.message.pushtype,
        lists=[ref.value for ref in campaign.lists] if campaign.lists is not None else None,
        tickets=[int(sent[index].ticket or 0) for index in sorted(sent)],
        batches=campaign.plan.batches,
        unknown_batches=unknown,
        sent_at=sent_at,
        delivery_at=delivery_at,
        send_window=SendWindowMove.model_validate(campaign.moved) if campaign.moved else None,
        total=figures.get("total", 0),
        sent=figures.get("sent", 0),
        filtered={name: figures[name] for name in FILTER_FIELDS if figures.get(name)},
        cost=figures.get("cost", 0),
        credits=figures.get("credits", 0),
        max_cost=max_cost,
    )


def push_record(
    ti: Any,
    campaign: Campaign,
    guard: SendGuard,
    *,
    operator: str,
    result: Mapping[str, Any] | None,
    max_cost: float | None,
    log: Logger,
) -> bool:
    """Push the campaign record (XCom ``sms_campaign``, for the campaigns page) when anything may have
    gone out; whether it was pushed. Never raises: the send's own outcome is what the task must show.

    :param ti: the running task instance (``context["ti"]``).
    """
    try:
        record = record_of(campaign, guard, operator=operator, result=result, max_cost=max_cost)
        if record is None:
            return False
        identity = guard.identity
        task = TaskInstance(
            identity["dag_id"], identity["run_id"], identity["task_id"], identity["map_index"]
        )
        ti.xcom_push(key=RECORD_KEY, value=record.signed_value(task, campaign.hook.settings.token))
    except Exception as exc:
        log.warning(
            "The campaign record (XCom %r) could not be pushed: %s; the campaigns page will not list "
            "this campaign (the send guard, Airflow Variable %r, still records it)",
            RECORD_KEY,
            exc,
            guard.key,
        )
        return False
    return True
