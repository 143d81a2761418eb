"""Deferred sensors at scale: many SMS triggers in one event loop, as one Airflow triggerer runs them.

The triggers run in a fresh interpreter (:mod:`benchmarks.trigger_load`) and the sandbox in another
process, seeded with one webhook per webhook trigger and a long NPAI list, so that every figure is the
triggers' alone: the loop's worst lag, the sockets held, the peak RSS and the CPU time per poll.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from benchmarks.cases_http import (
    SANDBOX_MISSING,
    SMS_CONN_ID,
    TOKEN,
    sandbox_available,
    serving,
)
from benchmarks.harness import NO_BASELINE, REPORT, Record, Target, child_figures, record, skipped

# Airflow's triggerer warns at 0.2 s; a trigger should never come near it.
MAX_LAG_MS = 50.0
MAX_RSS_PER_TRIGGER = 100 * 1024
# Seconds between two polls of one trigger: short, so that the rounds follow one another.
INTERVAL = 0.5

# The sandbox, seeded: webhooks "1".."N" (live, never what the triggers wait for) and an NPAI list.
_SANDBOX_CHILD = """
import sys
from airflow_provider_sms.sandbox import SandboxConfig, SandboxServer, Seeds
token, webhooks, npai = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seeds = Seeds(
    webhooks={
        str(i): {"type": "DLR", "url": f"http://127.0.0.1:9/dlr{i}", "status": "live", "last_http_code": 200}
        for i in range(1, webhooks + 1)
    },
    npai=[
        {"destination": f"3369{i:07d}", "date": "2026-01-15 10:30:00", "campaign_id": 1000 + i % 100}
        for i in range(npai)
    ],
)
server = SandboxServer(token=token, port=0, config=SandboxConfig(seeds=seeds))
server.start()
print(f"SMS sandbox listening on {server.url}", flush=True)
sys.stdin.read()  # until the benchmark stops this process
"""


def _run_triggers(plan: dict[str, object], env: dict[str, str], deadline: float) -> dict[str, Any]:
    """Run :mod:`benchmarks.trigger_load` with ``plan``; its figures, once checked that no trigger ended."""
    report = child_figures("benchmarks.trigger_load", [json.dumps(plan)], env, deadline + 120)
    if report["event_count"]:
        raise AssertionError(f"{report['event_count']} trigger(s) ended, e.g. {report['events']}")
    return report


def trigger_cases(webhooks: int, npai: int, entries: int, rounds: int, deadline: float) -> list[Record]:
    """``webhooks`` webhook and ``npai`` NPAI triggers (``entries`` NPAI entries) polling ``rounds`` times.

    :param deadline: seconds the load may take; beyond it the case fails instead of running on.
    """
    size = webhooks + npai
    title = f"{webhooks:,} webhook + {npai:,} NPAI triggers ({entries:,} NPAI entries), one loop"
    names = {
        "lag": f"{title}: worst loop lag outside full garbage collections",
        "raw_lag": f"{title}: worst loop lag",
        "frozen_lag": f"{title}: worst loop lag, start-up objects frozen",
        "rss": f"{title}: peak RSS per trigger",
        "sockets": f"{title}: sockets at peak",
        "cpu": f"{title}: CPU time per poll",
    }
    from airflow_provider_sms.hooks.sms import MAX_CONNECTIONS

    targets = {
        "lag": Target(MAX_LAG_MS, kind="bound"),
        "raw_lag": REPORT,
        "frozen_lag": REPORT,
        "rss": Target(MAX_RSS_PER_TRIGGER, kind="bound"),
        "sockets": Target(MAX_CONNECTIONS, kind="bound"),
        "cpu": REPORT,
    }
    units = {
        "lag": "ms",
        "raw_lag": "ms",
        "frozen_lag": "ms",
        "rss": "bytes",
        "sockets": "count",
        "cpu": "ms",
    }
    if not sandbox_available():
        return [
            skipped(
                names[key], size, targets[key], SANDBOX_MISSING, baseline_name=NO_BASELINE, unit=units[key]
            )
            for key in names
        ]
    command = [sys.executable, "-c", _SANDBOX_CHILD, TOKEN, str(webhooks), str(entries)]
    with serving(command) as url:
        plan = {
            "conn_id": SMS_CONN_ID,
            "webhooks": webhooks,
            "npai": npai,
            "rounds": rounds,
            "interval": INTERVAL,
            "deadline": deadline,
        }
        env = {
            **os.environ,
            f"AIRFLOW_CONN_{SMS_CONN_ID.upper()}": json.dumps(
                {"conn_type": "sms", "host": url, "password": TOKEN}
            ),
        }
        report = _run_triggers(plan, env, deadline)
        # The same load in a process whose start-up objects are frozen (gc.freeze()), to tell the
        # full collections' share of the lag: they then walk only what was made after start-up.
        frozen = _run_triggers({**plan, "freeze": True}, env, deadline)
    how = (
        f"{size:,} triggers rebuilt from serialize() and run() in one asyncio loop in a fresh interpreter, "
        f"poke_interval {INTERVAL:g} s, until each polled {rounds} times ({report['polls']:,} polls in "
        f"{report['seconds']:.1f} s, {report['poll_errors']} failed), then cancelled as the triggerer does; "
        f"the sandbox in its own process"
    )
    figures = {
        "lag": (
            report["lag_max_between_collections"] * 1000,
            f"{how}; a 10 ms ticker task's worst late wake-up, less the garbage collector's full "
            "collections within it (next row: with them)",
        ),
        "raw_lag": (
            report["lag_max"] * 1000,
            f"the ticker's worst late wake-up, full collections included: {report['full_collections']} "
            f"full collection(s), the longest {report['full_collection_max'] * 1000:.0f} ms (each walks the "
            f"process's {report['tracked_objects']:,} tracked objects, Airflow's included); "
            f"{report['lags_over_200ms']} wake-up(s) over the 0.2 s at which Airflow's triggerer warns; "
            f"the loop's longest single step (one callback, of {report['steps']:,}) "
            f"{report['step_max'] * 1000:.0f} ms, {report['step_max_between_collections'] * 1000:.0f} ms "
            f"outside full collections (that one: {report['longest_step']})",
        ),
        "frozen_lag": (
            frozen["lag_max"] * 1000,
            f"the same load in a fresh interpreter that ran gc.collect() and gc.freeze() once Airflow "
            f"and the triggers' modules were imported (as Airflow's DAG processor does after its start-up; "
            f"its triggerer does not): {frozen['full_collections']} full collection(s), the longest "
            f"{frozen['full_collection_max'] * 1000:.0f} ms over {frozen['tracked_objects']:,} tracked "
            f"objects; the rest of the lag is the triggers'",
        ),
        "rss": (
            report["rss_growth"] / size,
            f"peak RSS (VmHWM) over the RSS once Airflow and the triggers' modules were imported "
            f"({report['rss_base'] / 2**20:.0f} MiB), divided by the {size:,} triggers",
        ),
        "sockets": (
            report["sockets_peak"],
            f"sockets of the process, sampled every 50 ms, less those open before the triggers started "
            f"(the event loop's self-pipe); target: the async hook's pool "
            f"(MAX_CONNECTIONS = {MAX_CONNECTIONS}) for the one connection all triggers use; "
            f"{report['sockets_after']} socket(s) left in the process once the loop was closed",
        ),
        "cpu": (
            report["cpu_per_poll"] * 1000,
            "process CPU time (every thread) over the rounds, divided by the polls made",
        ),
    }
    # Only the RSS row reports a peak memory: the growth it divides.
    peaks = {"rss": report["rss_growth"]}
    return [
        record(
            names[key],
            size,
            figures[key][0],
            None,
            targets[key],
            baseline_name=NO_BASELINE,
            unit=units[key],
            peak_memory=peaks.get(key),
            note=figures[key][1],
        )
        for key in names
    ]
