"""What the cases on the deployment share: a child process in its Airflow environment, a VACUUM
after a big load, GETs timed in turn, and the count of sms_default's asset events."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from benchmarks.harness import child_figures

if TYPE_CHECKING:
    from collections.abc import Mapping

    from tests.deployment.harness import Deployment

K = TypeVar("K")

ASSET = "sms_delivery_reports/sms_default"


def deployment_child(
    deployment: Deployment, module: str, *args: str, timeout: float = 1800
) -> dict[str, Any]:
    """Run ``python -m module args`` with the deployment's Airflow environment; the JSON line it
    prints last."""
    return child_figures(module, list(args), deployment.airflow_env(), timeout)


def vacuum_analyze(deployment: Deployment) -> None:
    """VACUUM ANALYZE the metadata database, as autovacuum would after a big load (not in a transaction)."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    url = deployment.database_url
    engine = sqlalchemy.create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(sqlalchemy.text("VACUUM ANALYZE"))
    finally:
        engine.dispose()


def interleaved_medians(
    gets: Mapping[K, tuple[str, Mapping[str, str]]], headers: Mapping[str, str], calls: int
) -> dict[K, float]:
    """Median milliseconds of each GET (``url``, ``params``), one after the other in turn, ``calls``
    rounds after a round that warms up; each answer must be 2xx."""
    times: dict[K, list[float]] = {key: [] for key in gets}
    with httpx.Client(timeout=600, headers=dict(headers)) as client:
        for call in range(calls + 1):
            for key, (url, params) in gets.items():
                began = time.perf_counter()
                client.get(url, params=params).raise_for_status()
                if call:  # the first round warms up
                    times[key].append((time.perf_counter() - began) * 1000)
    return {key: statistics.median(values) for key, values in times.items()}


def asset_events(api: Any) -> int:
    """How many events the asset of sms_default has, through Airflow's REST API."""
    assets = api.call("GET", "/assets", params={"name_pattern": ASSET})["assets"]
    (asset,) = [asset for asset in assets if asset["name"] == ASSET]
    return int(
        api.call("GET", "/assets/events", params={"asset_id": asset["id"], "limit": 1})["total_entries"]
    )
