"""Never twice on the distributed deployment: two DAG runs of one campaign triggered at the same instant,
on two Celery workers, claim through the API server's claim store (PostgreSQL): one campaign every time.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from airflow_provider_sms.sandbox.server import InspectionClient
    from tests.deployment.harness import AirflowApi, Deployment

pytestmark = pytest.mark.deployment

DAG_ID = "deployment_send"
REPETITIONS = 5
# Each POST /send answers after this long: the loser's claim meets the winner's while it is sending.
SLOW_SEND = 1.0


def test_two_runs_of_one_campaign_at_the_same_instant_send_it_once_every_time(
    api: AirflowApi, deployment: Deployment, sandbox: InspectionClient
) -> None:
    sandbox.set_faults(slow=SLOW_SEND, endpoints=["/send"])
    api.unpause(DAG_ID)
    outcomes: Counter[str] = Counter()
    for repetition in range(REPETITIONS):
        conf = {"text": f"Same campaign at once {repetition}", "recipients": ["33622300001", "33622300002"]}
        runs = [api.trigger(DAG_ID, conf), api.trigger(DAG_ID, conf)]
        states = sorted(api.wait_run(DAG_ID, run_id, timeout=180) for run_id in runs)
        outcomes.update(states)
        assert states == ["failed", "success"], f"repetition {repetition}: {states}"
        (loser,) = [run_id for run_id in runs if api.wait_run(DAG_ID, run_id, timeout=10) == "failed"]
        log = api.log(DAG_ID, loser, "send", 1)
        assert "was already sent" in log, log[-4000:]
        assert "Every one of its 2 numbers already got this message for this slot" in log, log[-4000:]
        sent = [c for c in sandbox.campaigns() if c["text"] == conf["text"]]
        assert len(sent) == 1, f"repetition {repetition}: {len(sent)} campaigns"
    assert outcomes == {"success": REPETITIONS, "failed": REPETITIONS}
    # Each run claimed through the API server: one claim row per winner, its numbers held once each.
    claims = deployment.query("SELECT count(*), count(DISTINCT scope) FROM sms_claim WHERE state = 'sent'")
    assert claims == [(REPETITIONS, REPETITIONS)]
    (numbers,) = deployment.query("SELECT count(*) FROM sms_claim_number")
    assert numbers == (2 * REPETITIONS,)
