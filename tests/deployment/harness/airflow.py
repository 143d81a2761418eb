"""The Airflow components of the deployment: their settings, command lines, environment and start.

:class:`AirflowComponents` is mixed into :class:`~tests.deployment.harness.deployment.Deployment`: it
uses the deployment's ports, processes, folders, secrets and services.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tests.deployment.harness.airflow_api import AirflowApi
from tests.deployment.harness.load_balancer import RoundRobinProxy
from tests.deployment.harness.processes import REPO, free_port, port_open
from tests.deployment.harness.recording_proxy import RecordingProxy
from tests.deployment.harness.redis import broker_url
from tests.deployment.harness.waiting import DeploymentError, wait_for

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tests.deployment.harness.processes import Process

BIN = Path(sys.executable).parent
AIRFLOW = str(BIN / "airflow")
WORKERS = ("worker1", "worker2")
# The Airflow components every deployment runs (more API servers are started on demand).
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer", *WORKERS)
# Settings that make a two-core machine react in seconds rather than minutes (see the docs page).
TUNING = {
    # A task whose worker died is failed (then retried) 10 s after its last heartbeat, checked every 2 s.
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "10",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
    "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
    "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
    "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
    "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
    "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
    "AIRFLOW__CORE__PARALLELISM": "8",
    "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
}
CELERY_EXECUTOR = "airflow.providers.celery.executors.celery_executor.CeleryExecutor"
# What a component prints once it works (the API server is ready when its port answers).
READY_MARKERS = {"worker1": "ready.", "worker2": "ready.", "triggerer": "Starting the triggerer"}
START_TIMEOUT = 180.0


class AirflowComponents:
    """The Airflow side of a deployment: the API server, scheduler, DAG processor, triggerer and two
    Celery workers, more API servers on demand, and the environment they share."""

    def airflow_env(self, **extra: str) -> dict[str, str]:
        """The environment every Airflow process of the deployment shares (configuration by variables)."""
        api = self.ports.setdefault("api", free_port())
        env = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW")}
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "PYTHONPATH": str(REPO),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": CELERY_EXECUTOR,
                "AIRFLOW__CORE__FERNET_KEY": self._secret("fernet"),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api}/execution/",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                # Each worker names itself (SMS_DEPLOYMENT_WORKER), so a task instance's hostname says
                # which worker ran it although both run on this machine.
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tests.deployment.hostname.worker_name",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url,
                "AIRFLOW__CELERY__BROKER_URL": broker_url(self.ports["redis"]),
                "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{self.database_url}",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(api),
                "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api}",
                "AIRFLOW__API__SECRET_KEY": self._secret("api"),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API_AUTH__JWT_SECRET": self._secret("jwt"),
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(
                    self.ports.setdefault("worker_logs", free_port())
                ),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(
                    self.ports.setdefault("trigger_logs", free_port())
                ),
                # sms_default is stored in the metadata database (as `airflow connections add` does for
                # a user): the workers and the API server's receiver read it there. The triggerer's own
                # environment overrides it with the recording proxy's URL.
                # Receives only from the service's documented addresses (the hostile-input scenario).
                "AIRFLOW_CONN_SMS_SERVICE_ONLY": self.connection(self.sandbox_url, dlr_allowed_callers=[]),
                # Receives reports like sms_default, but no DAG schedules on its asset: no asset events.
                "AIRFLOW_CONN_SMS_UNSCHEDULED": self.connection(self.sandbox_url),
                **TUNING,
                **self.statsd.env(),
            }
        )
        env.update(extra)
        return env

    def _secret(self, name: str) -> str:
        # One value per deployment, shared by every process (a JWT signed by one must verify in another).
        if name not in self.shared_secrets:
            if name == "fernet":
                from cryptography.fernet import Fernet

                self.shared_secrets[name] = Fernet.generate_key().decode()
            else:
                self.shared_secrets[name] = secrets.token_urlsafe(32)
        return self.shared_secrets[name]

    def _migrate(self) -> None:
        connection = ["connections", "add", "sms_default", "--conn-json", self.connection(self.sandbox_url)]
        for command in (["db", "migrate"], connection):
            result = subprocess.run(
                [AIRFLOW, *command],
                env=self.airflow_env(),
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if result.returncode != 0:
                output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
                raise DeploymentError(f"airflow {' '.join(command[:2])} failed:\n{output}")

    def component_command(self, name: str) -> list[str]:
        """The command line of an Airflow component (``worker1``/``worker2`` are Celery workers)."""
        if name in WORKERS:
            # --skip-serve-logs: two workers on one host would fight for the log server's port; the
            # API server reads the task logs from the shared folder instead.
            return [
                AIRFLOW,
                "celery",
                "worker",
                "--celery-hostname",
                f"{name}@%h",
                "--skip-serve-logs",
                "--without-mingle",
                "--without-gossip",
            ]
        if name.startswith("api-server-"):
            return [AIRFLOW, "api-server", "--port", str(self.api_port(name))]
        return [AIRFLOW, name]

    def component_env(self, name: str) -> dict[str, str]:
        if name == "triggerer":
            assert self.proxy is not None
            # Only the triggerer reaches the sandbox through the recording proxy.
            return self.airflow_env(
                AIRFLOW_CONN_SMS_DEFAULT=self.connection(f"http://127.0.0.1:{self.proxy.port}")
            )
        if name in WORKERS:
            assert self.execution_proxy is not None
            # The workers' tasks talk to the API server through a proxy a test can hold a request in.
            return self.airflow_env(
                SMS_DEPLOYMENT_WORKER=name,
                AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{self.execution_proxy.port}/execution/",
            )
        if name.startswith("api-server-"):
            # Everything shared (database, secrets, [api] base_url: the tasks' API server) but the port.
            return self.airflow_env(SMS_DEPLOYMENT_WORKER=name, AIRFLOW__API__PORT=str(self.api_port(name)))
        return self.airflow_env(SMS_DEPLOYMENT_WORKER=name)

    def start_component(self, name: str, **env: str) -> Process:
        """Start (or restart) an Airflow component; wait until it is ready.

        :param env: environment variables for this start only (e.g. an ``AIRFLOW__SECTION__KEY`` to
            compare two settings on one deployment).
        """
        process = self._spawn(name, self.component_command(name), {**self.component_env(name), **env})
        self.wait_ready(name)
        return process

    def ready(self, name: str) -> bool:
        """Whether a component is up: the API server's port answers, or the log says it is ready."""
        if name.startswith("api-server"):
            return port_open(self.api_port(name))
        marker = READY_MARKERS.get(name)
        return marker is None or marker in self.processes[name].log()

    def wait_ready(self, name: str) -> None:
        """Wait until :meth:`ready`; raise when the component exits first."""
        process = self.processes[name]
        wait_for(f"{name} to be ready", lambda: self.ready(name) or not process.running, START_TIMEOUT)
        if not process.running:
            raise DeploymentError(f"{name} exited at start:\n{process.log()[-4000:]}")

    def _start_airflow(self) -> None:
        self.execution_proxy = RecordingProxy(
            self.ports.setdefault("api", free_port()), "execution-api"
        ).start()
        for name in COMPONENTS:
            self._spawn(name, self.component_command(name), self.component_env(name))
        for name in COMPONENTS:
            self.wait_ready(name)
        self.api = AirflowApi(f"http://127.0.0.1:{self.ports['api']}")
        wait_for("a JWT from the API server", lambda: self.api.login() is None, START_TIMEOUT)  # type: ignore[union-attr]
        expected = {path.stem for path in self.dags_folder.glob("*.py")}
        wait_for(
            "every DAG to be parsed", lambda: expected <= self.parsed_dag_ids(), START_TIMEOUT, interval=1.0
        )

    def parsed_dag_ids(self) -> set[str]:
        """The DAGs the dag-processor has stored; raise at the first import error instead of waiting."""
        assert self.api is not None
        errors = self.api.call("GET", "/importErrors")["import_errors"]
        if errors:
            raise DeploymentError(f"DAG import errors: {json.dumps(errors, indent=1)[:4000]}")
        return self.dag_ids()

    def dag_ids(self) -> set[str]:
        assert self.api is not None
        return {dag["dag_id"] for dag in self.api.call("GET", "/dags", params={"limit": 100})["dags"]}

    # -------------------------------------------------------------------- more API servers

    @staticmethod
    def api_server_name(index: int) -> str:
        """The component name of API server ``index``: 0 is the deployment's own, ``api-server``;
        1 is ``api-server-2``, and so on."""
        return "api-server" if index == 0 else f"api-server-{index + 1}"

    def api_port(self, name: str) -> int:
        """The port of the API server ``name``, chosen the first time it is asked for."""
        return self.ports.setdefault(name.replace("api-server", "api"), free_port())

    def api_url(self, index: int = 0) -> str:
        """The base URL of API server ``index``."""
        return f"http://127.0.0.1:{self.api_port(self.api_server_name(index))}"

    def start_api_server(self, index: int = 1, **env: str) -> Process:
        """Start API server ``index`` (again, after :meth:`kill_api_server`); return once it answers.

        Every API server shares the database and the configuration (but ``env``); only the port differs.
        The tasks and the triggerer keep using API server 0 (``[api] base_url``).
        """
        return self.start_component(self.api_server_name(index), **env)

    def start_load_balancer(self, indexes: Sequence[int] = (0, 1)) -> RoundRobinProxy:
        """A :class:`RoundRobinProxy` in front of the API servers ``indexes`` (started or not yet).

        :meth:`stop` stops it with the deployment; a test may stop it earlier.
        """
        ports = [self.api_port(self.api_server_name(index)) for index in indexes]
        balancer = RoundRobinProxy(ports, "api-servers").start()
        self.balancers.append(balancer)
        return balancer
