"""A distributed Airflow on 127.0.0.1: PostgreSQL, Redis, CeleryExecutor, the triggerer and the sandbox.

:class:`Deployment` starts, each on a free port and with throwaway directories:

- PostgreSQL (Debian's ``postgresql``) as the metadata database: ``initdb`` then ``postgres`` in the
  foreground, run as the ``postgres`` user when we are root (both refuse to run as root);
- Redis (Debian's ``redis-server``) as the Celery broker, without persistence;
- the SMS sandbox as the service (``python -m airflow_provider_sms.sandbox --port 0``), and a recording
  proxy in front of it that only the triggerer's connection goes through;
- Airflow: ``api-server``, ``scheduler``, ``dag-processor``, ``triggerer`` and two ``celery worker``s,
  whose tasks reach the API server's execution API through a second proxy, where a test can hold back
  chosen requests (say, the write of a send guard) while it kills the worker.

On demand, a test can add more API servers (:meth:`Deployment.start_api_server`, same database and
configuration, each on its own port) behind a round-robin load balancer
(:meth:`Deployment.start_load_balancer`, a :class:`RoundRobinProxy`), kill one with SIGKILL and start it
again (:meth:`Deployment.kill_api_server`), and stop PostgreSQL for a while (:meth:`Deployment.postgres_down`:
:meth:`Deployment.stop_postgres`, :meth:`Deployment.restart_postgres`, then :meth:`Deployment.revive` for
the components that exited meanwhile).

Every process runs in its own session (process group), so :meth:`Deployment.stop` ends it with all its
children. Missing Debian packages are installed with apt once; when that is impossible the harness
raises :class:`DeploymentError` (the tests fail, they never skip).
"""

from __future__ import annotations

import contextlib
import glob
import http.client
import http.server
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pendulum
import requests

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
AIRFLOW = str(BIN / "airflow")
TEST_DAGS = Path(__file__).resolve().parent / "dags"
DEBIAN_PACKAGES = ("postgresql", "redis-server")
WORKERS = ("worker1", "worker2")
# The Airflow components every deployment runs (more API servers are started on demand).
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer", *WORKERS)
# What Airflow uses: stopped after the Airflow components.
SERVICES = ("postgres", "redis", "sandbox")
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
STOP_TIMEOUT = 15.0
# How long Deployment.revive watches components after an outage: they give up within seconds.
REVIVE_WATCH = 20.0
# A scenario that unpauses a scheduled DAG starts no closer than this to the DAG's next slot (seconds)
# (clear_of_paris_slot), and waits this long past it: the DAG processor parses every file at least every
# 30 s and sets the DAG's next run then (the slot's, no longer the day before's).
SLOT_MARGIN = 300.0
SLOT_SETTLE = 60.0


class DeploymentError(RuntimeError):
    """The deployment could not be started (a package, a process or a port is missing)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, check: Callable[[], bool], timeout: float, interval: float = 0.2) -> None:
    """Call ``check`` until it returns True; raise :class:`DeploymentError` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, requests.RequestException):
            if check():
                return
        time.sleep(interval)
    raise DeploymentError(f"timed out after {timeout:.0f} s waiting for {what}")


def clear_of_paris_slot(hour: int, weekday: int | None = None, margin: float = SLOT_MARGIN) -> None:
    """Return at once, or after the next ``hour``:00 Europe/Paris (on ``weekday`` only, if given, Monday
    0) when it is less than ``margin`` seconds away: then wait until it has passed by :data:`SLOT_SETTLE`.

    For a scenario that unpauses a DAG with that cron schedule: a slot passing during it would start a
    second scheduled run, whose campaign the scenario does not expect (or which the campaign register
    refuses as the same campaign as the scenario's own).
    """
    now = pendulum.now("Europe/Paris")
    slot = now.at(hour)
    if slot <= now:
        slot = slot.add(days=1)
    if weekday is not None and slot.day_of_week != weekday:
        return
    left = (slot - now).total_seconds()
    if left < margin:
        time.sleep(left + SLOT_SETTLE)


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# ------------------------------------------------------------------------------- Debian packages


def postgres_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` (Debian keeps initdb and postgres there)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def ensure_debian_packages() -> None:
    """Install postgresql and redis-server with apt when missing; raise when that is impossible."""
    if postgres_bin() is not None and shutil.which("redis-server"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise DeploymentError(
            f"tests/deployment needs Debian's {' and '.join(DEBIAN_PACKAGES)}: install them "
            "(apt-get install -y postgresql redis-server) or run as root on Debian so that they are installed"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *DEBIAN_PACKAGES]):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
        if result.returncode != 0:
            raise DeploymentError(
                f"{' '.join(command)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
            )
    if postgres_bin() is None or not shutil.which("redis-server"):
        raise DeploymentError(
            f"apt-get installed {DEBIAN_PACKAGES} but initdb or redis-server is still missing"
        )


# ------------------------------------------------------------------------------- processes


@dataclass
class Process:
    """One long-running process of the deployment, in its own process group, its output in a file."""

    name: str
    command: list[str]
    env: Mapping[str, str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    stop_signal: int = signal.SIGTERM
    # Where this start's output begins in the log (a restarted component appends to it).
    log_offset: int = 0
    # The process groups of its tree when it was asked to stop (its children may outlive it).
    _groups: set[int] = field(default_factory=set)

    def start(self) -> Process:
        """Start the process in a new session (its own process group)."""
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.command,
                env=dict(self.env),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                start_new_session=True,
            )
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        """The output of this start of the process so far."""
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode(errors="replace")

    def groups(self) -> set[int]:
        """The process groups of the process and of everything it started.

        Airflow's task supervisor puts each task process in a group of its own (to signal its whole
        tree), so a worker's group alone does not hold its running tasks.
        """
        if self.popen is None:
            return set()
        groups = {_process_group(pid) for pid in descendants(self.popen.pid)}
        return {self.popen.pid} | {group for group in groups if group is not None}

    def signal_groups(self, groups: set[int], signum: int) -> None:
        """Send ``signum`` to every group in ``groups``."""
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signum)

    def kill(self) -> None:
        """``kill -9`` the process and everything it started at once, as a crashed machine would stop.

        Returns once every one of them is dead (SIGKILL is delivered asynchronously).
        """
        if self.popen is None:
            return
        tree = [self.popen.pid, *descendants(self.popen.pid)]
        self.signal_groups(self.groups(), signal.SIGKILL)
        self.popen.wait(timeout=STOP_TIMEOUT)
        wait_for(
            f"the processes of {self.name} to die",
            lambda: all(process_state(pid) in (None, "Z") for pid in tree),
            STOP_TIMEOUT,
            interval=0.05,
        )

    def request_stop(self) -> None:
        """Send the stop signal to the process's group without waiting (remembering its tree first)."""
        if self.popen is not None and self.popen.poll() is None:
            self._groups = self.groups()
            self.signal_groups({self.popen.pid}, self.stop_signal)

    def stop(self) -> None:
        """Ask the process to stop; kill what is left of its tree after STOP_TIMEOUT seconds."""
        if self.popen is None:
            return
        groups = self._groups | self.groups()
        if self.popen.poll() is None:
            self.signal_groups({self.popen.pid}, self.stop_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=STOP_TIMEOUT)
        # Children left behind (by a process that died first, or in groups of their own) are killed.
        self.signal_groups(groups, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=STOP_TIMEOUT)

    def alive(self) -> bool:
        """Whether the process or anything in its own group is still there."""
        if self.popen is None:
            return False
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return False
        return True


def descendants(root: int) -> list[int]:
    """Every live descendant of process ``root`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # The command name (in parentheses) may hold spaces: the fields follow its closing parenthesis.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, pending = [], [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (``Z``: dead, not yet reaped), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    # The command name (in parentheses) may hold spaces: the state follows its closing parenthesis.
    return stat.rsplit(")", 1)[1].split()[0]


def _process_group(pid: int) -> int | None:
    """The process group of ``pid``, or None when it has ended meanwhile."""
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


# ------------------------------------------------------------------------------- recording proxy

# Longest time a held request waits to be dropped (a test that forgot it must not hang a worker).
HOLD_LIMIT = 300.0
# (method, path, body) of a request; says whether a hold wants it.
RequestMatch = Callable[[str, str, bytes], bool]


class HeldRequest:
    """Requests a :class:`RecordingProxy` holds back instead of forwarding them, until :meth:`drop`.

    Every request the hold matches waits (the client's resends after its timeout too), so none of
    them reaches the server while the test acts: a process killed meanwhile dies at a point the test
    chose instead of one it tried to catch. Dropped, they are answered 503, never forwarded.
    """

    def __init__(self, match: RequestMatch) -> None:
        self.match = match
        self.arrived = threading.Event()
        self.dropped = threading.Event()
        self.request: tuple[str, str] | None = None
        self.count = 0

    def wait(self, timeout: float) -> tuple[str, str]:
        """Wait until a request is held; return the first one's method and path."""
        if not self.arrived.wait(timeout):
            raise DeploymentError(f"no request matching the hold came within {timeout} s")
        assert self.request is not None
        return self.request

    def drop(self) -> None:
        """Answer the held request 503 without forwarding it (and stop waiting for one)."""
        self.dropped.set()


class RecordingProxy:
    """A loopback HTTP proxy that records the method and path of every request it forwards.

    It can also hold back chosen requests (:meth:`hold`).

    :param target_port: the port on 127.0.0.1 it forwards to.
    :param name: what it stands in front of, for its thread's name.
    """

    def __init__(self, target_port: int, name: str) -> None:
        self.requests: list[tuple[str, str]] = []
        self._hold: HeldRequest | None = None
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                held = proxy._take_hold(self.command, self.path, body)
                if held is not None:
                    held.dropped.wait(HOLD_LIMIT)
                    with contextlib.suppress(OSError):  # its client is usually dead by now
                        self.send_error(503, "held back by the test and dropped")
                    return
                proxy.requests.append((self.command, self.path))
                upstream = http.client.HTTPConnection("127.0.0.1", target_port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    answer = upstream.getresponse()
                    payload = answer.read()
                finally:
                    upstream.close()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the requests are recorded above; nothing to print

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"proxy-{name}", daemon=True)

    def hold(self, match: RequestMatch) -> HeldRequest:
        """Hold back the requests that ``match`` accepts from now on (the others pass) until released."""
        with self._lock:
            if self._hold is not None:
                raise DeploymentError("the proxy already holds back a request")
            self._hold = HeldRequest(match)
            return self._hold

    def release_hold(self) -> None:
        """Forget the hold (and drop the requests it holds): every request passes again."""
        with self._lock:
            held, self._hold = self._hold, None
        if held is not None:
            held.drop()

    def _take_hold(self, method: str, path: str, body: bytes) -> HeldRequest | None:
        with self._lock:
            held = self._hold
            if held is None or held.dropped.is_set() or not held.match(method, path, body):
                return None
            held.count += 1
            if held.request is None:
                held.request = (method, path)
                held.arrived.set()
            return held

    def start(self) -> RecordingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release_hold()
        self._server.shutdown()
        self._server.server_close()


# ------------------------------------------------------------------------------- load balancer

# A client connection idle this long is closed; an API server that takes this long to answer is a 502.
CLIENT_IDLE_TIMEOUT = 30.0
BACKEND_TIMEOUT = 30.0
# Headers that concern one hop only: never passed on (Content-Length is set again by the proxy).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)


@dataclass
class BackendTally:
    """What a :class:`RoundRobinProxy` did with the requests it sent to one backend."""

    port: int
    forwarded: int = 0
    answers: dict[int, int] = field(default_factory=dict)
    # Requests answered 502 by the proxy: nothing listened, or the backend died before answering.
    failed: int = 0


class RoundRobinProxy:
    """A load balancer on 127.0.0.1: each request goes to the next backend in turn.

    Per request, not per connection (a client keeping its connection alive still reaches every
    backend). It never retries: a backend that is down, or dies before answering, makes the proxy
    answer 502 (as a real load balancer with no health check yet does), so that the client's own
    retries are what recovers, and a POST is never sent twice by the proxy. Bounded: idle client
    connections close after :data:`CLIENT_IDLE_TIMEOUT`, a backend's answer is awaited at most
    :data:`BACKEND_TIMEOUT`; its threads are daemons, and :meth:`stop` ends it.

    :param backend_ports: the ports on 127.0.0.1 it spreads the requests over.
    :param name: what it stands in front of, for its thread's name.
    """

    def __init__(self, backend_ports: list[int], name: str) -> None:
        if not backend_ports:
            raise DeploymentError("a round-robin proxy needs at least one backend")
        self.backends = [BackendTally(port) for port in backend_ports]
        self._turn = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            # HTTP/1.1: the client's connection is kept alive across requests (each still balanced).
            protocol_version = "HTTP/1.1"
            timeout = CLIENT_IDLE_TIMEOUT

            def setup(self) -> None:
                super().setup()
                # The head and the body of an answer are two writes: without this, Nagle's algorithm
                # and the client's delayed ACK hold the body back 40 ms on every kept-alive request.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _forward(self) -> None:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    self._answer(411, b"the load balancer needs a Content-Length", [])
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                backend = proxy._next_backend()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"host"}}
                upstream = http.client.HTTPConnection("127.0.0.1", backend.port, timeout=BACKEND_TIMEOUT)
                try:
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    answer = upstream.getresponse()
                    payload = answer.read()
                except (OSError, http.client.HTTPException):
                    proxy._count(backend, None)
                    self._answer(502, b"the API server did not answer", [])
                    return
                finally:
                    upstream.close()
                proxy._count(backend, answer.status)
                self._answer(answer.status, payload, answer.getheaders())

            def _answer(self, status: int, payload: bytes, headers: list[tuple[str, str]]) -> None:
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass  # counted per backend instead

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"lb-{name}", daemon=True)

    def _next_backend(self) -> BackendTally:
        with self._lock:
            backend = self.backends[self._turn % len(self.backends)]
            self._turn += 1
            backend.forwarded += 1
            return backend

    def _count(self, backend: BackendTally, status: int | None) -> None:
        with self._lock:
            if status is None:
                backend.failed += 1
            else:
                backend.answers[status] = backend.answers.get(status, 0) + 1

    def tallies(self) -> list[BackendTally]:
        """A copy of what each backend got so far, in the order of the backends."""
        with self._lock:
            return [replace(backend, answers=dict(backend.answers)) for backend in self.backends]

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# ------------------------------------------------------------------------------- Airflow's REST API


# Asset events read per request (the REST API's page).
ASSET_EVENTS_PAGE = 100


class AirflowApi:
    """A client of Airflow's public REST API (/api/v2) with a JWT from the simple auth manager."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.session = requests.Session()

    def login(self) -> None:
        """Get a JWT: with ``simple_auth_manager_all_admins`` GET /auth/token needs no credentials."""
        response = self.session.get(f"{self.base_url}/auth/token", timeout=30)
        response.raise_for_status()
        self.session.headers["Authorization"] = f"Bearer {response.json()['access_token']}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.session.request(method, f"{self.base_url}/api/v2{path}", timeout=30, **kwargs)
        if not response.ok:
            raise requests.HTTPError(f"{method} {path}: HTTP {response.status_code}: {response.text[:2000]}")
        return response.json() if response.content else None

    def unpause(self, dag_id: str) -> None:
        self.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self.call("PATCH", f"/dags/{dag_id}", json={"is_paused": True})

    def trigger(
        self, dag_id: str, conf: Mapping[str, Any] | None = None, logical_date: str | None = None
    ) -> str:
        """Trigger a run now (with no logical date unless one is given); return its run_id."""
        run = self.call(
            "POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": logical_date, "conf": dict(conf or {})}
        )
        return str(run["dag_run_id"])

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's runs, oldest first."""
        body = self.call("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "run_after"})
        return list(body["dag_runs"])

    def finished_scheduled_run(self, dag_id: str) -> tuple[dict[str, Any], str]:
        """The run the scheduler starts when a DAG with ``catchup=False`` is unpaused (its latest slot),
        once it has finished, and its state."""
        found: list[dict[str, Any]] = []
        wait_for(
            f"the scheduled run of {dag_id}",
            lambda: bool(found.extend(r for r in self.runs(dag_id) if r["run_type"] == "scheduled") or found),
            timeout=120,
            interval=1.0,
        )
        return found[0], self.wait_run(dag_id, str(found[0]["dag_run_id"]), timeout=180)

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def wait_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        """Wait until the run is finished; return its state (``success`` or ``failed``)."""
        states: list[str] = []
        try:
            wait_for(
                f"run {run_id} of {dag_id} to finish",
                lambda: states.append(self.run_state(dag_id, run_id)) or states[-1] in ("success", "failed"),
                timeout,
                interval=1.0,
            )
        except DeploymentError as error:
            # "queued" (a logical date in the future, no free slot) is a different fault from "running".
            raise DeploymentError(f"{error} (last state seen: {states[-1] if states else 'none'})") from error
        return states[-1]

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        body = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti for ti in body["task_instances"]}

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        body = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries")
        return sorted(body["task_instances"], key=lambda t: t["try_number"])

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value"
        return self.call("GET", path, params={"deserialize": "true"})["value"]

    def log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The task's log of one try (the worker's lines and, for a deferred task, the triggerer's)."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        body = self.call("GET", path, params={"full_content": "true"})
        return "\n".join(json.dumps(line) if not isinstance(line, str) else line for line in body["content"])

    def variables(self, pattern: str) -> dict[str, str]:
        body = self.call("GET", "/variables", params={"variable_key_pattern": pattern, "limit": 100})
        return {v["key"]: v["value"] for v in body["variables"]}

    def asset_id(self, name: str) -> int | None:
        """The id of the asset named ``name``, or None while no DAG declares it (Airflow has none)."""
        body = self.call("GET", "/assets", params={"name_pattern": name, "limit": 100})
        ids = [asset["id"] for asset in body["assets"] if asset["name"] == name]
        return int(ids[0]) if ids else None

    def asset_events(self, name: str, since: str | None = None) -> list[dict[str, Any]]:
        """Every event of the asset named ``name`` (since ``since``, an ISO 8601 time), oldest first.

        Each is the REST API's record: ``id``, ``asset_id``, ``extra``, ``timestamp``,
        ``created_dagruns`` (the runs it started)... An asset no DAG declares has none.
        """
        asset_id = self.asset_id(name)
        if asset_id is None:
            return []
        events: list[dict[str, Any]] = []
        while True:
            params: dict[str, Any] = {
                "asset_id": asset_id,
                # Airflow adds the id as the tie-break: pages do not overlap.
                "order_by": "timestamp",
                "limit": ASSET_EVENTS_PAGE,
                "offset": len(events),
            }
            if since is not None:
                params["timestamp_gte"] = since
            page = self.call("GET", "/assets/events", params=params)["asset_events"]
            events += page
            if len(page) < ASSET_EVENTS_PAGE:
                return events

    def forget_campaigns(self) -> None:
        """Delete the campaign registers (``sms_campaign:`` Variables): each scenario starts afresh."""
        for key in self.variables("sms_campaign:%"):
            self.call("DELETE", f"/variables/{key}")


# ------------------------------------------------------------------------------- the deployment


@dataclass
class Deployment:
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
    _pg_data: Path | None = None

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

    def _as_postgres(self, command: list[str]) -> list[str]:
        # initdb and postgres refuse to run as root; Debian's package creates the postgres user.
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command

    def _start_postgres(self) -> None:
        pg_bin = postgres_bin()
        assert pg_bin is not None
        # Under /tmp, not the pytest temp dir: that one is private to root, and postgres must own its data.
        self._pg_data = Path(tempfile.mkdtemp(prefix="sms-deployment-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self._pg_data, "postgres", "postgres")
        initdb = self._as_postgres(
            [
                str(pg_bin / "initdb"),
                "-D",
                str(self._pg_data),
                "-U",
                "airflow",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        result = subprocess.run(initdb, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise DeploymentError(f"initdb failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        port = self.ports["postgres"] = free_port()
        command = self._as_postgres(
            [
                str(pg_bin / "postgres"),
                "-D",
                str(self._pg_data),
                "-p",
                str(port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self._pg_data}",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
            ]
        )
        # SIGINT is PostgreSQL's "fast" shutdown: it ends the sessions instead of waiting for them.
        self._spawn("postgres", command, os.environ, stop_signal=signal.SIGINT)
        createdb = [str(pg_bin / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "airflow", "airflow"]
        wait_for(
            "postgres to accept connections",
            lambda: subprocess.run(createdb, capture_output=True, timeout=30, check=False).returncode == 0,
            60,
            interval=0.3,
        )

    def _start_redis(self) -> None:
        port = self.ports["redis"] = free_port()
        command = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.root),
        ]
        self._spawn("redis", command, os.environ)
        wait_for("redis to accept connections", lambda: port_open(port), 30)

    def _start_sandbox(self) -> None:
        command = [sys.executable, "-m", "airflow_provider_sms.sandbox", "--port", "0", "--token", self.token]
        process = self._spawn("sandbox", command, os.environ)
        # The CLI prints exactly one line on stdout once it accepts connections: its URL.
        wait_for("the sandbox to listen", lambda: "SMS sandbox listening on" in process.log(), 30)
        self.sandbox_url = process.log().split("SMS sandbox listening on ", 1)[1].split()[0]
        port = int(self.sandbox_url.rsplit(":", 1)[1])
        self.proxy = RecordingProxy(port, "sandbox").start()

    def connection(self, url: str, **extra: Any) -> str:
        """The sms_default connection (JSON form) to ``url``, with the sandbox's token.

        It receives the sandbox's delivery reports (DLR webhook "1") from 127.0.0.1; ``extra`` adds to
        or replaces the connection's extra.
        """
        extra = {"format": "json", "dlr_webhook_id": "1", "dlr_allowed_callers": ["127.0.0.1"], **extra}
        return json.dumps({"conn_type": "sms", "host": url, "password": self.token, "extra": extra})

    @property
    def database_url(self) -> str:
        """The SQLAlchemy URL of the metadata database (PostgreSQL)."""
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.ports['postgres']}/airflow"

    def query(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        """The rows of one SQL statement on the metadata database, on a connection of its own, committed
        (none for a statement that returns no rows, e.g. ``ALTER TABLE``).

        :param sql: the statement, with ``:name`` placeholders for ``params``.
        """
        import sqlalchemy
        from sqlalchemy.pool import NullPool

        engine = sqlalchemy.create_engine(self.database_url, poolclass=NullPool)
        try:
            with engine.begin() as connection:
                result = connection.execute(sqlalchemy.text(sql), params)
                return [tuple(row) for row in result] if result.returns_rows else []
        finally:
            engine.dispose()

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
                "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{self.ports['redis']}/0",
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

    def kill_api_server(self, index: int = 1) -> None:
        """SIGKILL API server ``index`` and everything it started, as a crashed machine would stop."""
        self.processes[self.api_server_name(index)].kill()

    def stop_api_server(self, index: int = 1) -> None:
        """Stop API server ``index`` as an operator would (SIGTERM; killed after STOP_TIMEOUT)."""
        self.processes[self.api_server_name(index)].stop()

    def start_load_balancer(self, indexes: Sequence[int] = (0, 1)) -> RoundRobinProxy:
        """A :class:`RoundRobinProxy` in front of the API servers ``indexes`` (started or not yet).

        :meth:`stop` stops it with the deployment; a test may stop it earlier.
        """
        ports = [self.api_port(self.api_server_name(index)) for index in indexes]
        balancer = RoundRobinProxy(ports, "api-servers").start()
        self.balancers.append(balancer)
        return balancer

    # -------------------------------------------------------------------- PostgreSQL down and up

    def _pg_tool(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        pg_bin = postgres_bin()
        if pg_bin is None or self._pg_data is None:
            raise DeploymentError("PostgreSQL is not set up")
        command = self._as_postgres([str(pg_bin / tool), *args])
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    def stop_postgres(self) -> None:
        """Stop PostgreSQL with ``pg_ctl stop -m fast`` (sessions ended, transactions under way rolled
        back, nothing committed lost); return once it has exited. Its port then refuses connections."""
        result = self._pg_tool("pg_ctl", "stop", "-D", str(self._pg_data), "-m", "fast", "-w", "-t", "60")
        if result.returncode != 0:
            raise DeploymentError(f"pg_ctl stop failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        postgres = self.processes["postgres"]
        if postgres.popen is not None:
            postgres.popen.wait(timeout=STOP_TIMEOUT)

    def restart_postgres(self) -> None:
        """Start PostgreSQL again on its data, port and settings (what ``pg_ctl start`` would do, but in the
        foreground as at start-up, so that :meth:`stop` still ends it); return once it accepts connections."""
        postgres = self.processes["postgres"]
        if postgres.running:
            raise DeploymentError("PostgreSQL is already running")
        postgres.start()
        ready = ("pg_isready", "-h", "127.0.0.1", "-p", str(self.ports["postgres"]), "-U", "airflow")
        wait_for(
            "postgres to accept connections again",
            lambda: self._pg_tool(*ready).returncode == 0,
            60,
            interval=0.3,
        )

    @contextlib.contextmanager
    def postgres_down(self) -> Iterator[list[str]]:
        """PostgreSQL stopped for the block (:meth:`stop_postgres`), then, whatever happened in it, started
        again (:meth:`restart_postgres`) and the components that exited meanwhile too (:meth:`revive`).

        Yields a list that holds, once the block is over, the names of the components started again.
        """
        revived: list[str] = []
        self.stop_postgres()
        try:
            yield revived
        finally:
            self.restart_postgres()
            revived += self.revive()

    def revive(self, names: Sequence[str] = COMPONENTS, watch: float = REVIVE_WATCH) -> list[str]:
        """Start again those of the components ``names`` that exit within ``watch`` seconds (as a
        supervisor such as systemd or Kubernetes would); return their names, once each is ready.

        A component that lost its database may still be giving up when it is back (the triggerer
        stops its log server first): it is watched for a while, not looked at once.
        """
        revived: list[str] = []
        deadline = time.monotonic() + watch
        while time.monotonic() < deadline:
            for name in names:
                if name in self.processes and not self.processes[name].running:
                    self.start_component(name)
                    revived.append(name)
            time.sleep(0.5)
        return revived

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
        if self._pg_data is not None:
            shutil.rmtree(self._pg_data, ignore_errors=True)

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
