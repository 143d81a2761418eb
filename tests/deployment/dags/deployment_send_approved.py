"""Test DAGs of tests/deployment: a campaign over its gate, sent only once a person approves it.

Two numbers in one batch, 2 credits against ``max_cost=1``: the gate refuses and, with
``on_cost_exceeded="ask"``, the send task asks alice in Airflow's Required actions and waits for the
answer (``awaiting_input`` on Airflow 3.3, deferred before) without holding a worker. No approval
notifier: the only campaign the sandbox may see is the approved one.

- ``deployment_send_approved`` waits up to 10 minutes (scenario: the workers are killed meanwhile);
- ``deployment_send_approved_timeout`` waits 20 seconds, then takes the default "Do not send".
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.dag_defaults import alert, dag_arguments

NUMBERS = ["33612000301", "33612000302"]
TEXT = "Deployment test: a campaign a person approves"
APPROVER = "alice"
# The timeout scenario's wait for an answer.
SHORT_TIMEOUT = timedelta(seconds=20)

# The first DAG's id is the file's name: the harness waits for a DAG of each file's name.
for dag_id, approval_timeout in (
    ("deployment_send_approved", timedelta(minutes=10)),
    ("deployment_send_approved_timeout", SHORT_TIMEOUT),
):
    with DAG(dag_id, **dag_arguments("sms", doc_md=__doc__)):
        SmsSendOperator(
            task_id="send",
            message=alert(TEXT),
            recipients=NUMBERS,
            max_cost=1,
            on_cost_exceeded="ask",
            approvers=[APPROVER],
            approval_timeout=approval_timeout,
        )
