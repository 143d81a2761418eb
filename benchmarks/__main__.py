"""Command line: ``python -m benchmarks [--quick] [--output PATH] [--dag PATH] [--only CASE ...]``."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import (
    cases_campaign,
    cases_campaigns_page,
    cases_codec,
    cases_delivery,
    cases_http,
    cases_send_cost,
    cases_startup,
    cases_triggers,
)
from benchmarks.harness import Record, format_notes, format_table

if TYPE_CHECKING:
    from collections.abc import Callable

RESULTS = Path(__file__).resolve().parent / "results.json"


@dataclass(frozen=True)
class Sizes:
    """How big each case is and how many repetitions each side gets."""

    numbers: int
    npai: int
    calls: int
    recipients: int
    webhook_triggers: int
    npai_triggers: int
    npai_entries: int
    rounds: int
    reps: int
    http_reps: int
    process_reps: int
    parse_reps: int
    reports: int
    campaigns: int


FULL = Sizes(
    numbers=1_000_000,
    npai=100_000,
    calls=2_000,
    recipients=1_000_000,
    webhook_triggers=1_000,
    npai_triggers=200,
    npai_entries=5_000,
    rounds=3,
    reps=5,
    http_reps=3,
    process_reps=7,
    # The provider's share of a parse is no bigger than what a minimum of 7 parses moves between runs.
    parse_reps=15,
    reports=10_000,
    campaigns=10_000,
)
# Small sizes and few repetitions: a smoke check that every case runs, never a measurement.
QUICK = Sizes(
    numbers=50_000,
    npai=5_000,
    calls=100,
    recipients=5_000,
    webhook_triggers=20,
    npai_triggers=5,
    npai_entries=500,
    rounds=2,
    reps=2,
    http_reps=1,
    process_reps=2,
    parse_reps=2,
    reports=0,
    campaigns=0,
)
# The delivery group at quick size, only when `--only delivery` names it: it starts a whole deployment,
# which a quick run of every group (`make test`'s smoke check) does not.
QUICK_DELIVERY = {"reports": 400, "campaigns": 200}
# Longest the triggers' load may run before the case fails (seconds).
TRIGGERS_DEADLINE = 600.0


def cases(sizes: Sizes, dag: Path) -> dict[str, Callable[[], list[Record]]]:
    """Every group of cases, by the name ``--only`` takes."""
    return {
        "encode": lambda: cases_codec.encode_cases(sizes.numbers, sizes.reps),
        "decode": lambda: cases_codec.decode_cases(sizes.npai, sizes.reps),
        "http": lambda: cases_http.webhook_cases(sizes.calls, sizes.http_reps),
        "send": lambda: cases_campaign.million_send_cases(sizes.recipients, sizes.http_reps),
        "sendcost": lambda: cases_send_cost.send_cost_cases(sizes.process_reps),
        "triggers": lambda: cases_triggers.trigger_cases(
            sizes.webhook_triggers, sizes.npai_triggers, sizes.npai_entries, sizes.rounds, TRIGGERS_DEADLINE
        ),
        "import": lambda: [
            cases_startup.import_case(sizes.process_reps),
            cases_startup.own_import_case(sizes.process_reps),
        ],
        "dag": lambda: cases_startup.dag_parse_cases(dag, sizes.parse_reps),
        "delivery": lambda: delivery_cases(sizes),
    }


def delivery_cases(sizes: Sizes) -> list[Record]:
    """The cases on the deployment (the delivery-report receiver, the claims through its API server): too
    heavy to start for a quick run of every group."""
    if sizes.reports == 0:
        reason = "quick run of every group (it starts a whole deployment: --quick --only delivery runs it)"
        return [
            *cases_delivery.skipped_records(FULL.reports, reason),
            *cases_campaigns_page.skipped_records(FULL.campaigns, 100 * FULL.reports, reason),
        ]
    return cases_delivery.delivery_report_cases(
        sizes.reports, sizes.campaigns, sizes.http_reps, sizes.process_reps
    )


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    model = platform.processor() or platform.machine()
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True, timeout=10).stdout
        model = next(
            (line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")),
            model,
        )
    except (OSError, subprocess.SubprocessError):
        pass  # not Linux: keep what platform says
    return {
        "cpus": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
    }


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the table, write the results; exit status 0 even when a target is missed.

    :param argv: command-line arguments (``sys.argv[1:]`` when None).
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes and few repetitions (smoke check)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"results file (default {RESULTS})")
    parser.add_argument(
        "--dag", type=Path, default=None, help="DAG file for the parse case (default: the example DAG)"
    )
    parser.add_argument("--only", nargs="+", metavar="CASE", help="run only these groups of cases")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.quick and args.only and "delivery" in args.only:
        sizes = replace(sizes, **QUICK_DELIVERY)
    groups = cases(sizes, (args.dag or cases_startup.EXAMPLE_DAG).resolve())
    unknown = set(args.only or ()) - groups.keys()
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; choose from {sorted(groups)}")
    started = time.perf_counter()
    records: list[Record] = []
    for name, run in groups.items():
        if args.only and name not in args.only:
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        records.extend(run())
    elapsed = time.perf_counter() - started
    info = machine()
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "machine": info,
        "seconds": round(elapsed, 1),
        "results": [row.as_json() for row in records],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"\n{result['mode']} run, {result['date']}, {info['cpus']} CPUs ({info['cpu']}), "
        f"Python {info['python']}, {elapsed:.0f} s\n"
    )
    print(format_table(records))
    print()
    print(format_notes(records))
    missed = [row.name for row in records if row.met is False]
    print(f"\ntargets missed: {', '.join(missed)}" if missed else "\nevery measured target met")
    print(f"results written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
