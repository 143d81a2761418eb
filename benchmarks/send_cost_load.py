"""A send's fixed cost, in a fresh interpreter: ``python -m benchmarks.send_cost_load URL TOKEN REPS CLAIMS``.

Runs ``SmsSendOperator(recipients=<10 numbers>).execute()`` on the ``sms_default`` connection (the
sandbox at ``URL``) as a task would run it, and a bare ``requests.post`` of the same body, interleaved,
``REPS`` times each after one cold run; prints the best of each figure as one JSON line.

The operator runs in two ways: no gate, and with a cost gate (``max_cost`` set: the exact campaign is
simulated first). Each run starts from an empty in-memory Variable store (the stand-in the operator
tests use: no task runtime here) and sends a text of its own, so neither the send guard nor a claim
holds an earlier run; the claims are made where ``CLAIMS`` says (:mod:`benchmarks.claim_path`: a SQLite
database of the child's own, or the API server's routes); the sandbox is put back to its seeds after
each run, outside the timed part.

What is timed, by wrapping the provider's functions for the run (the wrappers' own cost is in the whole):
from ``execute()`` to the first ``POST /send`` handed to ``requests`` and the whole call, and the parts:
checking the arguments and preparing the campaign (the connection looked up), the claims (the campaign's
and its numbers', and the record of the tickets: one transaction each), the send guard (its read and its
two writes around the POST), the simulation a gate needs, the campaign record pushed to XCom. The
Variable reads and writes are counted: in a worker each is a round trip to Airflow's API server, which
the in-memory store does not pay.
"""

from __future__ import annotations

import functools
import itertools
import json
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

# Ten numbers, as the case's title says.
NUMBERS = [f"336{index:08d}" for index in range(10)]
TEXT = "Flash sale tonight"
# A budget no 10-number campaign reaches: the gate passes, so the send goes on.
MAX_COST = 10**6


class Clock:
    """Times the parts of one ``execute()``: seconds per part, and when the first POST /send left."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self.first_send: float | None = None
        self.body: bytes | None = None
        self.reads = self.writes = 0

    def reset(self) -> None:
        """Forget the last run's figures."""
        self.parts = {}
        self.first_send = self.body = None
        self.reads = self.writes = 0

    def add(self, part: str, seconds: float) -> None:
        self.parts[part] = self.parts.get(part, 0.0) + seconds


CLOCK = Clock()


def _timed(part: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            CLOCK.add(part, time.perf_counter() - started)

    return run


def instrument(claims: str) -> None:
    """Wrap what a send does in timers, and the Variables in an in-memory store that counts its calls;
    claims made where ``claims`` says (:func:`benchmarks.claim_path.claim_through`)."""
    import pytest
    import requests

    from airflow_provider_sms.operators import _campaign_run, _claims, _send_guard, sms
    from benchmarks.claim_path import claim_through
    from tests.conftest import MemoryVariables

    patch = pytest.MonkeyPatch()  # never undone: the interpreter exists for this measurement
    claim_through(claims, patch)

    class CountingVariables(MemoryVariables):
        @classmethod
        def get(cls, key: str, default: object = None) -> object:
            CLOCK.reads += 1
            return MemoryVariables.store.get(key, default)

        @classmethod
        def set(cls, key: str, value: str, description: str | None = None) -> None:
            CLOCK.writes += 1
            MemoryVariables.store[key] = value

    patch.setattr(_send_guard, "Variable", CountingVariables)
    for owner, name, part in (
        (sms.SmsBaseOperator, "prepare_campaign", "prepare"),
        (_claims.CampaignClaim, "take", "claims"),
        (_claims.CampaignClaim, "numbers", "claims"),
        (_claims.CampaignClaim, "sent", "claims"),
        (_send_guard.SendGuard, "begin", "guard"),
        (_send_guard.SendGuard, "confirm", "guard"),
        (_campaign_run, "simulate_all", "simulate"),
        (_campaign_run, "push_record", "record"),
    ):
        patch.setattr(owner, name, _timed(part, getattr(owner, name)))
    load = _send_guard.SendGuard.__dict__["for_task_instance"].__func__
    patch.setattr(_send_guard.SendGuard, "for_task_instance", classmethod(_timed("guard", load)))

    send = requests.Session.send

    @functools.wraps(send)
    def noting_send(self: requests.Session, request: requests.PreparedRequest, **kwargs: Any) -> Any:
        if CLOCK.first_send is None and request.method == "POST" and (request.url or "").endswith("/send"):
            CLOCK.first_send = time.perf_counter()
            CLOCK.body = request.body if isinstance(request.body, bytes) else str(request.body).encode()
        return send(self, request, **kwargs)

    patch.setattr(requests.Session, "send", noting_send)


# Each run's text is its own (the same length): no run's claim is another's duplicate.
_runs = itertools.count()


def run_operator(url: str, *, gate: bool) -> dict[str, Any]:
    """One ``execute()`` from an empty Variable store, of a text no claim holds; its figures (seconds)."""
    from airflow_provider_sms.operators.sms import SmsSendOperator
    from airflow_provider_sms.sandbox import InspectionClient
    from tests.conftest import MemoryVariables
    from tests.task_instance import FakeTaskInstance

    MemoryVariables.store.clear()
    text = f"{TEXT} {next(_runs):04d}"
    operator = SmsSendOperator(
        task_id="send", message=text, recipients=list(NUMBERS), max_cost=MAX_COST if gate else None
    )
    ti = FakeTaskInstance(dag_id="bench", run_id="bench")
    CLOCK.reset()
    started = time.perf_counter()
    result = operator.execute({"ti": ti})
    elapsed = time.perf_counter() - started
    if result["total"] != len(NUMBERS) or CLOCK.first_send is None:
        raise AssertionError(f"the operator did not send the {len(NUMBERS)} numbers once: {result}")
    InspectionClient(url).reset()
    return {
        "whole": elapsed,
        "first_post": CLOCK.first_send - started,
        **CLOCK.parts,
        "variable_reads": CLOCK.reads,
        "variable_writes": CLOCK.writes,
    }


def bare_post(url: str, token: str, body: bytes) -> float:
    """A bare ``requests.post`` of ``body`` to /send, answer checked; its wall time (seconds)."""
    import requests

    from airflow_provider_sms.sandbox import InspectionClient

    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json",
        "Content-Type": "application/json",
    }
    started = time.perf_counter()
    response = requests.post(f"{url}/send", data=body, headers=headers, timeout=30)
    response.raise_for_status()
    status = response.json()["status"]
    elapsed = time.perf_counter() - started
    if status != 1:
        raise RuntimeError(f"the sandbox refused the bare POST: {response.text[:300]}")
    InspectionClient(url).reset()
    return elapsed


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = {key for run in runs for key in run}
    return {key: min(run.get(key, 0.0) for run in runs) for key in sorted(keys)}


def measure(url: str, token: str, reps: int, claims: str) -> dict[str, Any]:
    """The figures the module docstring describes."""
    instrument(claims)
    # The first run in this interpreter pays the imports execute() makes: reported apart.
    cold = run_operator(url, gate=False)
    body = CLOCK.body
    if body is None:
        raise AssertionError("no POST /send was seen")
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "gate": []}
    bare: list[float] = []
    for _ in range(reps):
        bare.append(bare_post(url, token, body))
        runs["plain"].append(run_operator(url, gate=False))
        runs["gate"].append(run_operator(url, gate=True))
    return {
        "bare": min(bare),
        "cold": cold["whole"],
        "body_bytes": len(body),
        **{name: _best(side) for name, side in runs.items()},
    }


def main() -> int:
    """Measure against the sandbox the arguments name; print the figures as one JSON line."""
    url, token, reps, claims = sys.argv[1:]
    print(json.dumps(measure(url, token, int(reps), claims)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
