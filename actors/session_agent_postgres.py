"""The default session actor with its session in Postgres: :class:`PostgresSessionAgent`.

What ``durable-sessions serve --postgres URL`` binds instead of
:class:`~actors.session_agent.SessionAgent`: the same methods (the Session
API table, ``EMPTY_READS`` included), the same :class:`SessionConfig`,
but the session lives in a Postgres database shared by every actor of the
host (and by other hosts on the same database):

* messages, compactions, the active leaf, the loaded-skill set and the
  session's metadata -- rows of session id ``<actor hex id>`` (the actor's
  64-hex id, ``namespace.id_from_name(name).hex``: unique per namespace and
  name, stable whatever the actor is reached by);
* writable blocks and the cached prompt -- ``cf_agents_context_blocks``
  rows ``<label>_<hex>`` and ``_system_prompt_<hex>``;
* searchable blocks -- ``cf_agents_search_entries`` filed under
  ``<label>_<hex>``, so each session keeps its own entries as it does in
  its own SQLite file; skills folders and readonly blocks as configured.

The actor's SQLite file still exists: it holds what belongs to this host
only -- the name the actor is addressed by (for broadcasts of an activation
without one), its KV and alarm. Nothing of the conversation is in it, and
it decides nothing: whether a session exists is its row in
``durable_sessions_catalog`` (:meth:`PostgresSessionAgent.session_written`),
which is how the server answers ``EMPTY_READS`` for a never-written session
without waking (and so creating) anything, and serves every session of the
database from a host on an empty data folder.

Every call holds the actor's input gate for its whole run
(``ctx.block_concurrency_while``): storage calls suspend on Postgres, and
holding the gate keeps calls of one session strictly one after another, in
arrival order, as the SQLite agent's synchronous storage does (here also
across a slow summarizer). Different sessions run concurrently, on one
connection pool per host (:class:`PostgresSessionEnv`).

Errors are the SQLite agent's, plus :class:`~common.errors.StorageUnavailableError`
(503, retryable) when Postgres cannot be reached or does not answer within
the storage's call deadline, and :class:`~common.errors.InvalidInputError`
for a value Postgres text cannot hold (NUL in an id).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from storage.context import read_config

from .agent import Agent, AgentContext, callable_method
from .session import Session
from .session_agent import _ACTOR_NAME_KEY, SessionAgent, SessionConfig, _remember_actor_name
from .session_embeddings import VectorSearchProvider, embedder_for
from .session_metadata import METADATA_KEY, encode_metadata
from .session_spec import SessionSpec

__all__ = ["PostgresSessionAgent", "PostgresSessionEnv", "postgres_spec"]

T = TypeVar("T")

#: ``assistant_config`` key of the name the actor is addressed by (for people reading the tables).
ACTOR_NAME_KEY = "actor_name"


@dataclass(frozen=True)
class PostgresSessionEnv:
    """What :class:`PostgresSessionAgent` is bound with (``host.bind(..., env=...)``).

    Attributes:
        storage: the host's :class:`~storage.postgres.PostgresStorage` (one
            connection pool, shared by every actor).
        config: the session configuration, as for the SQLite agent.
    """

    storage: Any
    config: SessionConfig = field(default_factory=SessionConfig)

    def __post_init__(self) -> None:
        from storage.postgres import PostgresStorage

        if not isinstance(self.storage, PostgresStorage):
            raise TypeError(f"PostgresSessionEnv needs a PostgresStorage, not {type(self.storage).__name__}")
        if not isinstance(self.config, SessionConfig):
            raise TypeError(f"PostgresSessionEnv needs a SessionConfig, not {type(self.config).__name__}")


def postgres_spec(config: SessionConfig, storage: Any, session_id: str) -> SessionSpec:
    """``config.spec`` with each searchable block's entries filed under ``<label>_<session_id>``
    (with ``[search]``: ranked by words and meaning, :class:`~actors.session_embeddings.VectorSearchProvider`).

    Everything else auto-wires through ``storage`` as on a SQLite file.
    """
    spec = config.spec
    searchable = {b.label for b in config.blocks if b.kind == "searchable"}
    if not searchable:
        return spec
    search = config.search

    def provider(label: str) -> Any:
        key = f"{label}_{session_id}"
        if search is None:
            return storage.search(key=key)
        return VectorSearchProvider(storage, embedder_for(search), key=key)

    blocks = tuple(
        replace(b, provider=provider(b.label)) if b.label in searchable else b for b in spec.context.blocks
    )
    return replace(spec, context=replace(spec.context, blocks=blocks))


def _one_at_a_time(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """``method`` run holding the actor's input gate for its whole run."""

    @functools.wraps(method)
    async def call(self: Agent, *args: Any, **kwargs: Any) -> T:
        return await self.ctx.block_concurrency_while(lambda: method(self, *args, **kwargs))

    return call


class PostgresSessionAgent(SessionAgent):
    """One conversation per actor, stored in Postgres (see the module docstring).

    Args:
        ctx: the runtime context.
        env: a :class:`PostgresSessionEnv`.

    Raises:
        TypeError: ``env`` is not a :class:`PostgresSessionEnv`.
    """

    def __init__(self, ctx: AgentContext, env: PostgresSessionEnv) -> None:
        if not isinstance(env, PostgresSessionEnv):
            raise TypeError(f"PostgresSessionAgent needs a PostgresSessionEnv as env, not {type(env).__name__}")
        Agent.__init__(self, ctx, env)
        self.config = env.config
        self.postgres = env.storage
        self.session_key = ctx.id.hex
        spec = postgres_spec(self.config, self.postgres, self.session_key)
        self.session = Session(self.postgres, spec=spec, session_id=self.session_key, broadcaster=self.broadcast)
        self._store = self.postgres.messages(self.session_key)
        self._embedding_scheduled = False
        if self.config.search is not None:
            self.session.with_embedder(embedder_for(self.config.search), on_pending=self._schedule_embedding)
        self._new_name = None
        stored = _stored_name(self)
        name = _remember_actor_name(self)
        if name is not None:
            self.session.with_broadcast_id(name)
            if name != stored:
                self._new_name = name

    @classmethod
    async def session_written(cls, env: PostgresSessionEnv, actor_id: Any) -> bool:
        """Whether the session of ``actor_id`` was ever written or named, by any host of the database:
        one primary-key read of its catalog row (``storage.postgres.catalog``). The server asks this,
        not the data folder, before answering a read from ``EMPTY_READS``.

        Raises:
            StorageUnavailableError: Postgres cannot be reached or does not answer in time.
        """
        return bool(await env.storage.written(actor_id.hex))

    @classmethod
    async def erase_session(cls, env: PostgresSessionEnv, actor_id: Any) -> bool:
        """Delete every row of the session of ``actor_id`` in Postgres, in one transaction
        (:meth:`storage.postgres.PostgresStorage.erase_session`); ``True`` when it was written or named.
        The actor's own file is the host's to erase (``host.erase``).

        Raises:
            StorageUnavailableError: Postgres cannot be reached or does not answer in time (nothing deleted).
        """
        return bool(await env.storage.erase_session(actor_id.hex))

    async def on_start(self) -> None:
        """Record a name the actor is addressed by for the first time (``assistant_config``).

        With an embedder: mark the messages stored before it was configured (once per model,
        recorded in the session's ``assistant_config`` in Postgres, so whichever host wakes the
        session first does it), and schedule the alarm that embeds whatever is pending: the
        markers are rows in Postgres, so a restart (or another host) finishes what was left.
        """
        if self._new_name is not None:
            await self._store.set_config(ACTOR_NAME_KEY, self._new_name)
            self._new_name = None
        vectors = self.session.vectors
        if vectors is None:
            return
        key = f"embeddings_marked:{vectors.model}"
        if await self._store.get_config(key) is None and await vectors.has_messages():
            await vectors.mark_missing()
            await self._store.set_config(key, "1")
        if await vectors.pending():
            self._schedule_embedding()

    async def get_metadata(self) -> dict[str, Any]:
        """The session's metadata object (``{}`` until set), from Postgres."""
        text = await self._store.get_config(METADATA_KEY)
        return {} if text is None else json.loads(text)

    async def set_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """Replace the session's metadata with a JSON object (at most 64 KiB); returns it.

        Raises:
            InvalidInputError: (``field="metadata"``) not a small JSON object.
        """
        text = encode_metadata(metadata)
        if not metadata:
            await self._store.delete_config(METADATA_KEY)
            return {}
        await self._store.set_config(METADATA_KEY, text)
        return json.loads(text)


def _stored_name(agent: Agent) -> str | None:
    """The name kept in the actor's SQLite file (see ``_remember_actor_name``)."""
    return read_config(agent.storage, "", _ACTOR_NAME_KEY)


# Every call of the Session API holds the gate (the metadata methods too).
for _name in sorted(vars(SessionAgent) | vars(PostgresSessionAgent)):
    _method = callable_method(PostgresSessionAgent, _name)
    if _method is not None:
        setattr(PostgresSessionAgent, _name, _one_at_a_time(_method))
del _name, _method
