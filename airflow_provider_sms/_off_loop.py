"""Internal: CPU work of the async hook and the triggers, run off the event loop in one worker thread.

Decoding a page of the NPAI list or filtering a long one takes milliseconds to seconds: done in the
triggerer's event loop, it would stall every other trigger. ``asyncio.to_thread`` would run it in the
loop's default executor, whose several threads (six on two cores) then contend with the loop's own
thread for the GIL: with a hundred NPAI sensors polling at once, the loop waited hundreds of
milliseconds for it between two steps. One thread of our own (CPU-bound Python code gains nothing
from more under the GIL) leaves the loop one contender, so it gets the GIL back within the
interpreter's switch interval (5 ms).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="airflow_provider_sms")


async def off_loop(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``func(*args, **kwargs)`` in the worker thread, with the caller's context variables (as to_thread)."""
    call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_worker, call)
