"""Delivery reports in Airflow: the asset that gets events of reports, and reading those events.

The API server's receiver (this package's plugin) stores each delivery report the service posts; its
flusher records an event of :func:`delivery_reports_asset` per batch of up to 1,000 reports (within
5 seconds of their arrival, by default), so a DAG can be scheduled on reports::

    @dag(schedule=[delivery_reports_asset("sms_default")])
    def on_reports():
        @task
        def count(*, triggering_asset_events=None):
            reports = reports_from_events(triggering_asset_events)
            ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_sms import DEFAULT_CONN_ID
from airflow_provider_sms.delivery_reports.settings import asset_name

if TYPE_CHECKING:
    from airflow.sdk import Asset

    from airflow_provider_sms.models import DeliveryReport

__all__ = ["delivery_reports_asset", "reports_from_events"]


def delivery_reports_asset(conn_id: str = DEFAULT_CONN_ID) -> Asset:
    """The asset that gets an event per batch of delivery reports received for ``conn_id``.

    One asset per connection, not per campaign: campaigns are made at run time, schedules at parse
    time. Its name and URI are ``sms_delivery_reports/<conn_id>``.

    :param conn_id: the ``sms`` connection whose reports are meant.
    """
    from airflow.sdk import Asset

    name = asset_name(conn_id)
    return Asset(name=name, uri=name)


def reports_from_events(events: Mapping[Any, Iterable[Any]] | Iterable[Any] | None) -> list[DeliveryReport]:
    """Every delivery report of asset events, in the order of the events (and of arrival within one).

    An event names a batch of reports, not the reports (the asset's page shows events to anyone who may
    read assets, and reports carry phone numbers): the reports are read from the API server's
    receiver, with the key derived from the connection's access token, so call this in a task that
    can read the connection. Events recorded one per report (before batches) carry their report.

    :param events: a task's ``triggering_asset_events`` (events by asset; only delivery-report events
        are read, other assets' are left out), or events of one asset (e.g. ``inlet_events[asset]``).
    """
    # Imported here: DAG files import this module for the asset, and the models are not needed to parse.
    from airflow_provider_sms.delivery_reports.client import ReceiverAccess, fetch_batch
    from airflow_provider_sms.hooks.sms import SmsHook
    from airflow_provider_sms.models import DeliveryReport

    if events is None:
        return []
    if isinstance(events, Mapping):
        events = [event for asset_events in events.values() for event in asset_events]
    access: dict[str, ReceiverAccess] = {}
    reports: list[DeliveryReport] = []
    for event in events:
        extra = getattr(event, "extra", None)
        if not isinstance(extra, Mapping) or not isinstance(extra.get("conn_id"), str):
            continue
        conn_id = extra["conn_id"]
        if "batch" in extra:
            if conn_id not in access:
                access[conn_id] = ReceiverAccess.of(SmsHook(sms_conn_id=conn_id))
            reports += [
                DeliveryReport.model_validate(report.model_dump())
                for report in fetch_batch(access[conn_id], int(extra["batch"]))
            ]
        elif "campaign_id" in extra:
            reports.append(DeliveryReport.model_validate(extra))
    return reports
