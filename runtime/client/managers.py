"""Managers over HTTP: ``client.manager("user-7")`` -> a :class:`ManagerHandle` with SessionManager's methods.

::

    async with SessionsClient(url, token=token) as client:
        manager = client.manager("user-7")              # one manager per end user; creates nothing
        row = await manager.create("Trip to Lisbon")    # {"id", "name", ..., "created_at", "updated_at"}
        chat = manager.session(row["id"])               # the Session API of that session
        await chat.append_message({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]})
        hits = await manager.search("Lisbon")           # across every session: [..., "sessionId": ...]
        fork = await manager.fork(row["id"], "m1", "Trip, plan B")

A :class:`ManagerHandle` has the method names and signatures of the
in-process :class:`actors.manager.SessionManager` (checked against
:data:`runtime.manager_api.MANAGER_API` by a test) and returns what the
manager actor returns: registry rows as dicts with the ``assistant_sessions``
column names, search hits with their ``sessionId``. ``tools`` is async here
(one request) and takes ``format`` like a session's. Errors are raised as
the classes of :mod:`common.errors` (an unknown session id is
:class:`~common.errors.NotFoundError`).

Each managed session is a :class:`ManagedSessionHandle`: a
:class:`~runtime.client.http.SessionHandle` whose routes live under
``/v1/managers/{id}/sessions/{session_id}/``; its broadcasts are not
streamed yet (``websocket()`` and ``events()`` raise).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from common.errors import NotFoundError
from common.shapes import LATEST_LEAF
from common.wire import quote_segment
from runtime.client.http import SessionHandle, SessionSocket, TableHandle
from runtime.manager_api import MANAGER_METHODS, MANAGERS_PREFIX

if TYPE_CHECKING:
    from runtime.client.http import SessionsClient

__all__ = ["ManagedSessionHandle", "ManagerHandle"]

Message = dict[str, Any]
Row = dict[str, Any]


class ManagedSessionHandle(SessionHandle):
    """One session of a manager: the Session's methods over HTTP (as :class:`SessionHandle`)."""

    def __init__(self, manager: ManagerHandle, session_id: str) -> None:
        super().__init__(manager.client, session_id)
        self.manager = manager
        self.path = f"{manager.path}/sessions/{quote_segment(session_id)}"

    def __repr__(self) -> str:
        return f"<ManagedSessionHandle {self.manager.manager_id!r}/{self.session_id!r}>"

    def websocket(self, *, reconnect: bool = True) -> SessionSocket:
        """Not served for managed sessions yet.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("managed sessions have no WebSocket route yet")

    def events(self, *, reconnect: bool = True) -> SessionSocket:
        """Not served for managed sessions yet.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("managed sessions have no WebSocket route yet")


class ManagerHandle(TableHandle):
    """One manager on the server: SessionManager's methods over HTTP.

    Made by :meth:`SessionsClient.manager`. Every method is one request,
    built from the method's first route in :data:`runtime.manager_api.MANAGER_API`
    (the message methods, which have none, go through ``POST /rpc``).
    """

    api = MANAGER_METHODS

    def __init__(self, client: SessionsClient, manager_id: str) -> None:
        if not isinstance(manager_id, str) or not manager_id:
            raise ValueError("manager_id must be a non-empty string")
        super().__init__(client, f"{MANAGERS_PREFIX}{quote_segment(manager_id)}")
        self.manager_id = manager_id

    def __repr__(self) -> str:
        return f"<ManagerHandle {self.manager_id!r}>"

    # -- managed sessions ------------------------------------------------------------------------

    def session(self, session_id: str) -> ManagedSessionHandle:
        """A handle on the managed session ``session_id`` (no request; an unknown id fails on first use)."""
        return ManagedSessionHandle(self, session_id)

    async def get_session(self, session_id: str) -> ManagedSessionHandle:
        """A handle on the registered session ``session_id`` (one request checks it exists).

        Raises:
            NotFoundError: ``session_id`` is not registered.
        """
        if await self.get(session_id) is None:
            raise NotFoundError(f"session {session_id!r} not found", kind="session", key=session_id)
        return self.session(session_id)

    # -- the registry -------------------------------------------------------------------------------

    async def create(
        self, name: str, *, parent_session_id: str | None = None, model: str | None = None, source: str | None = None
    ) -> Row:
        """Register a new session (a random UUID id); its row."""
        return await self._invoke("create", name, parent_session_id=parent_session_id, model=model, source=source)

    async def list(self) -> list[Row]:
        """Every session row, most recently updated first."""
        return await self._invoke("list")

    async def get(self, session_id: str) -> Row | None:
        """The session's row, or ``None`` when it is not registered."""
        return await self._invoke("get", session_id)

    async def rename(self, session_id: str, name: str) -> Row:
        """Set the session's name; its new row."""
        return await self._invoke("rename", session_id, name)

    async def delete(self, session_id: str) -> None:
        """Delete the session and every row it owns."""
        return await self._invoke("delete", session_id)

    async def fork(self, session_id: str, at_message_id: str, name: str) -> Row:
        """A new session holding the history up to ``at_message_id``; its row."""
        return await self._invoke("fork", session_id, at_message_id, name)

    async def compact_and_split(self, session_id: str, summary: str, name: str | None = None) -> Row:
        """End the session and continue in a new one starting from ``summary``; the new row."""
        return await self._invoke("compact_and_split", session_id, summary, name)

    async def add_usage(self, session_id: str, input_tokens: int, output_tokens: int, cost: float) -> Row:
        """Add tokens and cost to the session's row; its new row."""
        return await self._invoke("add_usage", session_id, input_tokens, output_tokens, cost)

    # -- search and tools ------------------------------------------------------------------------------

    async def search(self, query: str, *, limit: int = 20, mode: str = "text") -> builtins.list[dict[str, str]]:
        """Search every session by words (``mode="text"``), meaning (``"semantic"``) or both
        (``"hybrid"``): ``[{"id", "role", "content", "createdAt", "sessionId"}]``, best first."""
        return await self._invoke("search", query, limit=limit, mode=mode)

    async def tools(self, format: str = "raw") -> dict[str, Any] | builtins.list[dict[str, Any]]:
        """The manager's tools (``session_search``): ``raw``, ``openai`` or ``anthropic``."""
        return await self._invoke("tools", format)

    async def execute_tool(self, name: str, args: Any) -> str:
        """Run the manager's tool ``name`` with ``args``; its result text."""
        return await self._invoke("execute_tool", name, args)

    # -- messages of one session ----------------------------------------------------------------------

    async def append(self, session_id: str, message: Message, parent_id: str | None | object = LATEST_LEAF) -> str:
        """Append to the session; the message id."""
        return await self._invoke("append", session_id, message, parent_id)

    async def upsert(self, session_id: str, message: Message, parent_id: str | None | object = LATEST_LEAF) -> str:
        """Update the message if the session holds its id, else append it; its id."""
        return await self._invoke("upsert", session_id, message, parent_id)

    async def append_all(
        self, session_id: str, messages: Sequence[Message], parent_id: str | None | object = LATEST_LEAF
    ) -> str | None:
        """Append a chain in one transaction; the last id, or ``None`` for none."""
        return await self._invoke("append_all", session_id, list(messages), parent_id)

    async def get_history(self, session_id: str, leaf_id: str | None = None) -> builtins.list[Message]:
        """The session's path root -> leaf, overlays applied."""
        return await self._invoke("get_history", session_id, leaf_id)

    async def get_message_count(self, session_id: str) -> int:
        """Stored messages on the path to the session's latest leaf."""
        return await self._invoke("get_message_count", session_id)

    async def get_branches(self, session_id: str, message_id: str) -> builtins.list[Message]:
        """The children of ``message_id`` in the session, oldest first."""
        return await self._invoke("get_branches", session_id, message_id)

    async def clear_messages(self, session_id: str) -> None:
        """Delete the session's messages and compactions (its row stays)."""
        return await self._invoke("clear_messages", session_id)

    async def delete_messages(self, session_id: str, message_ids: Sequence[str]) -> int:
        """Delete these messages of the session; how many existed."""
        return await self._invoke("delete_messages", session_id, list(message_ids))

    async def add_compaction(self, session_id: str, summary: str, from_id: str, to_id: str) -> dict[str, str]:
        """Store an overlay in the session; the compaction record."""
        return await self._invoke("add_compaction", session_id, summary, from_id, to_id)

    async def get_compactions(self, session_id: str) -> builtins.list[dict[str, str]]:
        """The session's compaction records, oldest first."""
        return await self._invoke("get_compactions", session_id)
