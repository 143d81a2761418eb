"""Operators against the sandbox over loopback: simulate -> send figures, gates, a 200,000-number send."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_sms.operators.sms import SmsSendListsOperator, SmsSendOperator, SmsSimulateOperator
from tests.task_instance import FakeTaskInstance

pytestmark = pytest.mark.integration

NUMBERS = ["33612345678", "+33 6 12 34 56 79", "33612345680", "33612345678", "447700900123"]
FIGURES = ("cost", "total", "sent", "blacklisted", "duplicated", "npai", "invalid", "not_allowed", "flood")


def context(run_id: str = "manual__2030-01-01") -> dict[str, Any]:
    return {"ti": FakeTaskInstance(run_id=run_id)}


@pytest.fixture(params=["json", "xml"])
def connection(request: pytest.FixtureRequest, sms_sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The sms_default connection on the sandbox, in each wire format."""
    monkeypatch.setenv("AIRFLOW_CONN_SMS_DEFAULT", sms_sandbox.connection_json(request.param))
    return sms_sandbox


@pytest.mark.parametrize(
    "message",
    [
        {"text": "Flash sale tonight", "pushtype": "alert"},
        {
            "text": "Soldes d\u2019\u00e9t\u00e9 : -50 % sur tout <-short->",
            "pushtype": "marketing",
            "links": ["https://example.com/s"],
            # Inside the marketing send window (Saturday 10:00 Paris), whatever time the test runs.
            "delay": "2030-06-01T08:00:00+00:00",
        },
        {"text": "x" * 200, "pushtype": "alert", "delay": "2030-06-01T08:00:00+00:00"},
    ],
)
def test_simulated_figures_are_those_of_the_send(connection, memory_variables, message):
    simulated = SmsSimulateOperator(task_id="sim", message=message, recipients=NUMBERS).execute(context())
    sent = SmsSendOperator(task_id="send", message=message, recipients=NUMBERS).execute(context())

    assert {name: sent[name] for name in FIGURES} == {name: simulated[name] for name in FIGURES}
    assert sent["credits"] == simulated["credits"]
    (campaign,) = connection.inspect.campaigns()
    assert str(campaign["ticket"]) == sent["ticket"]
    assert campaign["text"].startswith(message["text"].split("<-short->")[0])
    assert campaign["pushtype"] == message["pushtype"]


def test_simulated_figures_are_those_of_the_list_send(connection, memory_variables):
    simulated = SmsSimulateOperator(task_id="sim", message="Hello", lists=[1, 2]).execute(context())
    sent = SmsSendListsOperator(task_id="send", message="Hello", lists=[1, 2], max_cost=10**6).execute(
        context()
    )

    assert {name: sent[name] for name in FIGURES} == {name: simulated[name] for name in FIGURES}
    assert sent["simulation"]["cost"] == sent["cost"] > 0
    assert len(connection.inspect.campaigns()) == 1


def test_gate_refuses_and_nothing_reaches_the_sandbox(connection, memory_variables):
    connection.inspect.set_credits(5)
    # 4 numbers after filtering, 1 credit each: 1 credit would be left.
    operator = SmsSendOperator(task_id="send", message="Hello", recipients=NUMBERS, min_credits_after=2)

    with pytest.raises(AirflowFailException, match="1 credits would be left, under min_credits_after 2"):
        operator.execute(context())
    assert connection.inspect.campaigns() == []
    assert connection.inspect.credits() == 5


def test_a_delay_reaches_the_sandbox_in_paris_time(connection, memory_variables):
    SmsSendOperator(
        task_id="send", message="Hello", recipients=NUMBERS[:1], delay="2030-01-15T08:00:00+00:00"
    ).execute(context())
    (campaign,) = connection.inspect.campaigns()
    assert campaign["delay"] == "2030-01-15 09:00:00"


BIG_SEND = """
import json, sys, threading, time
from pathlib import Path
import pytest
from airflow_provider_sms.operators.sms import SmsSendOperator
from tests.conftest import use_memory_variables
from tests.task_instance import FakeTaskInstance


def rss_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


peak = [0.0]
done = threading.Event()


def sample():  # the resident size, every 20 ms, while execute() runs
    while not done.wait(0.02):
        peak[0] = max(peak[0], rss_mib())


use_memory_variables(pytest.MonkeyPatch())  # no task runtime here: the guard in memory, claims in SQLite
operator = SmsSendOperator(
    task_id="send", message="Flash sale tonight", recipients=Path(sys.argv[1]), max_cost=10**6
)
ti = FakeTaskInstance(run_id="big")
before = rss_mib()
threading.Thread(target=sample, daemon=True).start()
started = time.perf_counter()
result = operator.execute({"ti": ti})
elapsed = time.perf_counter() - started
done.set()
report = {"elapsed": elapsed, "rss_before": before, "rss_peak": max(peak[0], rss_mib()), "result": result}
print("BIG_SEND " + json.dumps(report))
"""


def test_200000_recipients_in_batches(sms_sandbox, tmp_path: Path):
    """A file of 200,000 numbers sent in 20 batches by the operator in its own process.

    Time and memory are printed, not asserted. The operator runs in a subprocess so that its
    memory is measured apart from the sandbox's (which keeps every recipient it was sent).
    """
    sms_sandbox.inspect.set_credits(10**7)
    count = 200_000
    path = tmp_path / "numbers.csv"
    path.write_text("".join(f"336{index:08d}\n" for index in range(count)))
    env = {**os.environ, "AIRFLOW_CONN_SMS_DEFAULT": sms_sandbox.connection_json("json")}

    process = subprocess.run(
        [sys.executable, "-c", BIG_SEND, str(path)],
        env=env,
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    line = next(line for line in process.stdout.splitlines() if line.startswith("BIG_SEND "))
    report = json.loads(line.removeprefix("BIG_SEND "))
    result = report["result"]
    campaigns = sms_sandbox.inspect.campaigns()
    assert len(campaigns) == 20
    assert sum(len(campaign["recipients"]) for campaign in campaigns) == count
    assert result["batches"] == 20
    assert result["total"] == count
    assert result["cost"] == result["simulation"]["cost"] == sum(c["cost"] for c in campaigns)
    assert result["tickets"] == [str(campaign["ticket"]) for campaign in campaigns]
    assert "batch 20/20" in process.stdout
    print(
        f"\n200,000 recipients from a file, 20 batches, simulate + send: {report['elapsed']:.1f} s wall; "
        f"operator process RSS {report['rss_before']:.0f} MiB before execute(), "
        f"peak {report['rss_peak']:.0f} MiB during it (file of {path.stat().st_size / 2**20:.1f} MiB)"
    )
