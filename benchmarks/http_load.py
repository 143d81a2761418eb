"""Concurrent HTTP clients against the deployment's API server: delivery reports posted as the service
posts them, and the receiver's no-op GET that the delivery cases take as their baseline."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

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


def post_bodies(
    url: str, bodies: Sequence[bytes], headers: Mapping[str, str]
) -> tuple[float, list[float], list[httpx.Response]]:
    """POST every JSON body with ``headers``; the wall time, the latencies and each body's answer."""
    answers: dict[int, httpx.Response] = {}
    headers = {"Content-Type": "application/json", **headers}

    async def send(client: httpx.AsyncClient, index: int) -> None:
        answers[index] = await client.post(url, content=bodies[index], headers=headers)

    elapsed, latencies = asyncio.run(_load(send, len(bodies)))
    return elapsed, latencies, [answers[index] for index in range(len(bodies))]


def post_reports(
    url: str, bodies: Sequence[bytes], signature: str = SIGNATURE
) -> tuple[float, list[float], dict[int, int]]:
    """Post every report; the wall time, the latencies and how many answers had each HTTP status."""
    elapsed, latencies, answers = post_bodies(url, bodies, {"X-SMSFactor-Signature": signature})
    return elapsed, latencies, dict(Counter(answer.status_code for answer in answers))


def get_noop(url: str, count: int) -> tuple[float, list[float]]:
    """GET a no-op endpoint ``count`` times; the wall time and the latencies."""

    async def send(client: httpx.AsyncClient, index: int) -> None:
        (await client.get(url)).raise_for_status()

    return asyncio.run(_load(send, count))
