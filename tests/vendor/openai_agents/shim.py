"""What the vendored SDK tests import in place of ``agents.SQLiteSession`` and their own helper.

``SQLiteSession(session_id, db_path=":memory:", ..., session_settings=None)``
builds one of our sessions instead, on the backend the running test was
given (``conftest.py`` sets :data:`BACKEND`): a
:class:`runtime.client.DurableAgentsSession` on the shared host, or an
:class:`actors.openai_agents.EmbeddedAgentsSession` on a SQLite file. As
with the SDK's class, sessions made with the same ``db_path`` share a store
(the same host session-id prefix, the same file) and ``":memory:"`` makes a
private one.

``get_text_message(text)`` is the SDK tests' assistant text item, written
here with the SDK's own ``agents.testing.assistant_message``.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.testing import assistant_message

from actors import Session
from actors.openai_agents import EmbeddedAgentsSession
from runtime.client import DurableAgentsSession
from storage import SqlStorage


@dataclass
class Backend:
    """Where the sessions of the running test live: ``"host"`` (``url``, ``token``) or ``"embedded"`` (``folder``)."""

    kind: str
    url: str = ""
    token: str | None = None
    folder: Path | None = None
    prefixes: dict[str, str] = field(default_factory=dict)
    storages: dict[str, SqlStorage] = field(default_factory=dict)

    def close(self) -> None:
        for storage in self.storages.values():
            storage.close()
        self.storages.clear()


#: Set by the conftest's autouse fixture for each test.
BACKEND: Backend | None = None


def _store_key(db_path: Any) -> str:
    """The key of the store behind ``db_path`` (a fresh one for ``":memory:"``, as SQLite does)."""
    text = str(db_path)
    return uuid.uuid4().hex if text == ":memory:" else str(Path(text).resolve())


def SQLiteSession(  # the SDK class name it stands in for
    session_id: str, db_path: Any = ":memory:", sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages", session_settings: Any = None,
) -> DurableAgentsSession | EmbeddedAgentsSession:
    """One of our sessions where the SDK test made a ``SQLiteSession`` (the table names do not apply)."""
    backend = BACKEND
    assert backend is not None, "the vendored SDK tests run only through tests/vendor/openai_agents/conftest.py"
    key = _store_key(db_path)
    if backend.kind == "host":
        prefix = backend.prefixes.setdefault(key, uuid.uuid4().hex[:12])
        return DurableAgentsSession(f"{prefix}/{session_id}", backend.url, backend.token,
                                    session_settings=session_settings)
    storage = backend.storages.get(key)
    if storage is None:
        name = hashlib.sha256(key.encode()).hexdigest()[:16]
        storage = backend.storages[key] = SqlStorage.open(backend.folder / f"{name}.sqlite3")
    return EmbeddedAgentsSession(Session.create(storage).for_session(session_id), session_settings=session_settings)


def get_text_message(content: str) -> Any:
    """An assistant message output item holding ``content`` (item id ``"1"``, as the SDK tests use)."""
    return assistant_message(content, item_id="1")
