"""The deployment (tests/deployment/harness) once per session, stopped at the end whatever happened.

``make test-deployment`` runs this folder on its own; the other pytest runs leave it out (see the
Makefile). The start-up time and each scenario's time are printed at the end of the run.
"""

from __future__ import annotations

import subprocess
import time
from typing import TYPE_CHECKING

import pytest
import sqlalchemy
from sqlalchemy.pool import NullPool

from airflow_provider_sms.sandbox.server import InspectionClient
from airflow_provider_sms.sandbox.testing import TEST_TOKEN
from tests.deployment.harness import AirflowApi, Deployment, clear_of_paris_slot, running_deployment, wait_for
from tests.deployment.harness.postgres import Postgres
from tests.deployment.harness.processes import free_port

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sqlalchemy.engine import Engine

    from tests.token_canary import TokenCanary

TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="session")
def deployment(tmp_path_factory: pytest.TempPathFactory, token_canary: TokenCanary) -> Iterator[Deployment]:
    """PostgreSQL, Redis, the sandbox and a CeleryExecutor Airflow, all on 127.0.0.1, for the session."""
    root = tmp_path_factory.mktemp("deployment")
    # The task logs, the triggerer's and every component's output are scanned for the token at the end.
    token_canary.watch_airflow_home(root)
    with running_deployment(root, TEST_TOKEN) as started:
        TIMINGS.update({f"start-up: {step}": seconds for step, seconds in started.timings.items()})
        yield started
    TIMINGS["teardown"] = started.timings["teardown"]
    leftovers = started.leftovers()
    assert leftovers == [], f"still running after the deployment stopped: {leftovers}"


@pytest.fixture
def api(deployment: Deployment) -> AirflowApi:
    """Airflow's REST API of the deployment (logged in)."""
    assert deployment.api is not None
    return deployment.api


@pytest.fixture
def unpause_scheduled(api: AirflowApi) -> Iterator[Callable[..., None]]:
    """Unpause a DAG with a cron schedule at ``hour``:00 Europe/Paris (``weekday``: weekly) for the test.

    Not within minutes of its next slot (:func:`~tests.deployment.harness.clear_of_paris_slot`), and paused
    again after the test: left unpaused, at its next slot it would start a run during a later scenario of
    the session and send a campaign into that scenario's sandbox.
    """
    unpaused: list[str] = []

    def unpause(dag_id: str, hour: int, weekday: int | None = None) -> None:
        clear_of_paris_slot(hour, weekday)
        api.unpause(dag_id)
        unpaused.append(dag_id)

    yield unpause
    for dag_id in unpaused:
        api.pause(dag_id)


@pytest.fixture
def sandbox(deployment: Deployment, api: AirflowApi) -> Iterator[InspectionClient]:
    """The sandbox's inspection API, reset to its seeds with no faults before and after the test.

    The claims go with it: no scenario's campaign is a duplicate of an earlier one's.
    """
    client = InspectionClient(deployment.sandbox_url)
    client.reset()
    deployment.forget_campaigns()
    yield client
    client.reset()


@pytest.fixture
def timings() -> dict[str, float]:
    """Figures a scenario adds to the timings printed at the end (seconds)."""
    return TIMINGS


@pytest.fixture(autouse=True)
def _scenario_timer(request: pytest.FixtureRequest) -> Iterator[None]:
    began = time.monotonic()
    yield
    TIMINGS[f"scenario: {request.node.name}"] = time.monotonic() - began


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the deployment's start-up time (per step) and each scenario's time."""
    if TIMINGS:
        terminalreporter.section("deployment timings")
        for what, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{what}: {seconds:.1f} s")


@pytest.fixture
def postgres() -> Iterator[Engine]:
    """A PostgreSQL cluster of its own on 127.0.0.1 (not the deployment's), an engine on its database."""
    database = Postgres.create(free_port())
    server = subprocess.Popen(
        database.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_for("postgres to accept connections", database.create_database, 60, interval=0.3)
        engine = sqlalchemy.create_engine(database.url, poolclass=NullPool)
        yield engine
        engine.dispose()
    finally:
        # `pg_ctl stop` ends the server (a signal to the process started here would reach runuser only).
        database.stop()
        server.wait(timeout=60)
        database.remove()
