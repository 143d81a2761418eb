"""The whole deployment: its services and Airflow started in order, taken down together.

What each part starts is in its own module (``postgres``, ``redis``, ``sandbox``, ``airflow``), the
faults a scenario brings in ``faults``; :class:`Deployment` holds their ports, processes and folders.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.deployment.harness.airflow import AirflowComponents
from tests.deployment.harness.faults import Faults
from tests.deployment.harness.packages import ensure_debian_packages
from tests.deployment.harness.postgres import Postgres
from tests.deployment.harness.processes import REPO, Process, free_port, port_open
from tests.deployment.harness.recording_proxy import RecordingProxy
from tests.deployment.harness.redis import redis_command
from tests.deployment.harness.sandbox import connection_json, listening_url, sandbox_command
from tests.deployment.harness.waiting import DeploymentError, wait_for
from tests.metrics_receivers import StatsdServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from tests.deployment.harness.airflow_api import AirflowApi
    from tests.deployment.harness.load_balancer import RoundRobinProxy

TEST_DAGS = Path(__file__).resolve().parents[1] / "dags"
# What Airflow uses: stopped after the Airflow components.
SERVICES = ("postgres", "redis", "sandbox")


@dataclass
class Deployment(AirflowComponents, Faults):
    """The whole deployment; :meth:`start` brings it up, :meth:`stop` takes every part down.

    :param root: a throwaway directory for AIRFLOW_HOME, the DAGs folder and the process logs.
    :param token: the sandbox's access token (the connection's password).
    """

    root: Path
    token: str = field(repr=False)
    processes: dict[str, Process] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    sandbox_url: str = ""
    proxy: RecordingProxy | None = None
    execution_proxy: RecordingProxy | None = None
    api: AirflowApi | None = None
    balancers: list[RoundRobinProxy] = field(default_factory=list)
    shared_secrets: dict[str, str] = field(default_factory=dict, repr=False)
    # Every Airflow component sends its metrics here (StatsD on 127.0.0.1), the provider's included.
    statsd: StatsdServer = field(default_factory=StatsdServer)
    _postgres: Postgres | None = None

    @property
    def home(self) -> Path:
        return self.root / "airflow_home"

    @property
    def dags_folder(self) -> Path:
        return self.root / "dags"

    @property
    def logs(self) -> Path:
        return self.root / "process_logs"

    # -------------------------------------------------------------------- start

    def start(self) -> Deployment:
        """Start every part; on any failure, stop what was started and raise."""
        began = time.monotonic()
        try:
            self._timed("debian packages", ensure_debian_packages)
            for folder in (self.home, self.dags_folder, self.logs):
                folder.mkdir(parents=True, exist_ok=True)
            self._copy_dags()
            self._timed("postgres", self._start_postgres)
            self._timed("redis", self._start_redis)
            self._timed("sandbox", self._start_sandbox)
            self._timed("airflow db migrate", self._migrate)
            self._timed("airflow components", self._start_airflow)
        except BaseException:
            self.stop()
            raise
        self.timings["total start-up"] = time.monotonic() - began
        return self

    def _timed(self, what: str, step: Callable[[], None]) -> None:
        began = time.monotonic()
        step()
        self.timings[what] = time.monotonic() - began

    def _copy_dags(self) -> None:
        for source in [
            *sorted((REPO / "dags_examples").glob("sms_*.py")),
            *sorted(TEST_DAGS.glob("[!_]*.py")),
        ]:
            shutil.copy(source, self.dags_folder / source.name)
        # The examples' sample files (sms_first_campaign's CSV export), where the examples look for them.
        shutil.copytree(REPO / "dags_examples" / "data", self.dags_folder / "data")

    def _start_postgres(self) -> None:
        self._postgres = Postgres.create(self.ports.setdefault("postgres", free_port()))
        # SIGINT is PostgreSQL's "fast" shutdown: it ends the sessions instead of waiting for them.
        self._spawn("postgres", self._postgres.command(), os.environ, stop_signal=signal.SIGINT)
        wait_for("postgres to accept connections", self._postgres.create_database, 60, interval=0.3)

    def _start_redis(self) -> None:
        port = self.ports["redis"] = free_port()
        self._spawn("redis", redis_command(port, self.root), os.environ)
        wait_for("redis to accept connections", lambda: port_open(port), 30)

    def _start_sandbox(self) -> None:
        process = self._spawn("sandbox", sandbox_command(self.token), os.environ)
        wait_for("the sandbox to listen", lambda: listening_url(process.log()) is not None, 30)
        self.sandbox_url = str(listening_url(process.log()))
        port = int(self.sandbox_url.rsplit(":", 1)[1])
        self.proxy = RecordingProxy(port, "sandbox").start()

    def connection(self, url: str, **extra: Any) -> str:
        """The sms_default connection (JSON form) to ``url``, with the sandbox's token.

        It receives the sandbox's delivery reports (DLR webhook "1") from 127.0.0.1; ``extra`` adds to
        or replaces the connection's extra.
        """
        return connection_json(url, self.token, **extra)

    def postgres(self) -> Postgres:
        """The metadata database's PostgreSQL cluster (once started)."""
        if self._postgres is None:
            raise DeploymentError("PostgreSQL is not set up")
        return self._postgres

    @property
    def database_url(self) -> str:
        """The SQLAlchemy URL of the metadata database (PostgreSQL)."""
        return self.postgres().url

    def forget_campaigns(self) -> None:
        """Delete every claim of the claim store: each scenario starts afresh."""
        for table in ("sms_claim_chunk", "sms_claim", "sms_claim_lock"):
            self.query(f"DELETE FROM {table}")  # our own table names

    def query(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        """The rows of one SQL statement on the metadata database, on a connection of its own, committed
        (none for a statement that returns no rows, e.g. ``ALTER TABLE``).

        :param sql: the statement, with ``:name`` placeholders for ``params``.
        """
        return self.postgres().query(sql, **params)

    def _spawn(
        self, name: str, command: list[str], env: Mapping[str, str], stop_signal: int = signal.SIGTERM
    ) -> Process:
        process = Process(name, command, env, self.logs / f"{name}.log", stop_signal=stop_signal).start()
        self.processes[name] = process
        return process

    # -------------------------------------------------------------------- stop

    def stop(self) -> None:
        """Stop every process (Airflow first, PostgreSQL last) and remove the database's files."""
        began = time.monotonic()
        # The Airflow components shut down together (each takes seconds); the services they use after.
        airflow = [p for p in self.processes.values() if p.name not in SERVICES]
        for process in airflow:
            process.request_stop()
        for process in [*airflow, *reversed([p for p in self.processes.values() if p.name in SERVICES])]:
            process.stop()
        self.timings["teardown"] = time.monotonic() - began
        for proxy in (self.proxy, self.execution_proxy):
            if proxy is not None:
                proxy.stop()
        for balancer in self.balancers:
            balancer.stop()
        self.statsd.close()
        if self._postgres is not None:
            self._postgres.remove()

    def leftovers(self) -> list[str]:
        """Processes still alive and ports still open after :meth:`stop` (both should be empty)."""
        alive = [p.name for p in self.processes.values() if p.running or p.alive()]
        ports = [f"{name}:{port}" for name, port in self.ports.items() if port_open(port)]
        return alive + ports


@contextlib.contextmanager
def running_deployment(root: Path, token: str) -> Iterator[Deployment]:
    """A started :class:`Deployment`, stopped on exit whatever happened."""
    deployment = Deployment(root, token)
    try:
        yield deployment.start()
    finally:
        deployment.stop()
