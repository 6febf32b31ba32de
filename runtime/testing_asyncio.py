"""Test helpers for asyncio test suites: the actor host on a trio loop in a thread of its own.

The actor host (:mod:`runtime.host`) runs on trio. A test suite on asyncio
-- pytest-asyncio, or anyio's pytest plugin -- cannot run it in its own
loop, so here the host runs in a background thread on a trio loop of its
own, and the objects below carry each call there and back::

    import pytest
    from runtime.testing_asyncio import open_threaded_host, run_alarm

    @pytest.mark.asyncio
    async def test_counter_survives_hibernation(tmp_path):
        async with open_threaded_host(tmp_path / "actors") as host:
            stub = host.bind("counter", Counter).get_by_name("a")
            await stub.increment()
            await host.hibernate(stub.namespace, stub.id)   # force hibernation
            assert await stub.increment() == 2

The same objects work from a trio test, and from plain threads. What there
is, mirroring :mod:`runtime.host` and :mod:`runtime.testing`:

* :func:`threaded_host` (a plain context manager) and
  :func:`open_threaded_host` (``async with``) run a host on ``data_dir``
  with :func:`runtime.host.open_host`'s options; closing one and opening
  another on the same folder is a process restart.
* :class:`ThreadedHost` -- ``bind``, ``namespace``, ``statistics()``,
  ``is_active()``, ``await hibernate(ns, id)``, ``await hibernate_all()``;
  ``max_active=1`` makes every wake of a second actor an eviction.
* :class:`ThreadedNamespace` / :class:`ThreadedStub` -- ids and stubs;
  ``await stub.method(...)`` is one turn of the actor, as with a real stub.
* :func:`run_in_actor`, :func:`run_alarm`, :func:`list_actor_ids` -- as in
  :mod:`runtime.testing`.
* Time: the host follows trio's clock in its thread -- real time by
  default. With ``mock_clock=True`` it stands still until ``await
  host.advance(seconds)`` moves it (idle hibernation, alarms due), then
  waits until the host has done what that time asked for.
* The fixture :func:`threaded_actor_host` (synchronous, so it serves
  pytest-asyncio, anyio's plugin and pytest-trio alike) on ``tmp_path /
  "actors"``; enable it with ``pytest_plugins = ["runtime.testing_asyncio"]``
  in a ``conftest.py``, or import it into a test module.

Trade-offs of the thread (instead of the host itself on anyio, which
would run in the test's own loop): every call crosses threads twice (about
0.1 ms: ``benchmarks/bench_asyncio.py``); arguments and results pass by
reference, so actor methods must return fresh values (as for a real stub);
code passed to :func:`run_in_actor` runs in the host's trio thread, so an
async one must be written for trio (or anyio); and asyncio's test clocks do
not reach the host (use ``mock_clock``). In exchange the host is the one
production runs, untouched. The Session API itself (:class:`actors.Session`,
``SessionManager``, the providers) needs none of this: it runs under asyncio
directly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import sniffio
import trio
import trio.testing
from anyio.from_thread import BlockingPortal, start_blocking_portal

from actors.agent import Agent
from runtime.host.actor_host import ActorHost, HostStatistics, open_host
from runtime.host.ids import ActorId
from runtime.host.namespace import ActorStub, Namespace

__all__ = [
    "ThreadedHost", "ThreadedNamespace", "ThreadedStub", "list_actor_ids", "open_threaded_host", "run_alarm",
    "run_in_actor", "threaded_actor_host", "threaded_host",
]


class ThreadedHost:
    """An :class:`~runtime.host.actor_host.ActorHost` running in its own thread, used from any other.

    Made by :func:`threaded_host` / :func:`open_threaded_host`. The
    synchronous methods wait (briefly) for the host's thread; the ``async``
    ones wait in the caller's event loop, which stays free meanwhile.

    Attributes:
        host: the host itself (touch it only through :meth:`call_in_host`).
        data_dir, idle_timeout_s, max_active: the host's.
    """

    def __init__(self, portal: BlockingPortal, host: ActorHost, clock: trio.testing.MockClock | None) -> None:
        self.host = host
        self.data_dir: Path = host.data_dir
        self.idle_timeout_s = host.idle_timeout_s
        self.max_active = host.max_active
        self._portal = portal
        self._clock = clock

    def __repr__(self) -> str:
        return f"<ThreadedHost {self.data_dir}>"

    # -- in the host's thread ------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run sync ``fn`` in the host's thread and return its result (blocks this thread)."""
        call = functools.partial(self._portal.call, functools.partial(fn, *args, **kwargs))
        if not _in_trio_thread():
            return call()
        # trio refuses a blocking wait for another trio loop from a trio thread: wait in a helper thread.
        with concurrent.futures.ThreadPoolExecutor(1) as helper:
            return helper.submit(call).result()

    async def call_in_host(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``await fn(*args, **kwargs)`` (or a sync ``fn``'s result) run in the host's trio thread.

        Cancelling the caller cancels ``fn`` there; an actor turn it waits for
        goes on, as when a caller of the host itself is cancelled.
        """

        async def run() -> Any:
            result = fn(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        if sniffio.current_async_library() == "asyncio":
            return await asyncio.wrap_future(self._portal.start_task_soon(run))
        future = await anyio.to_thread.run_sync(self._portal.start_task_soon, run)
        try:
            return await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            future.cancel()
            raise

    # -- the host's API ------------------------------------------------------------------

    def bind(self, name: str, agent_class: type[Agent], *, env: Any = None) -> ThreadedNamespace:
        """Bind ``agent_class`` as namespace ``name`` (see ``ActorHost.bind``)."""
        return ThreadedNamespace(self, self._call(self.host.bind, name, agent_class, env=env))

    def namespace(self, name: str) -> ThreadedNamespace:
        """The namespace bound as ``name`` (raises ``UnknownNamespaceError``)."""
        return ThreadedNamespace(self, self._call(self.host.namespace, name))

    def statistics(self) -> HostStatistics:
        """The host's statistics now (activations, hibernations, evictions, alarms_run, ...)."""
        return self._call(self.host.statistics)

    def is_active(self, namespace: str | ThreadedNamespace, actor_id: ActorId | str) -> bool:
        """``True`` while the actor has a live instance."""
        return self._call(self.host.is_active, _namespace(namespace), actor_id)

    async def hibernate(self, namespace: str | ThreadedNamespace, actor_id: ActorId | str) -> bool:
        """Hibernate one actor after its pending calls; ``True`` if it was active."""
        return await self.call_in_host(self.host.hibernate, _namespace(namespace), actor_id)

    async def hibernate_all(self) -> int:
        """Hibernate every active actor; how many were."""
        return await self.call_in_host(self.host.hibernate_all)

    async def advance(self, seconds: float) -> None:
        """Move the host's clock ``seconds`` on, then wait until its tasks are idle again.

        Raises:
            RuntimeError: the host was not started with ``mock_clock=True``.
            ValueError: ``seconds`` is negative.
        """
        clock = self._clock
        if clock is None:
            raise RuntimeError("advance() needs a host started with mock_clock=True")
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, not {seconds!r}")

        async def jump() -> None:
            clock.jump(seconds)
            await trio.testing.wait_all_tasks_blocked()

        await self.call_in_host(jump)


class ThreadedNamespace:
    """A bound namespace: ids (computed here, no thread hop) and :class:`ThreadedStub` objects."""

    def __init__(self, host: ThreadedHost, namespace: Namespace) -> None:
        self.host = host
        self.namespace = namespace
        self.name = namespace.name
        self.agent_class = namespace.agent_class

    def __repr__(self) -> str:
        return f"<ThreadedNamespace {self.name} ({self.agent_class.__qualname__})>"

    def id_from_name(self, name: str) -> ActorId:
        return self.namespace.id_from_name(name)

    def new_unique_id(self) -> ActorId:
        return self.namespace.new_unique_id()

    def id_from_string(self, text: str) -> ActorId:
        return self.namespace.id_from_string(text)

    def get(self, actor_id: ActorId | str) -> ThreadedStub:
        """A stub for ``actor_id`` (raises ``InvalidActorIdError`` as ``Namespace.get``)."""
        return ThreadedStub(self, self.namespace.get(actor_id))

    def get_by_name(self, name: str) -> ThreadedStub:
        return ThreadedStub(self, self.namespace.get_by_name(name))

    def list_ids(self) -> list[ActorId]:
        """Ids of every actor with a file on disk, sorted by hex."""
        return self.namespace.list_ids()


class ThreadedStub:
    """A handle on one actor: ``await stub.call("method", ...)`` or ``await stub.method(...)``,
    each one turn of the actor in the host's thread (errors raised here as there)."""

    __slots__ = ("_stub", "id", "namespace")

    def __init__(self, namespace: ThreadedNamespace, stub: ActorStub) -> None:
        self.namespace = namespace
        self.id = stub.id
        self._stub = stub

    async def call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        """Run ``method`` on the actor (see ``Namespace.call``)."""
        return await self.namespace.host.call_in_host(self._stub.call, method, *args, **kwargs)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return functools.partial(self.call, name)

    def __repr__(self) -> str:
        return f"<ThreadedStub {self.namespace.name}/{self.id.hex}>"


def _namespace(value: str | ThreadedNamespace | Namespace) -> str | Namespace:
    return value.namespace if isinstance(value, ThreadedNamespace) else value


def _in_trio_thread() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


# -- starting a host -------------------------------------------------------------------------


@contextmanager
def threaded_host(
    data_dir: str | Path, *, mock_clock: bool = False, **options: Any
) -> Iterator[ThreadedHost]:
    """``with threaded_host(data_dir) as host:`` -- a host on ``data_dir`` in a thread of its own.

    Args:
        data_dir: the host's folder (created if missing).
        mock_clock: freeze the host's trio clock (``trio.testing.MockClock``
            with rate 0): idle timeouts and alarms wait for
            :meth:`ThreadedHost.advance`.
        options: passed to :func:`runtime.host.open_host` (``idle_timeout_s``,
            ``max_active``, ``durability``, ``max_pending_calls``, ``clock``).

    On exit the host closes as ``open_host`` closes (running calls are
    cancelled, files closed, alarms kept) and the thread ends.

    Raises:
        ValueError: a bad option (``open_host``'s errors).
    """
    clock = trio.testing.MockClock(rate=0) if mock_clock else None
    with (start_blocking_portal("trio", {"clock": clock} if clock else None, name="durable-sessions-host") as portal,
          portal.wrap_async_context_manager(open_host(data_dir, **options)) as host):
        yield ThreadedHost(portal, host, clock)


@asynccontextmanager
async def open_threaded_host(
    data_dir: str | Path, *, mock_clock: bool = False, **options: Any
) -> AsyncIterator[ThreadedHost]:
    """``async with open_threaded_host(data_dir) as host:`` -- :func:`threaded_host` without
    blocking the caller's loop while the thread starts and stops."""
    manager = threaded_host(data_dir, mock_clock=mock_clock, **options)
    host = await anyio.to_thread.run_sync(manager.__enter__)
    try:
        yield host
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(manager.__exit__, None, None, None)


@pytest.fixture
def threaded_actor_host(tmp_path: Path) -> Iterator[ThreadedHost]:
    """A :class:`ThreadedHost` on ``tmp_path / "actors"`` (defaults: 30 s idle timeout, real clock)."""
    with threaded_host(tmp_path / "actors") as host:
        yield host


# -- helpers as in runtime.testing --------------------------------------------------------------


async def run_in_actor(stub: ThreadedStub, fn: Callable[[Agent], Any]) -> Any:
    """Run ``fn(agent)`` inside the actor as one of its turns (in the host's thread); its result.

    ``fn`` may be sync or async (then it runs under trio). See
    :func:`runtime.testing.run_in_actor`.
    """
    from runtime.testing import run_in_actor as run_there

    return await stub.namespace.host.call_in_host(run_there, stub._stub, fn)


async def run_alarm(stub: ThreadedStub) -> bool:
    """Fire the actor's alarm now, whatever its time; ``False`` if none is set (see :func:`runtime.testing.run_alarm`)."""
    return await stub.namespace.host.call_in_host(stub.namespace.host.host.deliver_alarm, stub.id, force=True)


def list_actor_ids(namespace: ThreadedNamespace) -> list[ActorId]:
    """Ids of every actor of ``namespace`` that has a file on disk, sorted by hex."""
    return namespace.list_ids()
