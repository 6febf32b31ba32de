"""The manager actor with its registry and sessions in Postgres: :class:`PostgresManagerAgent`.

What ``durable-sessions serve --postgres URL`` binds as the ``"managers"``
namespace instead of :class:`~actors.manager_agent.ManagerAgent`: the same
methods and routes, with the manager's :class:`~actors.manager.SessionManager`
on the host's :class:`~storage.postgres.PostgresStorage` instead of the
actor's SQLite file, so a manager's sessions survive a new data folder and
are served by every host of the database:

* the registry rows are ``assistant_sessions`` rows whose ``owner`` is the
  manager actor's 64-hex id (:meth:`~storage.postgres.PostgresStorage.for_owner`):
  each manager lists, searches and changes only its own sessions;
* the sessions' messages, blocks, prompt, skills and metadata are rows of
  their session id (a random UUID), as for any ``SessionManager`` on Postgres.

Every call holds the actor's input gate for its whole run, as
:class:`~actors.session_agent_postgres.PostgresSessionAgent` does (storage
calls suspend on Postgres). Errors are the manager's, plus
:class:`~common.errors.StorageUnavailableError` (503) when Postgres cannot
be reached in time.
"""

from __future__ import annotations

import json
from typing import Any

from .agent import Agent, AgentContext, callable_method
from .manager import SessionManager
from .manager_agent import ManagedSession, ManagerAgent, configure_manager
from .session import Session
from .session_agent_postgres import PostgresSessionEnv, _one_at_a_time
from .session_metadata import METADATA_KEY, encode_metadata

__all__ = ["PostgresManagedSession", "PostgresManagerAgent"]


class PostgresManagedSession(ManagedSession):
    """A managed session whose metadata is its ``assistant_config`` row ``(<session id>, 'metadata')``."""

    async def get_metadata(self) -> dict[str, Any]:
        """The session's metadata object (``{}`` until set), from Postgres."""
        text = await self.storage.messages(self.session_id).get_config(METADATA_KEY)
        return {} if text is None else json.loads(text)

    async def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """Replace the session's metadata with a JSON object (at most 64 KiB); returns it.

        Raises:
            InvalidInputError: (``field="metadata"``) not a small JSON object.
        """
        text = encode_metadata(metadata)
        store = self.storage.messages(self.session_id)
        if not metadata:
            await store.delete_config(METADATA_KEY)
            return {}
        await store.set_config(METADATA_KEY, text)
        return json.loads(text)


class PostgresManagerAgent(ManagerAgent):
    """One SessionManager per actor, on Postgres (see the module docstring).

    Args:
        ctx: the runtime context.
        env: a :class:`~actors.session_agent_postgres.PostgresSessionEnv` (the host's storage and
            session configuration).

    Raises:
        TypeError: ``env`` is not a :class:`PostgresSessionEnv`.
    """

    def __init__(self, ctx: AgentContext, env: PostgresSessionEnv) -> None:
        if not isinstance(env, PostgresSessionEnv):
            raise TypeError(f"PostgresManagerAgent needs a PostgresSessionEnv as env, not {type(env).__name__}")
        Agent.__init__(self, ctx, env)
        self.config = env.config
        self.postgres = env.storage.for_owner(ctx.id.hex)
        self.manager = configure_manager(SessionManager(self.postgres, target=self), self.config.spec)
        self._with_search()

    @classmethod
    async def session_written(cls, env: PostgresSessionEnv, actor_id: Any) -> bool:
        """Whether the manager of ``actor_id`` holds a session (one indexed read of its registry): the
        server asks this, not the data folder, before answering a read from ``EMPTY_READS``.

        Raises:
            StorageUnavailableError: Postgres cannot be reached or does not answer in time.
        """
        return bool(await env.storage.for_owner(actor_id.hex).registry.count_sessions())

    def _managed_session(self, session: Session, session_id: str) -> ManagedSession:
        return PostgresManagedSession(session, self.postgres, session_id, self.ctx)


# Every call holds the gate, as PostgresSessionAgent's do.
for _name in sorted(vars(ManagerAgent) | vars(PostgresManagerAgent)):
    _method = callable_method(PostgresManagerAgent, _name)
    if _method is not None:
        setattr(PostgresManagerAgent, _name, _one_at_a_time(_method))
del _name, _method
