"""Concurrent HTTP clients against the deployment's API server: delivery reports posted as the service
posts them, and the receiver's no-op GET that the delivery cases take as their baseline."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

CONCURRENCY = 16
SIGNATURE = "sb-sig-1"  # the sandbox's signature of DLR webhook "1", which the connection names


def report_bodies(count: int, first: int = 0) -> list[bytes]:
    """``count`` distinct reports (a real campaign's: one per number), statuses mixed."""
    statuses = (3, 3, 3, 2, 12)
    return [
        json.dumps(
            {
                "date": "2026-11-24T10:00:00+01:00",
                "status": statuses[index % len(statuses)],
                "destination": f"3367{index:07d}",
                "campaign_id": 7_000_000 + index // 1000,
                "country_code": "FR",
            }
        ).encode()
        for index in range(first, first + count)
    ]


async def _load(send: Callable[[httpx.AsyncClient, int], object], count: int) -> tuple[float, list[float]]:
    """Run ``send`` for 0..count-1 over CONCURRENCY clients; the wall time and each call's latency."""
    latencies: list[float] = []
    queue = iter(range(count))

    async def worker(client: httpx.AsyncClient) -> None:
        for index in queue:
            began = time.perf_counter()
            await send(client, index)  # type: ignore[misc]
            latencies.append(time.perf_counter() - began)

    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        began = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(CONCURRENCY)))
        return time.perf_counter() - began, latencies


def post_reports(
    url: str, bodies: Sequence[bytes], signature: str = SIGNATURE
) -> tuple[float, list[float], dict[int, int]]:
    """Post every body; the wall time, the latencies and how many answers had each HTTP status."""
    statuses: dict[int, int] = {}
    headers = {"Content-Type": "application/json", "X-SMSFactor-Signature": signature}

    async def send(client: httpx.AsyncClient, index: int) -> None:
        answer = await client.post(url, content=bodies[index], headers=headers)
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1

    elapsed, latencies = asyncio.run(_load(send, len(bodies)))
    return elapsed, latencies, statuses


def get_noop(url: str, count: int) -> tuple[float, list[float]]:
    """GET a no-op endpoint ``count`` times; the wall time and the latencies."""

    async def send(client: httpx.AsyncClient, index: int) -> None:
        (await client.get(url)).raise_for_status()

    return asyncio.run(_load(send, count))
