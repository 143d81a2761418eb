"""The token canary: the whole test suite fails if the access token shows up where it must not.

Every test that needs a valid token uses one canary, ``TEST_TOKEN`` of
:mod:`airflow_provider_sms.sandbox.testing` (the sandbox fixtures' token; ``tests/unit`` uses it too).
This plugin (loaded by ``tests/conftest.py``) looks for it in:

- every stdlib log record, through a handler on the root logger (re-attached before each test phase,
  since Airflow's logging configuration replaces the root handlers when it is imported);
- each test's captured stdout, stderr and log sections (Airflow's ``self.log`` is structlog, which
  writes to stdout without passing through the root logger), and the text of each failure;
- what a test reads itself with ``capsys``/``capfd.readouterr()`` (that output never reaches the report);
- every subprocess output handed to :meth:`TokenCanary.check_output` (``run_dag_test`` does it for each
  ``airflow dags test``);
- at the end of the session, every file under the session's temp dir (each throwaway AIRFLOW_HOME
  included: task logs, config, the SQLite database and its journal, read as raw bytes), and, in each
  AIRFLOW_HOME's database, the XCom values, rendered template fields, trigger kwargs and Variables, the
  encrypted ones decrypted with the home's Fernet key.

A leak fails the test it happened in (or the session, for one found outside any test or at the end);
messages name where it was and show the text around it, with the canary written ``<canary>``. The last
line of the run says what was checked. Connections are given as ``AIRFLOW_CONN_*`` variables, never
stored in the database; one stored there (the UI test's) is Fernet-encrypted, so the raw scan does not
read its password: the connection store is where the token is meant to be.

The canary is given with ``--token-canary`` (the guard's own tests run it with another one).
"""

from __future__ import annotations

import configparser
import contextlib
import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from airflow_provider_sms.sandbox.testing import TEST_TOKEN

if TYPE_CHECKING:
    from collections.abc import Generator

CANARY = TEST_TOKEN
PLUGIN_NAME = "token_canary_guard"
# Characters of text shown either side of a leak.
CONTEXT = 60
CHUNK = 1024 * 1024


class TokenLeakError(AssertionError):
    """The canary was found; the message says where (never the canary itself)."""


@dataclass
class Leak:
    """One place the canary was found.

    :param where: what was being checked (a log record, a captured section, a file...).
    :param context: the text around it, the canary replaced with ``<canary>``.
    :param nodeid: the test running when it was found (``None``: outside any test).
    """

    where: str
    context: str
    nodeid: str | None = None

    def describe(self) -> str:
        """One line naming the place and the text around it."""
        return f"{self.where}: ...{self.context}..."


@dataclass
class Counters:
    """What the guard has checked, for the summary line (every figure is a count of checks made)."""

    log_records: int = 0
    captured_outputs: int = 0
    captured_chars: int = 0
    exception_texts: int = 0
    subprocess_outputs: int = 0
    files: int = 0
    file_bytes: int = 0
    home_files: int = 0
    home_bytes: int = 0
    airflow_homes: int = 0
    xcom_rows: int = 0
    rendered_rows: int = 0
    trigger_rows: int = 0
    variable_rows: int = 0


class _RootHandler(logging.Handler):
    """Hands every record reaching the root logger to the guard."""

    def __init__(self, guard: TokenCanary) -> None:
        super().__init__(logging.NOTSET)
        self.guard = guard

    def emit(self, record: logging.LogRecord) -> None:
        self.guard.see_record(record)


class TokenCanary:
    """The guard: finds the canary, keeps the counts, fails tests and the session on a leak.

    :param canary: the token to look for.
    """

    def __init__(self, canary: str) -> None:
        self.canary = canary
        self._needle = canary.encode()
        self.counters = Counters()
        self.leaks: list[Leak] = []
        self._pending: list[Leak] = []
        self._current: str | None = None
        self._homes: list[Path] = []
        self._temp_root: Path | None = None
        self._handler = _RootHandler(self)
        self._readouterr: Any = None
        self._capture_disabled = False

    # ------------------------------------------------------------------------------- finding it

    def find(self, text: object, where: str) -> Leak | None:
        """The leak in ``text``, if the canary is in it (recorded against the running test).

        :param text: what to look in.
        :param where: what it is, named in the failure.
        """
        if text is None or text == "":
            return None
        if not isinstance(text, (str, bytes)):  # e.g. an XCom stored as a JSON number
            text = str(text)
        if isinstance(text, bytes):
            index = text.find(self._needle)
            if index < 0:
                return None
            text = text[max(0, index - 4 * CONTEXT) : index + len(self._needle) + 4 * CONTEXT].decode(
                errors="replace"
            )
        index = text.find(self.canary)
        if index < 0:
            return None
        around = text[max(0, index - CONTEXT) : index + len(self.canary) + CONTEXT]
        context = around.replace(self.canary, "<canary>").encode("unicode_escape").decode()
        leak = Leak(where, context, self._current)
        self.leaks.append(leak)
        self._pending.append(leak)
        return leak

    def check_output(self, text: str | bytes | None, where: str) -> None:
        """Check the output of a subprocess; raise :class:`TokenLeakError` if the canary is in it.

        :param text: its stdout or stderr (or both).
        :param where: which process and stream, named in the failure.
        """
        __tracebackhide__ = True  # the failure shows the caller, not the text as an argument here
        self.counters.subprocess_outputs += 1
        leak = self.find(text, where)
        if leak is not None:
            self._pending.remove(leak)  # reported by the exception, not a second time
            raise TokenLeakError(f"token canary: {leak.describe()}")

    def see_record(self, record: logging.LogRecord) -> None:
        """Check one log record: its message, and its traceback or stack if it has one."""
        self.counters.log_records += 1
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: look at the parts
            message = f"{record.msg} {record.args}"
        where = f"log record of {record.name!r} ({record.levelname})"
        if self.find(message, where):
            return
        if record.exc_info:
            self.find(logging.Formatter().formatException(record.exc_info), f"traceback in {where}")
        elif record.exc_text:
            self.find(record.exc_text, f"traceback in {where}")
        if record.stack_info:
            self.find(record.stack_info, f"stack in {where}")

    def see_output(self, text: str | bytes | None, where: str) -> None:
        """Check captured output (a report section, or what a test read with ``readouterr()``)."""
        if not text:
            return
        self.counters.captured_outputs += 1
        self.counters.captured_chars += len(text or "")
        self.find(text, where)

    # ------------------------------------------------------------------------- the AIRFLOW_HOMEs

    def watch_airflow_home(self, home: Path) -> None:
        """Scan ``home`` (files and metadata database) at the end of the session."""
        self._homes.append(Path(home))

    def watch_temp_dir(self, root: Path) -> None:
        """Scan every file under ``root`` (the session's temp dir) at the end of the session."""
        self._temp_root = Path(root)

    def scan_files(self, root: Path) -> None:
        """Look for the canary in the raw bytes of every file under ``root`` (symlinks not followed)."""
        overlap = len(self._needle) - 1
        for folder, _, names in os.walk(root):
            for name in names:
                path = Path(folder, name)
                if path.is_symlink() or not path.is_file():
                    continue
                in_home = any(path.is_relative_to(home) for home in self._homes)
                size = 0
                with contextlib.suppress(OSError), path.open("rb") as stream:
                    tail = b""
                    while chunk := stream.read(CHUNK):
                        size += len(chunk)
                        if self.find(tail + chunk, f"file {path}"):
                            size += len(stream.read())
                            break
                        tail = chunk[-overlap:]
                self.counters.files += 1
                self.counters.file_bytes += size
                if in_home:
                    self.counters.home_files += 1
                    self.counters.home_bytes += size

    def scan_database(self, home: Path) -> None:
        """Check the XCom values, rendered fields, trigger kwargs and Variables of ``home``'s database."""
        database = home / "airflow.db"
        if not database.is_file():
            return
        fernet = _fernet(home / "airflow.cfg")
        queries = {
            "xcom_rows": ("SELECT value, 0 FROM xcom", "XCom value"),
            "rendered_rows": (
                "SELECT rendered_fields, 0 FROM rendered_task_instance_fields",
                "rendered template fields",
            ),
            "trigger_rows": ("SELECT kwargs, 1 FROM trigger", "trigger kwargs"),
            "variable_rows": ("SELECT val, is_encrypted FROM variable", "Variable value"),
        }
        with contextlib.closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            for counter, (query, what) in queries.items():
                if query.split(" FROM ")[1].split()[0] not in tables:
                    continue
                for value, encrypted in db.execute(query):
                    setattr(self.counters, counter, getattr(self.counters, counter) + 1)
                    self.find(_decrypt(value, fernet) if encrypted else value, f"{what} in {database}")

    def finish(self) -> None:
        """The end-of-session checks: every file under the temp dir and the AIRFLOW_HOMEs."""
        self._attach()
        roots = [self._temp_root] if self._temp_root is not None and self._temp_root.is_dir() else []
        for home in self._homes:
            if not any(home.is_relative_to(root) for root in roots):
                roots.append(home)
        for root in roots:
            self.scan_files(root)
        for home in self._homes:
            self.counters.airflow_homes += 1
            self.scan_database(home)

    def summary(self) -> str:
        """The one line that says what was checked and how many leaks were found."""
        c = self.counters
        line = (
            f"token canary: {len(self.leaks)} leaks in {c.log_records} log records, "
            f"{c.captured_outputs} captured outputs ({_mb(c.captured_chars)} chars), "
            f"{c.exception_texts} failure texts, {c.subprocess_outputs} subprocess outputs, "
            f"{c.files} files ({_mb(c.file_bytes)} bytes) under the session's temp dir, of which "
            f"{c.home_files} files ({_mb(c.home_bytes)} bytes) in {c.airflow_homes} AIRFLOW_HOME(s), "
            f"{c.xcom_rows} XCom rows, {c.rendered_rows} rendered-field rows, "
            f"{c.trigger_rows} trigger rows, {c.variable_rows} Variables"
        )
        if self._capture_disabled:
            line += " (output capture was off: stdout and stderr were not checked)"
        return line

    # ------------------------------------------------------------------------------ pytest hooks

    def _attach(self) -> None:
        root = logging.getLogger()
        if self._handler not in root.handlers:
            root.addHandler(self._handler)

    def _take_pending(self, nodeid: str | None) -> list[Leak]:
        taken = [leak for leak in self._pending if leak.nodeid == nodeid]
        self._pending = [leak for leak in self._pending if leak.nodeid != nodeid]
        return taken

    @pytest.hookimpl
    def pytest_configure(self, config: pytest.Config) -> None:
        self._capture_disabled = config.getoption("capture") == "no"
        self._attach()
        original = self._readouterr = pytest.CaptureFixture.readouterr
        guard = self

        def readouterr(fixture: pytest.CaptureFixture[Any]) -> Any:
            result = original(fixture)
            guard.see_output(result.out, "output read with readouterr() (out)")
            guard.see_output(result.err, "output read with readouterr() (err)")
            return result

        pytest.CaptureFixture.readouterr = readouterr  # type: ignore[method-assign]

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        logging.getLogger().removeHandler(self._handler)
        if self._readouterr is not None:
            pytest.CaptureFixture.readouterr = self._readouterr  # type: ignore[method-assign]

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._current = nodeid

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self) -> None:
        self._attach()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self) -> None:
        self._attach()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self) -> None:
        self._attach()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report: pytest.TestReport = yield
        for title, content in report.sections:
            # Each report repeats the sections of the earlier phases: check only this phase's.
            if title.startswith("Captured ") and title.endswith(f" {report.when}"):
                self.see_output(content, title.lower())
        if report.failed:
            self.counters.exception_texts += 1
            self.find(report.longreprtext, f"failure text ({report.when})")
        leaks = self._take_pending(item.nodeid)
        if leaks:
            message = "\n".join(["token canary: the access token leaked", *(x.describe() for x in leaks)])
            if report.failed:
                report.sections.append(("token canary", message))
            else:
                report.outcome = "failed"
                report.longrepr = message
        return report

    @pytest.hookimpl
    def pytest_runtest_logfinish(self) -> None:
        self._current = None

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.finish()
        if self.leaks:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self._pending:  # found outside any test, or at the end: no test report names them
            terminalreporter.section("token canary: leaks not reported by a test", red=True)
            for leak in self._pending:
                terminalreporter.line(f"{leak.describe()} (during {leak.nodeid or 'no test'})")
        terminalreporter.write_line(self.summary(), red=bool(self.leaks), green=not self.leaks)


def _mb(amount: int) -> str:
    return f"{amount / 1e6:.1f} M" if amount >= 100_000 else str(amount)


def _fernet(config_file: Path) -> Any:
    """The Fernet of an AIRFLOW_HOME (its ``[core] fernet_key``), or ``None`` when it has none."""
    parser = configparser.ConfigParser(interpolation=None)
    with contextlib.suppress(OSError, configparser.Error):
        parser.read(config_file)
    key = parser.get("core", "fernet_key", fallback="").strip()
    if not key:
        return None
    from cryptography.fernet import Fernet, MultiFernet

    return MultiFernet([Fernet(part.strip().encode()) for part in key.split(",") if part.strip()])


def _decrypt(value: str | bytes | None, fernet: Any) -> str | bytes | None:
    """A Fernet-encrypted column's clear text (the value itself when it is not encrypted)."""
    if not value or fernet is None:
        return value
    from cryptography.fernet import InvalidToken

    try:
        return fernet.decrypt(value.encode() if isinstance(value, str) else value)
    except (InvalidToken, ValueError, TypeError):
        return value


# ---------------------------------------------------------------------------------- the plugin


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--token-canary``: the token to look for (the sandbox fixtures' token by default)."""
    parser.addoption(
        "--token-canary",
        default=CANARY,
        help="access token that must never appear in logs, outputs, files, XCom or failures",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the guard for the session."""
    config.pluginmanager.register(TokenCanary(config.getoption("token_canary")), PLUGIN_NAME)


@pytest.fixture(scope="session")
def token_canary(pytestconfig: pytest.Config) -> TokenCanary:
    """The session's guard: ``check_output(text, where)`` for subprocess outputs,
    ``watch_airflow_home(path)`` for an AIRFLOW_HOME to scan at the end."""
    guard = pytestconfig.pluginmanager.get_plugin(PLUGIN_NAME)
    assert isinstance(guard, TokenCanary)
    return guard


@pytest.fixture(scope="session", autouse=True)
def _token_canary_temp_dir(token_canary: TokenCanary, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Have the guard scan the session's temp dir (every ``tmp_path``) at the end."""
    token_canary.watch_temp_dir(tmp_path_factory.getbasetemp())
