"""Store a campaign's delivery reports as the receiver does, for the scale cases of the delivery bench.

    python -m benchmarks.report_loader <conn_id> <campaign_id> <numbers> <prefix> [--sent-share 0.1]

Run with the deployment's Airflow environment (its metadata database). Each report is decoded by the
receiver's codec and stored by the receiver's own write (``write_reports``: one INSERT and one commit per
chunk, as a busy group commit does); the API server's flusher then puts them in batches. A share of the
numbers gets a "sent" report before its final one, the others only a final one; finals are 80 %
delivered, 10 % not delivered, 10 % expired. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

SENT, FINALS, FINAL_WEIGHTS = 1, (3, 2, 12), (8, 1, 1)
# The service sends a million numbers in about an hour; each number's reports follow its send.
SECONDS_PER_NUMBER = 3600 / 1_000_000
# When the campaign was sent: its first number's reports are dated 5 s later.
SENT_AT = datetime(2026, 11, 24, 9, 0, tzinfo=timezone.utc)


def campaign_bodies(campaign_id: int, numbers: int, prefix: str, sent_share: float) -> Iterator[bytes]:
    """The campaign's report bodies, number after number (same seed, same campaign)."""
    rng = random.Random(campaign_id)
    for index in range(numbers):
        sent_at = SENT_AT + timedelta(seconds=index * SECONDS_PER_NUMBER)
        statuses = [SENT] if rng.random() < sent_share else []
        statuses.append(rng.choices(FINALS, weights=FINAL_WEIGHTS)[0])
        for step, status in enumerate(statuses):
            yield json.dumps(
                {
                    "date": (sent_at + timedelta(seconds=5 + 300 * step)).isoformat(),
                    "status": status,
                    "destination": f"{prefix}{index:08d}",
                    "campaign_id": campaign_id,
                    "country_code": "FR",
                }
            ).encode()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report_loader", description=__doc__)
    parser.add_argument("conn_id")
    parser.add_argument("campaign_id", type=int)
    parser.add_argument("numbers", type=int)
    parser.add_argument("prefix", help="the numbers' first digits (each number adds 8)")
    parser.add_argument("--sent-share", type=float, default=0.1)
    parser.add_argument("--chunk", type=int, default=5000, help="reports per commit")
    args = parser.parse_args()

    from airflow_provider_sms import codec
    from airflow_provider_sms.delivery_reports.ingest import write_reports

    began = time.perf_counter()
    flush_rows: set[str] = set()
    stored = duplicates = 0
    chunk: list[tuple[str, object]] = []
    bodies = campaign_bodies(args.campaign_id, args.numbers, args.prefix, args.sent_share)
    for body in itertools.chain(bodies, [None]):
        if body is not None:
            chunk.append((args.conn_id, codec.decode_delivery_report(body)))
        if chunk and (body is None or len(chunk) == args.chunk):
            new = write_reports(chunk, flush_rows)  # type: ignore[arg-type]
            stored += sum(new)
            duplicates += len(new) - sum(new)
            chunk = []
    seconds = time.perf_counter() - began
    print(json.dumps({"stored": stored, "duplicates": duplicates, "seconds": round(seconds, 1)}))


if __name__ == "__main__":
    main()
