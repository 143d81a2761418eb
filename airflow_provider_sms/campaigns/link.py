"""The "SMS campaign" extra link of the send tasks, to their campaign on the campaigns page.

Airflow 3 computes an operator's extra links on the worker when the task ends (its ``finalize``) and
keeps each one in XCom (``_link_SmsCampaignLink``), which the API server reads to show it. A worker
cannot read the campaigns table, and the campaign's page id (``sms_campaign.id``) is given later, by the
API server's indexer: so the link names the task instance and the page resolves it (its campaign when
there is exactly one, else the task instance's campaigns). DAG files import this module: it stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from airflow.providers.common.compat.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import BaseOperator, TaskInstanceKey

# The campaigns page's route in Airflow's UI (the plugin's external view ``url_route``): the page opens
# inside the UI at ``<base_url>/plugin/<route>``.
CAMPAIGNS_ROUTE = "sms-campaigns"


def campaigns_page_url(query: dict[str, str | int]) -> str:
    """The campaigns page inside Airflow's UI (``[api] base_url`` first, as Airflow's own links), at the
    page's route ``#/task?<query>``."""
    from airflow.providers.common.compat.sdk import conf

    base = conf.get("api", "base_url", fallback="/") or "/"
    return f"{base.rstrip('/')}/plugin/{CAMPAIGNS_ROUTE}#/task?{urlencode(query)}"


class SmsCampaignLink(BaseOperatorLink):
    """Opens the campaign a send task instance sent, on the campaigns page in Airflow's UI (Airflow 3.1
    and later).

    No link (``""``) when the task sent nothing (a gate refused, a duplicate, bad input), or on Airflow
    3.0, which has no plugin pages (its users have the campaigns JSON API).
    """

    name = "SMS campaign"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The campaigns page of the task instance ``ti_key``'s campaign, or ``""``.

        :param operator: the send task; it says whether it pushed a campaign record.
        :param ti_key: the task instance (DAG, run, task, map index).
        """
        # Imported here: a link is computed when a task ends, never when a DAG file is parsed.
        from airflow_provider_sms._compat import airflow_3_1_or_later

        # Set by the send task once it pushed its campaign record: a task that sent nothing has none.
        if not airflow_3_1_or_later() or not getattr(operator, "campaign_recorded", False):
            return ""
        return campaigns_page_url(
            {
                "dag_id": ti_key.dag_id,
                "run_id": ti_key.run_id,
                "task_id": ti_key.task_id,
                "map_index": ti_key.map_index,
            }
        )
