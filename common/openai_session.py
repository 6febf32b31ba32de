"""The OpenAI Agents SDK's ``Session`` protocol over a Session's messages.

:class:`AgentsItemsSession` implements what the SDK (PyPI
``openai-agents``) calls on a session -- ``get_items(limit)``,
``add_items(items)``, ``pop_item()``, ``clear_session()``, plus
``session_id`` and ``session_settings`` -- on any object with the Session's
message methods (:class:`MessageTarget`), storing items as
:mod:`common.openai_items` lays them out. Two subclasses say where the
messages are:

* :class:`actors.openai_agents.EmbeddedAgentsSession` -- an
  :class:`actors.Session` in this process;
* :class:`runtime.client.openai_agents.DurableAgentsSession` -- a session on
  a running host, over HTTP.

It lives at the bottom of the house because both of those import it (the
client may not import ``actors``). It imports the SDK only to coerce
``session_settings``, and only when it is installed.

Calls and costs (each "call" is one Session method; over HTTP one request):
``get_items()`` one call (the whole path), ``get_items(limit)`` one call
reading about ``limit`` messages (the newest window; when the window does
not start at the root, one more reading the compactions, and the whole path
if one of them starts before the window and ends inside it), ``add_items`` one
call (``append_messages``: one transaction), plus a read and an
``update_message`` first when the batch opens with the output of a call
stored before it; ``pop_item`` two (read the latest leaf, then update or
delete it); ``clear_session`` one.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio

from .openai_items import items_of, needs_leaf, plan_add, plan_pop
from .shapes import OVERLAY_PREFIX

__all__ = ["TARGET_METHODS", "AgentsItemsSession", "MessageTarget", "ThreadSafeLock"]

Item = dict[str, Any]
Message = dict[str, Any]


class MessageTarget(Protocol):
    """What :class:`AgentsItemsSession` needs: the Session's message methods, as
    :class:`actors.Session` and :class:`runtime.client.SessionHandle` have them."""

    async def get_history(self) -> list[Message]: ...
    async def get_recent_history(self, max_bytes: int, min_recent: int = 1) -> dict[str, Any]: ...
    async def get_latest_leaf(self) -> Message | None: ...
    async def append_messages(self, messages: Sequence[Message]) -> list[bool]: ...
    async def update_message(self, message: Message) -> None: ...
    async def delete_messages(self, message_ids: Sequence[str]) -> int: ...
    async def clear_messages(self) -> None: ...
    async def get_compactions(self) -> list[dict[str, str]]: ...


#: The methods of a :class:`MessageTarget`.
TARGET_METHODS = ("get_history", "get_recent_history", "get_latest_leaf", "append_messages", "update_message",
                  "delete_messages", "clear_messages", "get_compactions")


class ThreadSafeLock:
    """A lock for tasks of any event loop in any thread (the SDK's ``Runner.run_sync`` runs a loop of its own).

    ``async with lock.held():`` takes it with a non-blocking try; while
    another holder has it the waiter sleeps in its own loop (0.5 ms,
    doubling up to 20 ms), so no loop is blocked and a cancelled waiter
    holds nothing. Not fair: a waiter may be overtaken.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        delay = 0.0005
        while not self._lock.acquire(blocking=False):
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.02)
        try:
            yield
        finally:
            self._lock.release()


class AgentsItemsSession:
    """The SDK's ``Session`` protocol over a Session's messages (a structural match: no SDK base class).

    Subclasses implement :meth:`_target`. One operation runs at a time per
    instance, whatever thread or event loop calls it. ``close()`` makes
    every later call raise ``RuntimeError``; what is stored stays.

    Attributes:
        session_id: the session's id (a string).
        session_settings: the SDK's ``SessionSettings`` (a dict is coerced;
            ``None`` gives the defaults); its ``limit`` is the default of
            :meth:`get_items`.

    Raises:
        TypeError: ``session_id`` is not a string, or ``session_settings`` has keys the SDK does not know.
    """

    session_id: str
    session_settings: Any = None

    def __init__(self, session_id: str, session_settings: Any = None) -> None:
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a string, not {session_id!r}")
        self.session_id = session_id
        self.session_settings = _settings(session_settings)
        self._lock = ThreadSafeLock()
        self._closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.session_id!r}>"

    async def _target(self) -> MessageTarget:
        """The object holding the messages (called inside the lock, in the caller's event loop)."""
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def close(self) -> None:
        """Refuse further calls (``RuntimeError``); stored items stay."""
        self._closed = True

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """The session's items, oldest first; with ``limit``, the newest ``limit`` of them.

        ``limit`` defaults to ``session_settings.limit``; ``None`` or a
        negative number means all (as the SDK's ``SQLiteSession``), ``0``
        none. A compaction overlay shows as the assistant message it is.
        """
        self._check_open()
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        if limit == 0:
            return []
        async with self._lock.held():
            target = await self._target()
            if limit is None or limit < 0:
                return items_of(await target.get_history())
            window = await target.get_recent_history(0, limit)
            items = items_of(window["messages"])
            if window["truncated"] and (len(items) < limit or await _straddled(target, window["messages"])):
                items = items_of(await target.get_history())
            return items[-limit:]

    async def add_items(self, items: list[Item]) -> None:
        """Store ``items`` after the session's items, in order.

        Raises:
            TypeError, ValueError: an item is not a dict of JSON data
                (``items[<i>] ...``); nothing is stored.
            Exception: what the Session raised (over HTTP: the same class);
                an ``append_messages`` that fails stores nothing.
        """
        self._check_open()
        if not items:
            return
        items = list(items)
        plan = plan_add(items)  # checks every item before anything is read or written
        async with self._lock.held():
            target = await self._target()
            if needs_leaf(items):
                plan = plan_add(items, await target.get_latest_leaf())
            if plan.update is not None:
                await target.update_message(plan.update)
            if plan.append:
                await target.append_messages(plan.append)

    async def pop_item(self) -> Item | None:
        """Remove and return the newest item; ``None`` when the session holds none.

        An output merged into its call's tool part leaves the call in place
        (``state`` back to ``input-available``); a message left with no item
        is deleted. Works on stored messages (a compaction overlay is not
        popped; the newest stored item is).
        """
        self._check_open()
        async with self._lock.held():
            target = await self._target()
            message = await target.get_latest_leaf()
            popped = None if message is None else plan_pop(message)
            if popped is None and message is not None:  # the leaf holds no item: the newest message that does
                for message in reversed(await target.get_history()):
                    if not str(message.get("id", "")).startswith(OVERLAY_PREFIX):
                        popped = plan_pop(message)
                    if popped is not None:
                        break
            if popped is None or message is None:  # popped implies message; mypy cannot see it
                return None
            item, rest = popped
            if rest is None:
                await target.delete_messages([message["id"]])
            else:
                await target.update_message(rest)
            return item

    async def clear_session(self) -> None:
        """Delete every item (every message and compaction of the session)."""
        self._check_open()
        async with self._lock.held():
            await (await self._target()).clear_messages()


async def _straddled(target: MessageTarget, window: list[Message]) -> bool:
    """``True`` when a compaction ends inside ``window`` but starts before it: the Session
    applies an overlay only to a window holding both ends, the whole history shows it."""
    inside = {message.get("id") for message in window}
    return any(c["toMessageId"] in inside and c["fromMessageId"] not in inside for c in await target.get_compactions())


def _settings(value: Any) -> Any:
    """``value`` as the SDK's ``SessionSettings`` (a dict is coerced; ``None`` gives the defaults).

    Without the SDK installed, ``None`` and objects are kept as they are.

    Raises:
        TypeError: a dict with keys the SDK does not know (its message), or a
            dict while the SDK is not installed.
    """
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:
        if isinstance(value, Mapping):
            raise TypeError("session_settings as a dict needs the OpenAI Agents SDK (pip install openai-agents)")
        return value
    return SessionSettings() if value is None else coerce_session_settings(value)
