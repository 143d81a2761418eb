"""Fixtures of the browser tests: a real ``airflow api-server`` and a headless Debian chromium.

The API server runs from this venv (so it loads this provider and runs ``SmsHook.test_connection`` in
its own process) on a free 127.0.0.1 port: ``api_server``, on the session's home, with the simple auth
manager making everyone an admin and connection testing enabled; ``running_api_server`` for a test that
sets its own home and users; ``team_deployment``, a multi-team Airflow of two DAG bundles
(tests/ui/test_campaigns_in_airflow.py, tests/ui/test_trust_boundaries.py). Chromium is Debian's (``apt-get
install chromium``), driven by Playwright's Python package with ``executable_path``: no browser
download. A missing browser or Playwright fails the test with the command to install it; it never skips.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests

from airflow_provider_sms.sandbox.testing import TEST_TOKEN
from tests.conftest import AIRFLOW, DAG_TEST_TIMEOUT, MIGRATE_TIMEOUT, airflow_env, latest_run, plain_output

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from playwright.sync_api import Browser, FrameLocator, Page

    from tests.token_canary import TokenCanary

CHROMIUM = Path(os.environ.get("SMS_UI_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).with_name("artifacts")
# Flags for a headless browser in a container with no GPU, no user namespace and no need for the network
# beyond 127.0.0.1.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Upper bounds: a server that does not come up fails the test instead of hanging the suite.
SERVER_START_TIMEOUT = 120.0
SERVER_STOP_TIMEOUT = 15.0
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the API server and everything it started (its own process group): TERM, then KILL.

    :param process: the ``airflow api-server`` process, leader of its process group.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=SERVER_STOP_TIMEOUT)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def running_api_server(env: dict[str, str], port: int, log_path: Path) -> Iterator[str]:
    """``airflow api-server`` on 127.0.0.1:``port`` with ``env``, until the block ends; yields its base URL.

    :param env: the server's environment (``airflow_env(...)`` with its settings).
    :param port: a free port (``env``'s ``[api] base_url`` must name it).
    :param log_path: where its output goes.
    """
    url = f"http://127.0.0.1:{port}"
    ARTIFACTS.mkdir(exist_ok=True)
    with log_path.open("wb") as log:
        # A new session makes the server the leader of a process group, so _stop reaches its workers.
        process = subprocess.Popen(
            [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(f"airflow api-server exited with {process.returncode}:\n{_tail(log_path)}")
            try:
                if requests.get(f"{url}/api/v2/monitor/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"airflow api-server unhealthy after {SERVER_START_TIMEOUT}s:\n{_tail(log_path)}")
            time.sleep(0.5)
        yield url
    finally:
        _stop(process)


def run_airflow(env: Mapping[str, str], *args: str, timeout: float = MIGRATE_TIMEOUT) -> str:
    """Run one ``airflow`` command; its output, or the test fails with it."""
    process = subprocess.run(
        [AIRFLOW, *args], env=dict(env), capture_output=True, text=True, timeout=timeout, check=False
    )
    if process.returncode != 0:
        # The whole output beside the artifacts: a task's error is often far from the end.
        (ARTIFACTS / "failed-airflow-command.log").write_text(plain_output(process))
        pytest.fail(f"airflow {' '.join(args)} failed:\n{plain_output(process)[-3000:]}")
    return process.stdout + process.stderr


@dataclass
class TeamAirflow:
    """A running multi-team deployment (:func:`team_deployment`): its URL, the DAG runs it made, the
    sandbox behind it, its environment and the API server's log."""

    url: str
    runs: dict[str, str]
    sandbox: Any
    env: dict[str, str]
    passwords: dict[str, str]
    log_path: Path

    def frame(self, page: Page) -> FrameLocator:
        """The campaigns page in Airflow's frame."""
        return page.frame_locator("iframe[src*='/sms/campaigns/ui/']")

    def login(self, page: Page, user: str) -> None:
        """Sign in through the simple auth manager's login page."""
        sign_in(page, self.url, user, self.passwords[user])

    def ticket_of(self, text: str) -> int:
        """The sandbox's ticket of the one campaign whose text holds ``text``."""
        (ticket,) = [int(c["ticket"]) for c in self.sandbox.inspect.campaigns() if text in c["text"]]
        return ticket

    def token(self, user: str) -> str:
        """``user``'s token, from the simple auth manager's login."""
        answer = requests.post(
            f"{self.url}/auth/token", json={"username": user, "password": self.passwords[user]}, timeout=10
        )
        answer.raise_for_status()
        return str(answer.json()["access_token"])

    def airflow(self, *args: str, timeout: float = MIGRATE_TIMEOUT) -> str:
        """Run one ``airflow`` command on this deployment."""
        return run_airflow(self.env, *args, timeout=timeout)


# Arguments: the connection id, its team, the connection as JSON.
ADD_TEAM_CONNECTION = """
import sys
from airflow.models.connection import Connection
from airflow.utils.session import create_session
conn = Connection.from_json(sys.argv[3], conn_id=sys.argv[1])
conn.team_name = sys.argv[2]
with create_session() as session:
    session.add(conn)
"""


@contextmanager
def team_deployment(
    home: Path,
    token_canary: TokenCanary,
    *,
    bundles: Mapping[str, Path],
    users: str,
    passwords: dict[str, str],
    send: list[str],
    log_name: str,
    dlr_statuses: tuple[int, ...],
    team_connections: Mapping[str, str] | None = None,
    receiving: str = "sms_default",
) -> Iterator[TeamAirflow]:
    """A real ``airflow api-server`` in multi-team mode on ``home`` (SQLite), with the simple auth
    manager, one DAG bundle per team, the sandbox posting delivery reports to it, and the DAGs of
    ``send`` run once each with ``airflow dags test``.

    :param bundles: each team's DAG folder.
    :param users: ``[core] simple_auth_manager_users`` (``name:role[:team]`` each).
    :param passwords: each user's password.
    :param log_name: the API server's log, under the artifacts (checked by the token canary).
    :param dlr_statuses: the statuses the sandbox reports, number after number.
    :param team_connections: connections to the sandbox scoped to a team (connection id: team), stored
        in the metadata database beside the global ``sms_default`` (an ``AIRFLOW_CONN_*`` variable).
    :param receiving: the connection whose receiver the sandbox's webhook posts the reports to.
    """
    from airflow_provider_sms.sandbox.server import SandboxServer

    token_canary.watch_airflow_home(home)
    # The simple auth manager reads its users' passwords from this file (it writes random ones otherwise).
    (home / "simple_auth_manager_passwords.json.generated").write_text(json.dumps(passwords))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    bundle_list = [
        {
            "name": f"bundle_{team}",
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(path)},
            "team_name": team,
        }
        for team, path in bundles.items()
    ]
    with SandboxServer(token=TEST_TOKEN, dlr=True, dlr_statuses=dlr_statuses) as sandbox:
        sandbox.inspect.set_webhook("1", url=f"{url}/sms/delivery-reports/{receiving}")
        connection = sandbox.connection_json(dlr_webhook_id="1", dlr_allowed_callers=["127.0.0.1"])
        env = airflow_env(
            home,
            AIRFLOW__CORE__AUTH_MANAGER=SIMPLE_AUTH_MANAGER,
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=users,
            AIRFLOW__CORE__MULTI_TEAM="True",
            AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST=json.dumps(bundle_list),
            AIRFLOW__API__BASE_URL=url,
            AIRFLOW__API_AUTH__JWT_SECRET="campaigns-e2e-jwt-secret-0123456789abcdef",
            AIRFLOW_CONN_SMS_DEFAULT=connection,
        )
        run_airflow(env, "db", "migrate")
        run_airflow(env, "teams", "sync")  # the teams named by the bundles
        # `airflow dags test` (3.3.2) does not give its task a team's connection (its in-process execution
        # API tells no team): the task gets each one as a variable, the API server reads it from the
        # database, under its team.
        task_env = dict(env)
        for conn_id, team in (team_connections or {}).items():
            task_env[f"AIRFLOW_CONN_{conn_id.upper()}"] = connection
            # Airflow's CLI cannot scope a connection to a team: written as the REST API would.
            subprocess.run(
                [sys.executable, "-c", ADD_TEAM_CONNECTION, conn_id, team, connection],
                env=env,
                check=True,
                capture_output=True,
                timeout=MIGRATE_TIMEOUT,
            )
        run_airflow(env, "dags", "reserialize")  # each DAG with its bundle, so with its team
        log_path = ARTIFACTS / log_name
        with running_api_server(env, port, log_path):
            runs = {}
            for dag_id in send:
                output = run_airflow(task_env, "dags", "test", dag_id, timeout=DAG_TEST_TIMEOUT)
                token_canary.check_output(output, f"output of airflow dags test {dag_id}")
                runs[dag_id] = latest_run(home, dag_id)
            yield TeamAirflow(
                url=url, runs=runs, sandbox=sandbox, env=env, passwords=passwords, log_path=log_path
            )
        token_canary.check_output(log_path.read_bytes(), f"airflow api-server log ({log_path})")


@pytest.fixture(scope="module")
def api_server(airflow_home: Path, token_canary: TokenCanary) -> Iterator[str]:
    """``airflow api-server`` on a free 127.0.0.1 port, stopped after the module; yields its base URL.

    Everyone is an admin. Its log (``api-server.log``, where the Test button's hook logs) is checked by
    the token canary.
    """
    port = free_port()
    env = airflow_env(
        airflow_home,
        AIRFLOW__CORE__AUTH_MANAGER=SIMPLE_AUTH_MANAGER,
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
        AIRFLOW__CORE__TEST_CONNECTION="Enabled",
        AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
    )
    log_path = ARTIFACTS / "api-server.log"
    with running_api_server(env, port, log_path) as url:
        yield url
    token_canary.check_output(log_path.read_bytes(), f"airflow api-server log ({log_path})")


def sign_in(page: Page, url: str, user: str, password: str) -> None:
    """Sign in to the Airflow UI at ``url`` through the simple auth manager's login page.

    :param page: the browser page.
    :param url: the API server's base URL.
    :param user: the user name.
    :param password: its password.
    """
    page.goto(url)
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/")


def _tail(path: Path, size: int = 3000) -> str:
    """The end of a log file, to explain a failure.

    :param path: the log file.
    :param size: how many characters to keep.
    """
    return path.read_text(errors="replace")[-size:]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless chromium driven by Playwright; fails (never skips) when either is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            "The UI test needs Playwright's Python package: "
            "`.venv/bin/uv pip install --python .venv/bin/python playwright` (or `make install`); "
            "do not run `playwright install`, the test uses Debian's chromium."
        )
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"The UI test needs a chromium at {CHROMIUM}: `apt-get update && apt-get install -y chromium` "
            "(or set SMS_UI_CHROMIUM to another chromium executable)."
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser page, tall enough to show the whole connection form; every wait bounded at 15 s."""
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()
