"""A real :class:`actors.Agent` on a fake runtime context, with one recording WebSocket peer.

Tests of the Session API need an Agent-like target for ``Session.create`` and
``SessionManager.create``: something with ``.storage`` and ``.broadcast``.
:class:`RecordingAgent` is the real base class (its ``broadcast`` is the code
the runtime runs) on a :class:`FakeContext` that implements
:class:`actors.agent.AgentContext` over a real SQLite file. Its one peer, a
:class:`RecordingConnection`, keeps every frame it was sent::

    agent = RecordingAgent(storage)
    session = Session.create(agent).for_session("s1")
    await session.append_message(...)
    agent.take()      # -> ['{"type":"cf_agent_session","phase":"idle",...}'] (and forgets them)
    agent.payloads    # -> the frames still held, decoded from JSON

The ``recording_agent`` fixture (tests/conftest.py) gives one on the
``storage`` fixture's file.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from actors import Agent
from storage import SqlStorage

T = TypeVar("T")


class RecordingConnection:
    """A WebSocket peer (:class:`actors.agent.ConnectionLike`) that keeps what it is sent.

    Args:
        conn_id: the peer's ``id``.
        fail: when true, ``send`` raises ``ConnectionError("gone")`` (a peer
            that went away) and records nothing.
    """

    def __init__(self, conn_id: str = "peer", *, fail: bool = False) -> None:
        self.id = conn_id
        self.fail = fail
        #: Every frame sent, in order (``str`` text frames, ``bytes`` binary frames).
        self.sent: list[str | bytes] = []

    def send(self, message: str | bytes) -> None:
        if self.fail:
            raise ConnectionError("gone")
        self.sent.append(message)


@dataclass(frozen=True, slots=True)
class FakeActorId:
    """What ``ctx.id`` offers (:class:`actors.agent.ActorIdLike`)."""

    namespace: str = "test"
    hex: str = "0" * 64
    name: str | None = None

    def __str__(self) -> str:
        return self.hex


class FakeContext:
    """The runtime's side of an actor (:class:`actors.agent.AgentContext`) without a host.

    Args:
        storage: the actor's file (a real ``SqlStorage`` or ``ActorStorage``).
        connections: the open peers ``get_connections()`` returns, in order.
    """

    def __init__(self, storage: SqlStorage, connections: Sequence[Any] = ()) -> None:
        self.id = FakeActorId()
        self.storage = storage
        self.connections = list(connections)

    async def block_concurrency_while(self, fn: Callable[[], Awaitable[T]]) -> T:
        # One caller at a time is all a test without a host has.
        return await fn()

    def get_connections(self) -> tuple[Any, ...]:
        return tuple(self.connections)

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def quiet_writes(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


class RecordingAgent(Agent):
    """An :class:`actors.Agent` on ``storage`` whose broadcasts reach one :class:`RecordingConnection`.

    Args:
        storage: the actor's file.
        connection: the peer to record into; pass the same one to a new
            agent on a reopened file to keep one record across activations,
            as the host holds peers across hibernation. A new peer by default.
    """

    def __init__(self, storage: SqlStorage, connection: RecordingConnection | None = None) -> None:
        self.connection = RecordingConnection() if connection is None else connection
        super().__init__(FakeContext(storage, [self.connection]))

    @property
    def sent(self) -> list[str | bytes]:
        """Every frame broadcast so far (the list itself: ``clear()`` it to start over)."""
        return self.connection.sent

    @property
    def payloads(self) -> list[Any]:
        """The frames broadcast so far, each decoded from JSON (a new list)."""
        return [json.loads(frame) for frame in self.connection.sent]

    def take(self) -> list[str | bytes]:
        """The frames broadcast since the last ``take()`` (or ``clear()``); forgets them."""
        sent = list(self.connection.sent)
        self.connection.sent.clear()
        return sent

    def clear(self) -> None:
        """Forget the frames broadcast so far."""
        self.connection.sent.clear()
