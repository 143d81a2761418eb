"""A distributed Airflow on 127.0.0.1: PostgreSQL, Redis, CeleryExecutor, the triggerer and the sandbox.

:class:`Deployment` (``deployment``) starts, each on a free port and with throwaway directories:

- the metadata database (``postgres``): Debian's PostgreSQL, ``initdb`` then ``postgres`` in the
  foreground, run as the ``postgres`` user when we are root (both refuse to run as root);
- the Celery broker (``redis``): Debian's Redis, without persistence;
- the SMS service (``sandbox``): ``python -m airflow_provider_sms.sandbox --port 0``, and a recording proxy
  (``recording_proxy``) in front of it that only the triggerer's connection goes through;
- Airflow (``airflow``): ``api-server``, ``scheduler``, ``dag-processor``, ``triggerer`` and two
  ``celery worker``s, whose tasks reach the API server's execution API through a second recording proxy,
  where a test can hold back chosen requests (say, the write of a send guard) while it kills the worker.

On demand, a test can add more API servers (:meth:`Deployment.start_api_server`, same database and
configuration, each on its own port) behind a round-robin load balancer (``load_balancer``,
:meth:`Deployment.start_load_balancer`), and bring faults (``faults``): kill an API server with SIGKILL
and start it again (:meth:`Deployment.kill_api_server`), stop PostgreSQL for a while
(:meth:`Deployment.postgres_down`: :meth:`Deployment.stop_postgres`, :meth:`Deployment.restart_postgres`,
then :meth:`Deployment.revive` for the components that exited meanwhile). The scenarios drive and read
Airflow through its REST API (``airflow_api``).

Every process runs in its own session (process group, ``processes``), so :meth:`Deployment.stop` ends it
with all its children. Missing Debian packages are installed with apt once (``packages``); when that is
impossible the harness raises :class:`DeploymentError` (the tests fail, they never skip).

The names the scenarios and the benchmarks use are importable from here.
"""

from tests.deployment.harness.airflow import WORKERS
from tests.deployment.harness.airflow_api import AirflowApi
from tests.deployment.harness.deployment import Deployment, running_deployment
from tests.deployment.harness.load_balancer import RoundRobinProxy
from tests.deployment.harness.processes import descendants, process_state
from tests.deployment.harness.recording_proxy import RecordingProxy, RequestMatch, guard_write
from tests.deployment.harness.waiting import DeploymentError, clear_of_paris_slot, wait_for

__all__ = [
    "WORKERS",
    "AirflowApi",
    "Deployment",
    "DeploymentError",
    "RecordingProxy",
    "RequestMatch",
    "RoundRobinProxy",
    "clear_of_paris_slot",
    "descendants",
    "guard_write",
    "process_state",
    "running_deployment",
    "wait_for",
]
