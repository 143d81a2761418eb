"""Campaign records as a send task pushes them, for the tests that feed the campaign indexer directly:
signed with the connection's token (the indexer copies no other), that connection readable by the
indexer, and the DAGs they name with rows of their own (a campaign of a DAG with no row is shown only
to the users who may read every DAG)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from airflow_provider_sms.campaigns.record import CampaignRecord, TaskInstance
from airflow_provider_sms.sandbox.testing import TEST_TOKEN

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Iterable, Iterator

# The bundle the tests' DAG rows belong to.
TEST_BUNDLE = "sms-campaign-tests"


def xcom_row(
    dag_id: str,
    value: dict[str, Any],
    at: dt.datetime,
    *,
    run_id: str = "scheduled__2031",
    task_id: str = "send",
    map_index: int = -1,
    token: str = TEST_TOKEN,
) -> Any:
    """The XCom row of the campaign record ``value`` pushed at ``at`` by that task instance, signed with
    ``token``."""
    task = TaskInstance(dag_id, run_id, task_id, map_index)
    signed = CampaignRecord.model_validate(value).signed_value(task, token)
    return SimpleNamespace(
        dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index, value=signed, timestamp=at
    )


def connection_env(conn_id: str, token: str = TEST_TOKEN) -> tuple[str, str]:
    """The environment variable that defines ``conn_id`` as an sms connection with ``token``."""
    value = {"conn_type": "sms", "host": "http://127.0.0.1:9", "password": token}
    return f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(value)


@contextmanager
def sms_connections(*conn_ids: str) -> Iterator[None]:
    """``conn_ids`` defined (as environment variables) for as long as the block runs."""
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        for conn_id in conn_ids:
            patch.setenv(*connection_env(conn_id))
        yield


def dag_rows(session: Any, dag_ids: Iterable[str]) -> None:
    """Give each of ``dag_ids`` a row in Airflow's ``dag`` table (of the tests' bundle), if it has none."""
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel

    if session.get(DagBundleModel, TEST_BUNDLE) is None:
        session.add(DagBundleModel(name=TEST_BUNDLE))
        session.flush()
    for dag_id in dag_ids:
        if session.get(DagModel, dag_id) is None:
            session.add(DagModel(dag_id=dag_id, bundle_name=TEST_BUNDLE))
    session.flush()
