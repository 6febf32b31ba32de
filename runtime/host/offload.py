"""Blocking work off the trio thread, with virtual time kept honest under a ``MockClock``.

The host moves a few blocking steps (a hibernated actor's WAL checkpoint)
to a worker thread so the event loop keeps serving. Under trio's
``MockClock`` with autojump on -- the documented way to test an agent
(``docs/behaviours.md``, ``runtime.testing``) -- a task waiting for a
thread looks idle, so the clock jumps to the next deadline while the
thread works: an alarm due in 30 s would be seen minutes late. Under any
``MockClock`` :func:`run_sync_off_loop` therefore runs the function on
the trio thread itself: virtual time stands still while it runs, exactly
as it does for every synchronous storage call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import trio
import trio.testing

__all__ = ["run_sync_off_loop", "virtual_time"]

T = TypeVar("T")


def virtual_time() -> bool:
    """Whether the running trio loop keeps time with a ``trio.testing.MockClock``."""
    return isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock)


async def run_sync_off_loop(fn: Callable[[], T], *, limiter: trio.CapacityLimiter | None = None) -> T:
    """``fn()`` on a worker thread (at most ``limiter``'s total at once), or inline under a ``MockClock``.

    Raises:
        whatever ``fn`` raises.
    """
    if virtual_time():
        await trio.lowlevel.checkpoint()
        return fn()
    return await trio.to_thread.run_sync(fn, limiter=limiter)
