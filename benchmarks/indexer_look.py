"""Time the campaign indexer's look, as the API server makes it every 5 s, for the campaigns-page bench.

    python -m benchmarks.indexer_look [--looks 40]

Run with the deployment's Airflow environment (its metadata database). Each look is the indexer's own
(``index_records`` in a session of Airflow's); the indexer's row is locked first, waiting if the API
server's indexer holds it, so that every look timed reads the XCom table (a look that finds the row
locked reads nothing). Each look is rolled back: the cursor stays where it was. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.indexer_look", description=__doc__)
    parser.add_argument("--looks", type=int, default=40)
    args = parser.parse_args()

    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider_sms.campaigns.indexer import INDEXER, index_records
    from airflow_provider_sms.campaigns.tables import campaign_indexer_table

    table = campaign_indexer_table.c
    times: list[float] = []
    written = 0
    for look in range(args.looks + 1):
        with create_session(scoped=False) as session:
            # Held for this transaction; the look's own lock (skip locked) then finds it ours.
            session.execute(select(table.read_until).where(table.name == INDEXER).with_for_update()).one()
            began = time.perf_counter()
            written += index_records(session)
            elapsed = time.perf_counter() - began
            session.rollback()
        if look:  # the first look warms the pool and SQLAlchemy's statement cache
            times.append(elapsed * 1000)
    print(
        json.dumps(
            {
                "median_ms": statistics.median(times),
                "min_ms": min(times),
                "looks": len(times),
                "written": written,
            }
        )
    )


if __name__ == "__main__":
    main()
