"""Delivery reports in Airflow: the asset that gets an event per report, and reading those events.

The API server's receiver (this package's plugin) stores each delivery report the service posts and
records an event of :func:`delivery_reports_asset` for it, so a DAG can be scheduled on reports::

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
    """The asset that gets one event per delivery report received for ``conn_id``.

    One asset per connection, not per campaign: campaigns are made at run time, schedules at parse
    time. Its name and URI are ``sms_delivery_reports/<conn_id>``.

    :param conn_id: the ``sms`` connection whose reports are meant.
    """
    from airflow.sdk import Asset

    name = asset_name(conn_id)
    return Asset(name=name, uri=name)


def reports_from_events(events: Mapping[Any, Iterable[Any]] | Iterable[Any] | None) -> list[DeliveryReport]:
    """The delivery reports carried by asset events, in the order given.

    :param events: a task's ``triggering_asset_events`` (events by asset; only delivery-report events
        are read, other assets' are left out), or events of one asset (e.g. ``inlet_events[asset]``).
    """
    # Imported here: DAG files import this module for the asset, and the models are not needed to parse.
    from airflow_provider_sms.models import DeliveryReport

    if events is None:
        return []
    if isinstance(events, Mapping):
        events = [event for asset_events in events.values() for event in asset_events]
    return [
        DeliveryReport.model_validate(event.extra)
        for event in events
        if isinstance(getattr(event, "extra", None), Mapping)
        and "campaign_id" in event.extra
        and "conn_id" in event.extra
    ]
