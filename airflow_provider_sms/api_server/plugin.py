"""The Airflow plugin of the provider's app on the API server: the delivery-report receiver, and the
campaigns page with its JSON API (:mod:`.app`).

Registered through the ``airflow.plugins`` entry point (a provider's ``plugins`` key is only read with
``[core] lazy_discover_providers = False``). Airflow loads plugins in its other processes too, tasks
included; only the API server reads ``fastapi_apps``, so the app (FastAPI, SQLAlchemy, the hook) is
imported there and nowhere else. Airflow 3.1 and later show ``external_views`` in the UI: the "SMS
campaigns" entry under Browse and a tab on the DAG-run page; Airflow 3.0 has no plugin pages and
ignores them (its users have the JSON API).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_sms.campaigns.link import CAMPAIGNS_ROUTE

# Where the campaigns page is, under the provider's app.
CAMPAIGNS_PAGE = "/sms/campaigns/ui/"


def base_path() -> str:
    """The path Airflow's UI is served under (``[api] base_url``'s path, e.g. ``/airflow``), or ``""``."""
    from airflow.configuration import conf

    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


class SmsApiServerPlugin(AirflowPlugin):
    """Serves ``/sms/delivery-reports/...`` and ``/sms/campaigns/...`` on the Airflow API server."""

    # The name it is registered and listed under (``airflow plugins``), kept from its first release.
    name = "sms_delivery_reports"

    @cached_property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from airflow_provider_sms.api_server.app import build_app
        from airflow_provider_sms.delivery_reports.settings import URL_PREFIX

        return [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "SMS delivery reports and campaigns"}]

    @cached_property
    def external_views(self) -> list[dict[str, Any]]:  # type: ignore[override]
        page = base_path() + CAMPAIGNS_PAGE
        icons = {"icon": f"{page}static/icon.svg", "icon_dark_mode": f"{page}static/icon-dark.svg"}
        return [
            {
                "name": "SMS campaigns",
                "href": page,
                "destination": "nav",
                "category": "browse",
                # The send tasks' "SMS campaign" extra link opens the page at this route.
                "url_route": CAMPAIGNS_ROUTE,
                **icons,
            },
            {
                "name": "SMS campaigns",
                # Airflow fills in the run's DAG and id (URL-encoded from 3.2; 3.1 puts them as they are).
                "href": page + "?dag_id={DAG_ID}&run_id={RUN_ID}",
                "destination": "dag_run",
                "url_route": f"{CAMPAIGNS_ROUTE}-run",
                **icons,
            },
        ]
