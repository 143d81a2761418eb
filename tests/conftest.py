"""Fixtures shared by every test folder: a throwaway Airflow home for running real DAGs.

``airflow_home`` migrates one SQLite metadata database per test session; ``run_dag_test`` runs
``airflow dags test`` for one DAG file in a subprocess against it, with the environment the test
gives (typically ``AIRFLOW_CONN_SMS_DEFAULT`` pointing at the sandbox).

The token canary (tests/token_canary.py) watches the whole session: the home, and every DAG run's output.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported by pytest_plugins below, where its asserts are rewritten
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from tests.token_canary import TokenCanary

# The token canary guards every test; pytester runs the guard's own tests; the metrics recorder is a fixture.
pytest_plugins = ["tests.token_canary", "tests.metrics_recorder", "pytester"]

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
# The repository's root: the test DAG files import tests.dag_defaults from there.
REPO = Path(__file__).resolve().parents[1]
# Upper bounds, so that a hung subprocess fails the test instead of blocking the suite.
MIGRATE_TIMEOUT = 600
DB_MANAGER = "airflow_provider_sms.delivery_reports.db.SmsDeliveryReportsDBManager"
DAG_TEST_TIMEOUT = 600
# What starts Airflow processes: the session's home (`airflow db migrate`, then every `airflow dags test`
# and API server on it), and the tiers that start their own Airflow.
SPAWNS_AIRFLOW_FIXTURES = frozenset({"airflow_home"})
SPAWNS_AIRFLOW_MARKERS = ("dags", "ui", "deployment")


@pytest.hookimpl(tryfirst=True)  # before `-m` selects: the marker added here counts
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``spawns_airflow`` each test that starts Airflow: ``-m "not spawns_airflow"`` runs the rest."""
    for item in items:
        fixtures = SPAWNS_AIRFLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if fixtures or any(item.get_closest_marker(name) for name in SPAWNS_AIRFLOW_MARKERS):
            item.add_marker(pytest.mark.spawns_airflow)


def airflow_env(home: Path, dags_folder: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of an Airflow subprocess: this one without AIRFLOW* settings, plus ``home``.

    :param home: the AIRFLOW_HOME (its SQLite database, logs and config).
    :param dags_folder: the folder Airflow reads DAGs from.
    :param extra: more variables (connections as ``AIRFLOW_CONN_...``, test parameters).
    """
    env = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags_folder or home / "dags"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
        # The delivery-report table: Airflow 3.2 and later find its manager by themselves, 3.0 and 3.1 here.
        AIRFLOW__DATABASE__EXTERNAL_DB_MANAGERS=DB_MANAGER,
    )
    env.update(extra)
    return env


def plain_output(process: subprocess.CompletedProcess[str], drop_lines_with: str | None = None) -> str:
    """A subprocess's stdout and stderr as one line of plain text.

    Airflow 3.0 prints a task's error through rich: colours, boxes and lines wrapped at spaces, undone
    here so that a test can look for a message whole.

    :param drop_lines_with: leave out the lines that hold this text.
    """
    lines = (process.stdout + process.stderr).splitlines()
    text = "\n".join(line for line in lines if drop_lines_with is None or drop_lines_with not in line)
    text = re.sub(r"[\u2500-\u257f]", " ", re.sub(r"\x1b\[[0-9;]*m", "", text))
    return re.sub(r"\s+", " ", text)


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory, token_canary: TokenCanary) -> Path:
    """A throwaway AIRFLOW_HOME whose metadata database is migrated once per session.

    The token canary scans it at the end of the session: logs, files, XComs and the rest of the database.
    """
    home = tmp_path_factory.mktemp("airflow_home")
    token_canary.watch_airflow_home(home)
    result = subprocess.run(
        [AIRFLOW, "db", "migrate"],
        env=airflow_env(home),
        capture_output=True,
        text=True,
        timeout=MIGRATE_TIMEOUT,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return home


@pytest.fixture(scope="module")
def metadata_db(airflow_home: Path) -> Iterator[Any]:
    """This process's Airflow ORM on the session's migrated database; restored afterwards."""
    from airflow import settings

    previous = settings.SQL_ALCHEMY_CONN
    settings.SQL_ALCHEMY_CONN = f"sqlite:///{airflow_home / 'airflow.db'}"
    settings.configure_orm()
    try:
        yield settings
    finally:
        settings.SQL_ALCHEMY_CONN = previous
        settings.configure_orm()


@pytest.fixture
def run_dag_test(
    airflow_home: Path, token_canary: TokenCanary
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``airflow dags test <dag_id> -f <dag_file>`` in a subprocess; returns the finished process.

    The DAG's folder is the DAGS_FOLDER; ``env`` adds variables (e.g. the sms_default connection);
    ``args`` adds options of ``airflow dags test`` (e.g. ``["-c", '{"max_cost": 5}']`` for run conf),
    ``logical_date`` the run's logical date.
    Under ``airflow dags test`` deferred tasks' triggers run inline, in the same process.
    Its stdout and stderr are checked by the token canary (a leak fails the test).

    Each test starts with an empty campaign register and no alert folds, as with a fresh sandbox: the
    runs of one test see each other's campaigns, those of earlier tests do not.
    """
    forget_campaigns(airflow_home)

    def run(
        dag_file: Path,
        dag_id: str,
        env: Mapping[str, str],
        args: Sequence[str] = (),
        logical_date: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        # The logical date is a positional argument: next to the DAG id, or argparse refuses it.
        positional = [dag_id, logical_date] if logical_date else [dag_id]
        process = subprocess.run(
            [AIRFLOW, "dags", "test", *positional, "-f", str(dag_file), *args],
            env=airflow_env(airflow_home, dag_file.parent, **env),
            capture_output=True,
            text=True,
            timeout=DAG_TEST_TIMEOUT,
            check=False,
        )
        token_canary.check_output(process.stdout, f"stdout of airflow dags test {dag_id}")
        token_canary.check_output(process.stderr, f"stderr of airflow dags test {dag_id}")
        return process

    return run


def latest_run(home: Path, dag_id: str) -> str:
    """The run id of ``dag_id``'s latest DAG run in the SQLite database in ``home``."""
    with sqlite3.connect(home / "airflow.db") as db:
        (run_id,) = db.execute(
            "SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()
    return str(run_id)


def forget_campaigns(home: Path) -> None:
    """Delete the claims and alert folds (the claim store's rows) of the SQLite database in ``home``."""
    with sqlite3.connect(home / "airflow.db") as db:
        for table in ("sms_claim_chunk", "sms_claim", "sms_claim_lock", "sms_alert_fold"):
            db.execute(f"DELETE FROM {table}")  # our own table names


class MemoryVariables:
    """Airflow Variables in a dict: the send guard's store when an operator runs outside a task.

    Inside a running task the guard reaches Variables through the Task SDK (the API server); a test
    that calls ``execute()`` directly has no such channel, so it swaps this in.
    """

    store: dict[str, str] = {}

    @classmethod
    def get(cls, key: str, default: object = None) -> object:
        return cls.store.get(key, default)

    @classmethod
    def set(cls, key: str, value: str, description: str | None = None) -> None:
        cls.store[key] = value


def use_memory_variables(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point the send guard at an empty in-memory Variable store, and the claim store at an empty
    database of its own (:func:`use_claim_store`)."""
    from airflow_provider_sms.operators import _send_guard as guard

    monkeypatch.setattr(MemoryVariables, "store", {})
    monkeypatch.setattr(guard, "Variable", MemoryVariables)
    use_claim_store(monkeypatch)
    return MemoryVariables.store


def use_claim_store(monkeypatch: pytest.MonkeyPatch, url: str | None = None) -> Any:
    """Point this process's Airflow ORM at a database holding the claim store's tables, empty: a send
    task run in this process (``execute()``) claims there, as under ``airflow dags test``.

    :param url: the database (a new SQLite file when None). Returns its engine.
    """
    import tempfile

    from airflow import settings
    from sqlalchemy import create_engine
    from sqlalchemy.orm import scoped_session, sessionmaker

    from airflow_provider_sms.api_server.claims import TABLES, metadata

    if url is None:
        url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='sms-claims-')) / 'claims.db'}"
    arguments = (
        {"connect_args": {"check_same_thread": False, "timeout": 30}} if url.startswith("sqlite") else {}
    )
    engine = create_engine(url, **arguments)
    metadata.create_all(engine, tables=list(TABLES))
    with engine.begin() as connection:
        for table in reversed(TABLES):
            connection.execute(table.delete())
    factory = sessionmaker(engine, expire_on_commit=False)
    monkeypatch.setattr(settings, "engine", engine, raising=False)
    monkeypatch.setattr(settings, "NonScopedSession", factory, raising=False)
    monkeypatch.setattr(settings, "Session", scoped_session(factory), raising=False)
    return engine


@pytest.fixture
def memory_variables(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An empty in-memory Variable store for the send guard, and an empty claim store."""
    return use_memory_variables(monkeypatch)
