"""``EmbeddedAgentsSession``: the OpenAI Agents SDK's session memory in an in-process Session.

The SDK (PyPI ``openai-agents``) remembers a conversation through an object
with ``get_items``, ``add_items``, ``pop_item`` and ``clear_session``. This
one keeps the items in a :class:`actors.Session` on your own SQLite file, as
messages every other reader understands (text parts for search, tool calls
as tool parts; layout: :mod:`common.openai_items`)::

    from agents import Agent, Runner
    from actors import Session
    from actors.openai_agents import EmbeddedAgentsSession
    from storage import SqlStorage

    session = Session.create(SqlStorage.open("chat.sqlite3")).for_session("chat-42")
    memory = EmbeddedAgentsSession(session)
    result = await Runner.run(Agent(name="helper"), "Hello", session=memory)
    await session.search("hello")            # the same conversation, as Session messages

It runs under asyncio (the SDK's loop) and trio, and from several threads
(``Runner.run_sync``): one operation at a time per instance. For a session
on a running host use :class:`runtime.client.DurableAgentsSession`.
"""

from __future__ import annotations

from typing import Any

from common.openai_session import TARGET_METHODS, AgentsItemsSession

from .session import Session

__all__ = ["EmbeddedAgentsSession"]


class EmbeddedAgentsSession(AgentsItemsSession):
    """The SDK's ``Session`` protocol on ``session``, an :class:`actors.Session`.

    Args:
        session: the Session holding the items (any object with its message
            methods, :data:`common.openai_session.TARGET_METHODS`); its
            ``session_id`` is this object's. What its builder configured
            applies: blocks, compaction (overlays show in ``get_items``), the
            row limit.
        session_settings: the SDK's ``SessionSettings`` (or a dict of it);
            ``limit`` is the default of ``get_items``.

    Raises:
        TypeError: ``session`` lacks a message method, or ``session_settings``
            has keys the SDK does not know.
    """

    def __init__(self, session: Session, *, session_settings: Any = None) -> None:
        missing = [name for name in TARGET_METHODS if not callable(getattr(session, name, None))]
        if missing:
            raise TypeError(f"session must be an actors.Session (no {', '.join(missing)} on {type(session).__name__})")
        super().__init__(session.session_id, session_settings)
        self.session = session

    async def _target(self) -> Session:
        return self.session
