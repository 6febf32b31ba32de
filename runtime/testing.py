"""Helpers for testing actors with pytest-trio (usable in your own tests).

Enable the fixtures in a ``conftest.py`` with ``pytest_plugins =
["runtime.testing"]`` (or import them into a test module), and run tests
under trio (``trio_mode = true``)::

    async def test_counter_survives_hibernation(actor_host):
        ns = actor_host.bind("counter", Counter)
        stub = ns.get_by_name("a")
        await stub.increment()
        await actor_host.hibernate(ns, stub.id)
        assert await stub.increment() == 2

Idle timeouts and alarms follow trio's clock: take pytest-trio's
``autojump_clock`` fixture and an hour of idleness passes at once. Virtual
time stays honest: under a ``MockClock`` the host does its blocking steps
(a hibernation's WAL checkpoint) on the trio thread instead of a worker
thread, so the clock never jumps past a due alarm while it waits
(:mod:`runtime.host.offload`).

The host itself offers the controls: ``await host.hibernate(ns, id)``,
``await host.hibernate_all()``, ``host.is_active(ns, id)`` and
``host.statistics()``. Reopening ``open_host`` on the same
``actor_data_dir`` simulates a process restart (pass the same
:class:`~runtime.host.alarms.HostClock` to keep epoch time continuous).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from actors.agent import Agent
from runtime.host.actor_host import ActorHost, open_host
from runtime.host.ids import ActorId
from runtime.host.namespace import ActorStub, Namespace

__all__ = ["actor_data_dir", "actor_host", "list_actor_ids", "run_alarm", "run_in_actor"]


@pytest.fixture
def actor_data_dir(tmp_path: Path) -> Path:
    """A fresh folder for actor files (``tmp_path / "actors"``)."""
    return tmp_path / "actors"


@pytest.fixture
async def actor_host(actor_data_dir: Path) -> AsyncIterator[ActorHost]:
    """A running :class:`ActorHost` on ``actor_data_dir`` (defaults: 30 s idle timeout)."""
    async with open_host(actor_data_dir) as host:
        yield host


async def run_in_actor(stub: ActorStub, fn: Callable[[Agent], Any]) -> Any:
    """Run ``fn(agent)`` inside the actor, as one of its turns; return its result.

    ``fn`` may be sync or async and sees the live instance (and
    ``agent.storage``). The actor is woken if it sleeps. The same rules as for
    calls apply: a transaction left open is rolled back and raises.
    """

    async def invoke(agent: Agent) -> Any:
        result = fn(agent)
        return await result if inspect.isawaitable(result) else result

    return await stub.namespace.host.run_turn(stub.id, invoke)


async def run_alarm(stub: ActorStub) -> bool:
    """Fire the actor's alarm now, whatever its time; ``False`` if none is set.

    On success the alarm is removed (unless the handler set another). When
    ``alarm()`` raises, the retry is scheduled as usual and the error propagates.
    """
    return await stub.namespace.host.deliver_alarm(stub.id, force=True)


def list_actor_ids(namespace: Namespace) -> list[ActorId]:
    """Ids of every actor of ``namespace`` that has a file on disk, sorted by hex."""
    return namespace.list_ids()
