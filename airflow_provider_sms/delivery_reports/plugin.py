"""The Airflow plugin that serves the delivery-report receiver on the API server. Not public API.

Registered through the ``airflow.plugins`` entry point (a provider's ``plugins`` key is only read with
``[core] lazy_discover_providers = False``). Airflow loads plugins in its other processes too, tasks
included; only the API server reads ``fastapi_apps``, so the receiver (FastAPI, SQLAlchemy, the hook)
is imported there and nowhere else.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.plugins_manager import AirflowPlugin


class SmsDeliveryReportsPlugin(AirflowPlugin):
    """Serves ``POST /sms/delivery-reports/{conn_id}`` and its summary on the Airflow API server."""

    name = "sms_delivery_reports"

    @cached_property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from airflow_provider_sms.delivery_reports.receiver import build_app
        from airflow_provider_sms.delivery_reports.settings import URL_PREFIX

        return [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "SMS delivery reports"}]
