"""Never twice on the distributed deployment: two DAG runs of one campaign triggered at the same instant,
on two Celery workers, claim through two API servers' claim store (PostgreSQL): one campaign every time.

Each worker reaches its own API server (its ``[api] base_url``) through a proxy of its own: worker 1
API server 1, worker 2 API server 2. Twenty repetitions, each a campaign of its own:

- ``plain``: both routes as fast as loopback;
- ``slow``: worker 2's route answers every claim call late (:data:`SLOW_ROUTE`), as a loaded network or
  API server would: its claims come in while the other worker's send is under way;
- ``kill``: right after its claim (the campaign and its numbers, one call), the winner's first write
  of its send guard, before any request to the service, is held at the execution API's proxy, and its
  worker is killed with SIGKILL (every process it started) meanwhile. The scheduler fails the try
  after the missing heartbeats and retries it; the retry resumes its own claim and sends.

Every time: exactly one campaign reaches the service, one run succeeds, the other fails naming the
send that went.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING
from urllib.parse import unquote

import pytest

from tests.deployment.harness import WORKERS, RecordingProxy, guard_write

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow_provider_sms.sandbox.server import InspectionClient
    from tests.deployment.harness import AirflowApi, Deployment

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_claim_race"
MODES = ("plain",) * 8 + ("slow",) * 8 + ("kill",) * 4
# Each POST /send answers after this long: the loser's claim meets the winner's while it is sending.
SLOW_SEND = 1.0
# What each claim call of worker 2 waits at its proxy in the "slow" repetitions.
SLOW_ROUTE = 1.5


def numbers(repetition: int) -> list[str]:
    """The two numbers of a repetition: its own, as the service's anti-flood limit counts per number."""
    return [f"336224{repetition:03d}{index:02d}" for index in (1, 2)]


@pytest.fixture
def claim_routes(deployment: Deployment) -> Iterator[dict[str, RecordingProxy]]:
    """Worker 1 reaching API server 1 and worker 2 API server 2, each through a proxy; put back after."""
    deployment.start_api_server(1)
    proxies = {
        worker: RecordingProxy(
            deployment.api_port(deployment.api_server_name(index)), f"claims-{worker}"
        ).start()
        for index, worker in enumerate(WORKERS)
    }
    try:
        for worker, proxy in proxies.items():
            deployment.processes[worker].stop()
            deployment.start_component(worker, AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{proxy.port}")
        yield proxies
    finally:
        for proxy in proxies.values():
            proxy.stop()
        for worker in WORKERS:
            deployment.processes[worker].stop()
            deployment.start_component(worker)
        deployment.stop_api_server(1)


def kill_right_after_the_claim(
    deployment: Deployment, api: AirflowApi, proxies: dict[str, RecordingProxy], runs: list[str]
) -> str:
    """Hold the first write of a send guard of ``runs`` (the winner's, right after its claim), SIGKILL its
    worker meanwhile, then start the worker again. The held write never reaches the API server: the
    killed send holds its claim and its numbers, and sent nothing. Returns the killed worker's name."""
    assert deployment.execution_proxy is not None
    held = deployment.execution_proxy.hold(guard_write(DAG_ID, 0, "sending"))
    try:
        _, path = held.wait(timeout=180)
        # The guard's Variable key names the run (run ids keep their characters in it).
        (winner,) = [run_id for run_id in runs if run_id in unquote(path)]
        victim = api.task_instances(DAG_ID, winner)["send"]["hostname"]
        assert victim in WORKERS, victim
        deployment.processes[victim].kill()
    finally:
        deployment.execution_proxy.release_hold()
    deployment.start_component(victim, AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{proxies[victim].port}")
    return victim


def last_logs(api: AirflowApi, runs: list[str]) -> str:
    """The end of the last try's log of each run's send."""
    logs = []
    for run_id in runs:
        tries = api.tries(DAG_ID, run_id, "send")
        for attempt in tries:
            log = api.log(DAG_ID, run_id, "send", attempt["try_number"])
            logs.append(f"--- {run_id}, try {attempt['try_number']} on {attempt['hostname']}:\n{log[-3000:]}")
    return "\n".join(logs)


def test_two_runs_of_one_campaign_at_the_same_instant_send_it_once_every_time(
    api: AirflowApi,
    deployment: Deployment,
    sandbox: InspectionClient,
    claim_routes: dict[str, RecordingProxy],
    timings: dict[str, float],
) -> None:
    sandbox.set_faults(slow=SLOW_SEND, endpoints=["/send"])
    api.unpause(DAG_ID)
    outcomes: Counter[str] = Counter()
    killed: list[str] = []
    started = time.monotonic()
    for repetition, mode in enumerate(MODES):
        claim_routes[WORKERS[1]].delay = SLOW_ROUTE if mode == "slow" else 0.0
        conf = {"text": f"Same campaign at once {repetition}", "recipients": numbers(repetition)}
        runs = [api.trigger(DAG_ID, conf), api.trigger(DAG_ID, conf)]
        if mode == "kill":
            killed.append(kill_right_after_the_claim(deployment, api, claim_routes, runs))
        states = {run_id: api.wait_run(DAG_ID, run_id, timeout=240) for run_id in runs}
        what = f"repetition {repetition} ({mode}): {states}"
        assert sorted(states.values()) == ["failed", "success"], f"{what}\n{last_logs(api, runs)}"
        outcomes.update(states.values())
        sent = [c for c in sandbox.campaigns() if c["text"] == conf["text"]]
        assert len(sent) == 1, f"{what}: {len(sent)} campaigns"
        assert sorted(sent[0]["sent_to"]) == numbers(repetition), what
        (loser,) = [run_id for run_id, state in states.items() if state == "failed"]
        tries = api.tries(DAG_ID, loser, "send")
        log = api.log(DAG_ID, loser, "send", tries[-1]["try_number"])
        assert "was already sent" in log, f"{what}\n{log[-4000:]}"
        assert "Every one of its 2 numbers already got this message for this slot" in log, log[-4000:]
        if mode == "kill":
            # The killed try failed on missing heartbeats; a retry ran, whichever run won.
            every_try = [t for run_id in runs for t in api.tries(DAG_ID, run_id, "send")]
            assert any(t["try_number"] == 2 for t in every_try), f"{what}: no retry of the killed try"
    timings["never twice: 20 races of two runs (8 plain, 8 slowed, 4 with a worker killed)"] = (
        time.monotonic() - started
    )
    assert outcomes == {"success": len(MODES), "failed": len(MODES)}
    assert len(killed) == MODES.count("kill")
    # Both routes carried claims (each worker claimed through its own API server).
    for worker, proxy in claim_routes.items():
        assert any(path.startswith("/sms/claims/") for _, path in proxy.requests), worker
    # One claim row per campaign sent, its numbers held once each.
    claims = deployment.query("SELECT count(*), count(DISTINCT scope) FROM sms_claim WHERE state = 'sent'")
    assert claims == [(len(MODES), len(MODES))]
    (held,) = deployment.query("SELECT sum(numbers) FROM sms_claim_chunk")
    assert held == (2 * len(MODES),)
