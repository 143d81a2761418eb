"""The deferred-sensors load, run in a fresh interpreter: ``python -m benchmarks.trigger_load PLAN``.

Builds ``webhooks`` :class:`SmsWebhookTrigger` and ``npai`` :class:`SmsNpaiTrigger` from their
``serialize()`` output, as Airflow's triggerer does, and runs each one's real ``run()`` in a task of
one asyncio event loop until every trigger has polled ``rounds`` times; then cancels them all, as the
triggerer does when it stops, and waits for their clean-up. Meanwhile it measures:

- the event loop's lag: a ticker task asks to wake every 10 ms and records how late it woke (Airflow's
  triggerer warns when its own 100 ms ticker wakes more than 0.2 s late), and the same lag less the
  garbage collector's full collections that fell within it (:class:`FullCollections`);
- the sockets the triggers hold: a sampler thread counts the process's sockets in ``/proc/self/fd``
  every 50 ms, less those open before the triggers started (the loop's own self-pipe);
- the peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs`` once the triggerer's and the
  triggers' modules are imported, so that only what running them costs is counted);
- the process's CPU time (every thread: the decodes run in worker threads).

The triggerer's own module is imported first, as it is in a triggerer: it loads the Task SDK's
supervisor and the rest of what the first connection lookup would otherwise import inside the loop.
Polls are counted by wrapping each trigger's ``poll`` method (``run()`` calls it once per poll).
Prints one JSON line. ``PLAN`` is JSON: ``conn_id``, ``webhooks``, ``npai``, ``rounds``, ``interval``
and ``deadline`` (seconds: the run fails rather than go on past it).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import resource
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import airflow.jobs.triggerer_job_runner  # noqa: F401  (what a triggerer process has loaded)

from airflow_provider_sms.triggers.sms import SmsNpaiTrigger, SmsPollingTrigger, SmsWebhookTrigger
from benchmarks.proc import open_sockets, reset_peak_rss, status_bytes

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from airflow.triggers.base import BaseTrigger

# The ticker's period: short enough to see a 10 ms stall, long enough to cost the loop nothing.
TICK = 0.01
# Campaign ids no seeded NPAI entry has: the NPAI triggers never find what they wait for.
ABSENT_CAMPAIGN = 10**9
# A status no seeded webhook has: the webhook triggers keep polling.
NEVER = "disabled"


class SocketSampler(threading.Thread):
    """Samples :func:`open_sockets` every 50 ms in its own thread (readlink releases the GIL)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            self.peak = max(self.peak, open_sockets())


def rebuilt(trigger: BaseTrigger) -> BaseTrigger:
    """The trigger as the triggerer makes it: from its classpath and serialized keyword arguments."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    cls: type[BaseTrigger] = getattr(importlib.import_module(module), name)
    return cls(**json.loads(json.dumps(kwargs)))


def counted(trigger: SmsPollingTrigger, polls: list[int], errors: list[int], index: int) -> None:
    """Count each poll of ``trigger`` (and those that raised) in ``polls[index]`` / ``errors[index]``."""
    poll: Callable[[Any], Awaitable[dict[str, Any] | None]] = trigger.poll

    async def counting(hook: Any) -> dict[str, Any] | None:
        try:
            return await poll(hook)
        except Exception:
            errors[index] += 1
            raise
        finally:
            polls[index] += 1

    trigger.poll = counting  # type: ignore[method-assign]


class FullCollections:
    """When the garbage collector made full (generation 2) collections: ``(start, end)`` times.

    A full collection walks every tracked object of the process, Airflow's included: its pause
    grows with the heap, not with what the triggers do.
    """

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.spans.append((self._start, time.perf_counter()))

    def within(self, start: float, end: float) -> float:
        """Seconds of full collections between ``start`` and ``end``."""
        return sum(max(0.0, min(end, stop) - max(start, begin)) for begin, stop in self.spans)


class LongestSteps:
    """The event loop's longest single steps: one callback each (a task's run from one await to the next).

    The loop lag says how late the loop came back to a task; this says whether one step held it that
    long (what Airflow's triggerer warns about as a trigger blocking the loop) or many short ones did.
    """

    def __init__(self, collections: FullCollections) -> None:
        self.collections = collections
        self.count = 0
        self.max_seconds = 0.0
        # The longest step less the full collections within it, and what it ran.
        self.max_between = 0.0
        self.longest = ""
        self._original = asyncio.events.Handle._run

    def __enter__(self) -> LongestSteps:
        original, steps = self._original, self
        # Only the triggers' loop: a library may run a loop of its own in another thread.
        loop_thread = threading.get_ident()

        def timed(handle: asyncio.events.Handle) -> None:
            if threading.get_ident() != loop_thread:
                original(handle)
                return
            began = time.perf_counter()
            try:
                original(handle)
            finally:
                ended = time.perf_counter()
                steps.add(handle, began, ended)

        asyncio.events.Handle._run = timed  # type: ignore[method-assign, assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.events.Handle._run = self._original  # type: ignore[method-assign]

    def add(self, handle: asyncio.events.Handle, began: float, ended: float) -> None:
        self.count += 1
        seconds = ended - began
        between = seconds - self.collections.within(began, ended)
        self.max_seconds = max(self.max_seconds, seconds)
        if between > self.max_between:
            self.max_between, self.longest = between, repr(handle)[:200]


async def ticker(ticks: list[tuple[float, float]], stop: asyncio.Event) -> None:
    """Record ``(asked, woke)`` of a task that asks to sleep :data:`TICK` seconds, again and again."""
    while not stop.is_set():
        asked = time.perf_counter()
        await asyncio.sleep(TICK)
        ticks.append((asked, time.perf_counter()))


async def drive(plan: dict[str, Any]) -> dict[str, Any]:
    """Run the triggers for ``plan['rounds']`` polls each; return the figures."""
    conn_id, interval = plan["conn_id"], plan["interval"]
    triggers: list[BaseTrigger] = [
        rebuilt(
            SmsWebhookTrigger(
                webhook_id=str(1 + index), expected_status=NEVER, sms_conn_id=conn_id, poke_interval=interval
            )
        )
        for index in range(plan["webhooks"])
    ] + [
        rebuilt(
            SmsNpaiTrigger(campaign_id=ABSENT_CAMPAIGN + index, sms_conn_id=conn_id, poke_interval=interval)
        )
        for index in range(plan["npai"])
    ]
    polls = [0] * len(triggers)
    errors = [0] * len(triggers)
    for index, trigger in enumerate(triggers):
        assert isinstance(trigger, SmsPollingTrigger)
        counted(trigger, polls, errors, index)
    events: list[Any] = []

    async def run_trigger(trigger: BaseTrigger) -> None:
        # What the triggerer's run_trigger does: iterate run(), then always call cleanup().
        try:
            async for event in trigger.run():
                events.append(event.payload)
        finally:
            await trigger.cleanup()

    # The loop's own sockets (its self-pipe) and any other of the process are not the triggers'.
    sockets_before = open_sockets()
    ticks: list[tuple[float, float]] = []
    collections = FullCollections()
    gc.callbacks.append(collections)
    stop = asyncio.Event()
    # Every step of the loop is timed while the triggers run (a small cost the lag includes).
    with LongestSteps(collections) as steps:
        tick = asyncio.create_task(ticker(ticks, stop))
        sampler = SocketSampler()
        sampler.start()
        cpu_start = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        tasks = []
        for trigger in triggers:
            # As the triggerer's create_triggers(): it yields to the loop before creating each trigger.
            await asyncio.sleep(0)
            tasks.append(asyncio.create_task(run_trigger(trigger)))
        while min(polls) < plan["rounds"] and not all(task.done() for task in tasks):
            if time.perf_counter() - started > plan["deadline"]:
                raise RuntimeError(
                    f"not done in {plan['deadline']} s: {sum(polls)} polls made, fewest {min(polls)} "
                    f"of {plan['rounds']} rounds"
                )
            await asyncio.sleep(0.1)
        cpu_end = resource.getrusage(resource.RUSAGE_SELF)
        seconds = time.perf_counter() - started
        made = sum(polls)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stop.set()
        await tick
    sampler.done.set()
    sampler.join()
    gc.callbacks.remove(collections)
    lags = [woke - asked - TICK for asked, woke in ticks]
    # The same lags less the full collections that fell within them.
    lags_between = [woke - asked - TICK - collections.within(asked, woke) for asked, woke in ticks]
    pauses = [end - start for start, end in collections.spans]
    cpu = (cpu_end.ru_utime - cpu_start.ru_utime) + (cpu_end.ru_stime - cpu_start.ru_stime)
    return {
        "triggers": len(triggers),
        "polls": made,
        "poll_errors": sum(errors),
        "events": events[:5],
        "event_count": len(events),
        "seconds": seconds,
        "cpu_per_poll": cpu / made if made else None,
        "lag_max": max(lags, default=0.0),
        "lag_max_between_collections": max(lags_between, default=0.0),
        "lags_over_200ms": sum(lag > 0.2 for lag in lags),
        "steps": steps.count,
        "step_max": steps.max_seconds,
        "step_max_between_collections": steps.max_between,
        "longest_step": steps.longest,
        "full_collections": len(pauses),
        "full_collection_max": max(pauses, default=0.0),
        "tracked_objects": len(gc.get_objects()),
        "sockets_peak": sampler.peak - sockets_before,
    }


def main() -> int:
    """Run the plan given as the first argument and print the figures as one JSON line."""
    plan = json.loads(sys.argv[1])
    if plan.get("freeze"):
        # What Airflow's DAG processor does after start-up: its objects leave every later collection.
        gc.collect()
        gc.freeze()
    base = status_bytes("VmRSS")
    reset_peak_rss()
    figures = asyncio.run(drive(plan))
    figures["rss_base"] = base
    figures["rss_growth"] = status_bytes("VmHWM") - base
    # The loop is closed: every client of the triggers must have been closed with it.
    figures["sockets_after"] = open_sockets()
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
