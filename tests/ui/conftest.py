"""Fixtures of the browser tests: a real ``airflow api-server`` and a headless Debian chromium.

The API server runs from this venv (so it loads this provider and runs ``SmsHook.test_connection`` in
its own process) on a free 127.0.0.1 port: ``api_server``, on the session's home, with the simple auth
manager making everyone an admin and connection testing enabled; ``running_api_server`` for a test that
sets its own home and users (tests/ui/test_campaigns_in_airflow.py). Chromium is Debian's (``apt-get
install chromium``), driven by Playwright's Python package with ``executable_path``: no browser
download. A missing browser or Playwright fails the test with the command to install it; it never skips.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import requests

from tests.conftest import AIRFLOW, airflow_env

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser, Page

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
