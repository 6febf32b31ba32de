"""Namespaces and stubs: how callers address actors.

A :class:`Namespace` is an actor class bound under a name (``host.bind``).
It makes ids (:mod:`runtime.host.ids`) and hands out :class:`ActorStub` objects.
A stub is two references: it creates nothing until a call is made. A call
is checked against the class first (:func:`actors.agent.callable_method`
and the method's signature), so a bad call never wakes the actor.

Arguments and results pass by reference (one process); actor methods
should return fresh values, not their internal state.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.agent import Agent, ConnectionLike, callable_method
from common.errors import InvalidActorIdError, InvalidArgumentsError, UnknownMethodError
from runtime.host import ids
from runtime.host.ids import ActorId

if TYPE_CHECKING:
    from runtime.host.actor_host import ActorHost


class Namespace:
    """An actor class bound under a name.

    Attributes:
        host: the :class:`~runtime.host.actor_host.ActorHost`.
        name: the namespace name.
        agent_class: the bound :class:`actors.Agent` subclass.
        env: passed to each instance's constructor.
    """

    def __init__(self, host: ActorHost, name: str, agent_class: type[Agent], env: Any) -> None:
        self.host = host
        self.name = name
        self.agent_class = agent_class
        self.env = env
        self._methods: dict[str, tuple[Callable[..., Any], inspect.Signature, bool]] = {}
        # Call shapes (method, positional count[, keyword names]) known to bind: binding depends on the
        # shape only, never on the values, so a shape seen to fit is not bound again (Signature.bind is
        # a good part of a call's cost). Only methods without *args/**kwargs are kept: their shapes are few.
        self._fitting: set[tuple[Any, ...]] = set()

    def __repr__(self) -> str:
        return f"<Namespace {self.name} ({self.agent_class.__qualname__})>"

    # -- ids ---------------------------------------------------------------

    def exists(self, actor_id: ActorId) -> bool:
        """``True`` when the actor has a file or a live instance (it was written, or is awake),
        or the host catalog lists it (its file may have vanished or been quarantined).

        A read of an actor that does not exist needs no activation: callers
        answer it as for an empty actor, so no file is created for it. An
        actor the catalog knows is never answered as empty: the call goes to
        the host, which reports the damage. When another host may hold the
        actor (``placement.may_live_elsewhere``: always, in cluster mode) this
        is ``True``; there ``await host.cluster.written(actor_id)`` asks Postgres.
        """
        return self.host.placement.may_live_elsewhere(actor_id) or self.host.knows(actor_id)

    def id_from_name(self, name: str) -> ActorId:
        """The id ``name`` maps to here: 64 hex, always the same for the same name.

        Raises:
            InvalidActorIdError: ``name`` is not a ``str``.
        """
        return ids.id_from_name(self.name, name)

    def new_unique_id(self) -> ActorId:
        """A fresh random id (nothing is created until it is called)."""
        return ids.new_unique_id(self.name)

    def id_from_string(self, text: str) -> ActorId:
        """Parse a 64-hex id made by this namespace.

        Raises:
            InvalidActorIdError: malformed, or made by another namespace.
        """
        return ids.id_from_string(self.name, text)

    def check_id(self, actor_id: ActorId | str) -> ActorId:
        """``actor_id`` as an :class:`ActorId` of this namespace (parsing strings).

        Raises:
            InvalidActorIdError: a string that does not parse, or an id of another namespace.
        """
        if isinstance(actor_id, ActorId):
            if actor_id.namespace != self.name:
                raise InvalidActorIdError(
                    f"actor id {actor_id.hex} belongs to namespace {actor_id.namespace!r}, not {self.name!r}"
                )
            return actor_id
        return self.id_from_string(actor_id)

    def list_ids(self) -> list[ActorId]:
        """Ids of every actor with a file on disk, sorted by hex (scans the folder)."""
        found = []
        for path in sorted(Path(self.host.data_dir, self.name).glob("*/*.sqlite3")):
            try:
                found.append(self.id_from_string(path.stem))
            except InvalidActorIdError:
                continue
        return sorted(found, key=lambda actor_id: actor_id.hex)

    # -- stubs and calls -----------------------------------------------------

    def get(self, actor_id: ActorId | str) -> ActorStub:
        """A stub for ``actor_id`` (cheap; nothing is opened until a call).

        Raises:
            InvalidActorIdError: see :meth:`check_id`.
        """
        return ActorStub(self, self.check_id(actor_id))

    def get_by_name(self, name: str) -> ActorStub:
        """``get(id_from_name(name))``."""
        return ActorStub(self, self.id_from_name(name))

    def resolve_method(self, method: str) -> tuple[Callable[..., Any], inspect.Signature, bool]:
        """``(function, signature, is_async)`` of a callable method (cached per namespace).

        Raises:
            UnknownMethodError: ``method`` is not callable through a stub.
        """
        try:
            return self._methods[method]
        except (KeyError, TypeError):
            pass
        fn = callable_method(self.agent_class, method)
        if fn is None:
            raise UnknownMethodError(self.agent_class.__qualname__, str(method))
        entry = self._methods[method] = (fn, inspect.signature(fn), inspect.iscoroutinefunction(fn))
        return entry

    async def call(self, actor_id: ActorId, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``method(*args, **kwargs)`` on the actor as one turn and return its result.

        Raises:
            UnknownMethodError, InvalidArgumentsError: before anything is woken.
            ActorOverloadedError, HostClosedError: see ``ActorHost.run_turn``.
            Whatever ``on_start`` or the method raised.
        """
        fn, signature, is_async = self.resolve_method(method)
        shape = (method, len(args), frozenset(kwargs)) if kwargs else (method, len(args))
        if shape not in self._fitting:
            try:
                signature.bind(None, *args, **kwargs)
            except TypeError as exc:
                raise InvalidArgumentsError(f"{self.agent_class.__qualname__}.{method}(): {exc}") from None
            if _bounded(signature):
                self._fitting.add(shape)

        if is_async:
            async def invoke(agent: Agent) -> Any:
                return await fn(agent, *args, **kwargs)
        else:
            async def invoke(agent: Agent) -> Any:
                result = fn(agent, *args, **kwargs)
                return await result if inspect.isawaitable(result) else result

        return await self.host.run_turn(actor_id, invoke)

    # -- WebSocket peers (the server calls these) ------------------------------

    async def connect(self, actor_id: ActorId, conn: ConnectionLike) -> None:
        """Hold ``conn`` as a peer of the actor and run ``on_connect(conn)`` (waking it).

        When ``on_connect`` raises, the peer is forgotten and the error propagates.
        """
        actor_id = self.check_id(actor_id)
        self.host.register_connection(actor_id, conn)
        try:
            # not refused for load: a peer costs the actor nothing until it sends a frame (whose call is bounded)
            await self.host.run_turn(actor_id, lambda agent: agent.on_connect(_peer(agent, conn)), exempt=True)
        except BaseException:
            self.host.unregister_connection(actor_id, conn)
            raise

    async def receive(self, actor_id: ActorId, conn: ConnectionLike, message: str | bytes) -> None:
        """Run ``on_message(conn, message)`` on the actor (waking it)."""
        actor_id = self.check_id(actor_id)
        await self.host.run_turn(actor_id, lambda agent: agent.on_message(_peer(agent, conn), message))

    async def disconnect(self, actor_id: ActorId, conn: ConnectionLike, code: int = 1000, reason: str = "") -> None:
        """Forget ``conn`` and run ``on_close(conn, code, reason)``; nothing if it was not held."""
        actor_id = self.check_id(actor_id)
        if self.host.unregister_connection(actor_id, conn):
            await self.host.run_turn(actor_id, lambda agent: agent.on_close(_peer(agent, conn), code, reason),
                                     exempt=True)


def _bounded(signature: inspect.Signature) -> bool:
    """``True`` when ``signature`` takes no ``*args`` or ``**kwargs`` (its fitting call shapes are few)."""
    return all(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values())


def _peer(agent: Agent, conn: ConnectionLike) -> ConnectionLike:
    """``conn`` as the actor's hooks see it (gated in cluster mode, see ``ActorContext.peer``)."""
    peer = getattr(agent.ctx, "peer", None)
    return conn if peer is None else peer(conn)


class ActorStub:
    """A handle on one actor: ``await stub.call("method", *args, **kwargs)``.

    Attribute access is sugar: ``await stub.append_message(msg)`` is
    ``await stub.call("append_message", msg)``. ``id``, ``namespace`` and
    ``call`` are the stub's own; reach actor methods with those names through
    :meth:`call`.
    """

    __slots__ = ("namespace", "id")

    def __init__(self, namespace: Namespace, actor_id: ActorId) -> None:
        self.namespace = namespace
        self.id = actor_id

    async def call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        """Run ``method`` on the actor (see :meth:`Namespace.call`)."""
        return await self.namespace.call(self.id, method, args, kwargs)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        return functools.partial(self.call, name)

    def __repr__(self) -> str:
        return f"<ActorStub {self.namespace.name}/{self.id.hex}>"
