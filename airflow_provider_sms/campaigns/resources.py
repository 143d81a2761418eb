"""What the campaigns JSON API answers (version 1), one pydantic model per resource. Not public API."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from airflow_provider_sms.campaigns.record import Outcome, SendWindowMove


class ApiModel(BaseModel):
    model_config = ConfigDict(frozen=True)


class Delivery(ApiModel):
    """How a campaign's messages stand, from its delivery reports received so far.

    :param sent: numbers the service accepted (the bar's whole).
    :param delivered: messages delivered; ``failed``: with another final status.
    :param not_final: the rest (no report yet, or ``sent`` to the carrier).
    :param delivered_share: ``delivered / sent`` (0 when nothing was sent).
    :param by_status: messages by status name.
    :param reports_pruned_at: when the retention deleted the campaign's delivery reports: the figures
        above are then unknown (zero).
    :param reports_received: whether the API server receives the delivery reports of the campaign's
        connection (its extra names the account's webhook, ``dlr_webhook_id``). False: they go to the
        receiver of the connection the webhook calls, and the figures above stay at zero. None: the
        connection cannot be read now.
    """

    sent: int
    delivered: int
    failed: int
    not_final: int
    delivered_share: float
    by_status: dict[str, int]
    reports_pruned_at: datetime | None = None
    reports_received: bool | None = None


class Campaign(ApiModel):
    """One campaign, as the list shows it (a send task instance's campaign).

    :param id: the campaign's id on this page (not the service's: that is ``tickets``).
    :param filtered: numbers the service filtered out, by reason.
    """

    id: int
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    conn_id: str
    operator: str
    outcome: Outcome
    pushtype: str | None
    lists: list[int] | None
    tickets: list[int]
    batches: int
    unknown_batches: list[int]
    sent_at: datetime
    delivery_at: datetime
    send_window: SendWindowMove | None
    total: int
    sent: int
    filtered: dict[str, int]
    cost: int
    credits: int
    max_cost: float | None
    delivery: Delivery


class CampaignPage(ApiModel):
    """A page of campaigns, newest first; ``next`` is the ``before`` of the following page (None: last)."""

    campaigns: list[Campaign]
    next: str | None


class FailedNumbers(ApiModel):
    """One page of a campaign's failed numbers, in number order.

    :param masked: whether the numbers are masked (the user may not edit the DAG that sent them).
    :param next: where the following page starts (None: last, or masked).
    :param more: whether there are more failed numbers than these.
    """

    numbers: list[str]
    masked: bool
    next: str | None
    more: bool


class TimelinePoint(ApiModel):
    """Messages delivered and failed by the end of the minute ``at`` (UTC), counted from the send."""

    at: datetime
    delivered: int
    failed: int


class CampaignDetail(ApiModel):
    """One campaign with its delivery over time and its failures: by status, by country, and the first
    page of failed numbers."""

    campaign: Campaign
    timeline: list[TimelinePoint]
    failed_by_status: dict[str, int]
    failed_by_country: dict[str, int]
    failed: FailedNumbers
