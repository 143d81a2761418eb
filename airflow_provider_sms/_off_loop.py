"""Internal: CPU work of the async hook and the triggers, run off the event loop in one worker thread.

Decoding a page of the NPAI list or filtering a long one can take long enough that, done in the
triggerer's event loop, it would stall every other trigger. ``asyncio.to_thread`` would run it in the
loop's default executor, whose several threads then contend with the loop's own thread for the GIL:
with many NPAI sensors polling at once, the loop waited for it between two steps far longer than any
step took. One thread of our own (CPU-bound Python code gains nothing from more under the GIL) leaves
the loop one contender, so it gets the GIL back within the interpreter's switch interval.

Short work stays in the loop (``inline=True``, the caller's estimate against :data:`QUICK`): while the
thread runs, the loop waits for the GIL again after each of its own system calls, so a trip to the
thread costs the loop more than short work done in place. Many NPAI sensors sharing one
read, each handing a short filter to the thread, stalled the loop longer than the filters took in it.
The figures are in docs/performance.md ("The loop lag").
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

# Seconds of work below which running it in the event loop costs the other tasks less than the thread.
QUICK = 0.002

_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="airflow_provider_sms")


async def off_loop(func: Callable[..., T], /, *args: Any, inline: bool = False, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` in the worker thread, with the caller's context variables (as to_thread).

    :param inline: run it here instead: the caller expects it to take less than :data:`QUICK`.
    """
    if inline:
        return func(*args, **kwargs)
    call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_worker, call)
