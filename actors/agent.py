"""The Durable Object base class: :class:`Agent`, its context and its peers.

An actor class subclasses :class:`Agent`. The runtime constructs it as
``cls(ctx, env)`` with a context satisfying :class:`AgentContext` (the
runtime implements it; this package never imports the runtime), then awaits
:meth:`Agent.on_start` before the first call is delivered.

What a stub can call is decided by :func:`callable_method`: public instance
methods defined by the subclass. Hooks (``on_*``), private names (``_*``),
and every attribute ``Agent`` itself defines (``sql``, ``broadcast``,
``storage``, ``alarm``, ``ctx``, ``env``...) are never callable from outside.

An instance lives only while the actor is active: hibernation drops it
without a goodbye call, so all state worth keeping belongs in storage.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from storage.kv import ActorStorage

T = TypeVar("T")

logger = logging.getLogger(__name__)


@runtime_checkable
class ConnectionLike(Protocol):
    """A WebSocket peer of an actor, held by the host (also while the actor hibernates).

    The server implements it. ``send`` must not block: it queues the
    message (text frames for ``str``, binary for ``bytes``) and returns. It
    may raise when the peer is gone; :meth:`Agent.broadcast` then skips it.
    """

    #: Unique among the actor's connections (e.g. a UUID).
    id: str

    def send(self, message: str | bytes) -> None: ...


class ActorIdLike(Protocol):
    """What ``ctx.id`` offers (read-only): ``str(id)`` is the 64-hex id."""

    @property
    def namespace(self) -> str:
        """The namespace the id belongs to."""
        ...

    @property
    def hex(self) -> str:
        """64 lowercase hex digits."""
        ...

    @property
    def name(self) -> str | None:
        """The name given to ``id_from_name``, when the id was made from one (else ``None``)."""
        ...


class AgentContext(Protocol):
    """The runtime's side of an actor (``self.ctx``).

    Attributes:
        id: the actor's id.
        storage: the actor's file (:class:`storage.kv.ActorStorage`): SQL,
            key-value and the alarm. Synchronous; never ``await`` inside
            ``storage.transaction()``.
    """

    @property
    def id(self) -> ActorIdLike: ...

    storage: ActorStorage

    async def block_concurrency_while(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``await fn()`` with no other call or alarm of this actor starting meanwhile.

        Calls already running (awaiting something else) are not paused.
        Returns what ``fn`` returns; its exception propagates.
        """
        ...

    def get_connections(self) -> Sequence[ConnectionLike]:
        """The actor's open WebSocket peers, in connection order."""
        ...

    def now_ms(self) -> int:
        """The host clock in epoch milliseconds (use it to compute alarm times)."""
        ...

    def quiet_writes(self) -> AbstractContextManager[None]:
        """A block (``with ctx.quiet_writes(): ...``) whose commits by this call are upkeep, not
        updates: they do not move the actor's ``updatedAt`` in listings (e.g. a prompt rendered and
        stored on first read). Commits of the actor's other calls meanwhile still count."""
        ...


@dataclass(frozen=True, slots=True)
class AlarmInfo:
    """What :meth:`Agent.alarm` receives.

    Attributes:
        retry_count: how many earlier runs of this alarm raised (0 on the first run).
        scheduled_ms: the time the alarm was scheduled for, epoch milliseconds.
    """

    retry_count: int
    scheduled_ms: int

    @property
    def is_retry(self) -> bool:
        """``True`` when an earlier run of this alarm raised."""
        return self.retry_count > 0


class Agent:
    """Base class of actors: one instance per actor id, alive while the actor is active.

    Args:
        ctx: the runtime context (:class:`AgentContext`).
        env: whatever the namespace was bound with (``host.bind(..., env=)``),
            e.g. a configuration object; ``None`` by default.
    """

    def __init__(self, ctx: AgentContext, env: Any = None) -> None:
        self.ctx = ctx
        self.env = env

    @property
    def storage(self) -> ActorStorage:
        """The actor's storage (``ctx.storage``)."""
        return self.ctx.storage

    def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """Run one SQL statement on the actor's file; rows as dicts (see ``SqlStorage.sql``)."""
        return self.ctx.storage.sql(query, *params)

    def broadcast(self, message: str | bytes, exclude: Iterable[Any] | str | None = ()) -> None:
        """Send ``message`` to every connected WebSocket peer not in ``exclude``.

        Args:
            message: a text (``str``) or binary (``bytes``) frame.
            exclude: connections, or their ``id`` strings, to skip; a single
                ``id`` string and ``None`` are accepted too.

        A peer whose ``send`` raises is skipped (and logged); the others
        still get the message.

        Raises:
            TypeError: ``message`` is neither ``str`` nor ``bytes``.
        """
        if not isinstance(message, str | bytes):
            raise TypeError(f"broadcast sends str or bytes, not {type(message).__name__}")
        skipped = _excluded(exclude)  # usually empty (a status after every append): nothing to build or ask
        skipped_ids = {item for item in skipped if isinstance(item, str)} if skipped else ()
        skipped_conns = [item for item in skipped if not isinstance(item, str)] if skipped else ()
        for conn in self.ctx.get_connections():
            if skipped and (conn.id in skipped_ids or any(item is conn or item == conn for item in skipped_conns)):
                continue
            try:
                conn.send(message)
            except Exception:
                logger.warning("broadcast to connection %s failed", conn.id, exc_info=True)

    # -- hooks (never callable through a stub) ------------------------------

    async def on_start(self) -> None:
        """Runs once per activation, before any call. If it raises, the
        activation fails, the callers waiting for it get the error and the
        next call tries again."""

    async def alarm(self, info: AlarmInfo) -> None:
        """Runs when the scheduled alarm is due. If it raises, it is retried
        with exponential backoff (2 s, 4 s, ... ; at most 6 retries)."""

    async def on_connect(self, conn: ConnectionLike) -> None:
        """A WebSocket peer connected. Raising refuses the connection."""

    async def on_message(self, conn: ConnectionLike, message: str | bytes) -> None:
        """A WebSocket peer sent ``message``."""

    async def on_close(self, conn: ConnectionLike, code: int, reason: str) -> None:
        """A WebSocket peer disconnected (``code`` as in RFC 6455)."""


def _excluded(exclude: Any) -> tuple[Any, ...]:
    """``exclude`` of :meth:`Agent.broadcast` as a tuple (one id string and ``None`` allowed)."""
    if exclude is None:
        return ()
    if isinstance(exclude, str):
        return (exclude,)
    return tuple(exclude)


#: Names a stub can never call, whatever a subclass defines under them.
RESERVED_NAMES: frozenset[str] = frozenset(dir(Agent)) | {"ctx", "env"}


def callable_method(cls: type[Agent], name: str) -> Callable[..., Any] | None:
    """The function a stub call of ``name`` runs on ``cls``, or ``None`` if not callable.

    The rule: ``name`` is an identifier that does not start with ``_`` or
    ``on_``, is not in :data:`RESERVED_NAMES`, and ``cls`` (or a base class
    below ``Agent``) defines it as a plain function (``def`` or ``async
    def``). Properties, class/static methods, class attributes and instance
    attributes are not callable. The result is the unbound function.
    """
    if not isinstance(name, str) or not name.isidentifier():
        return None
    if name.startswith(("_", "on_")) or name in RESERVED_NAMES:
        return None
    try:
        attr = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    return attr if inspect.isfunction(attr) else None
