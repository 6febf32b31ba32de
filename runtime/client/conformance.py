"""The Claude Agent SDK's ``SessionStore`` conformance suite against a running host: one fresh store per contract.

The SDK ships ``claude_agent_sdk.testing.run_session_store_conformance(make_store)``:
it calls ``make_store()`` once to probe which optional methods a store has and
once per contract, and each contract expects an empty store. A host is
shared, so :class:`IsolatedSessionStore` gives every instance its own view: it
prefixes every project key with a prefix unique to the instance (the SDK's
keys never see it), and remembers the keys it wrote so that :meth:`purge`
deletes them again::

    from runtime.client.conformance import check_session_store_conformance

    made = await check_session_store_conformance("http://127.0.0.1:8787", token=token)
    print(f"{made - 1} SessionStore contracts passed")   # one store was the probe

Works under trio and asyncio, like :class:`~runtime.client.transcripts.DurableSessionStore`.
Needs the ``claude-agent-sdk`` package (a test extra of this project), imported
only when the suite runs. The same recipe fits another store: give
``run_session_store_conformance`` a factory that returns an empty one each
time (a new folder for :class:`storage.transcripts.LocalTranscriptStore`).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from common.shapes import parse_session_key
from runtime.client.transcripts import DurableSessionStore

__all__ = ["IsolatedSessionStore", "PrefixedProjects", "check_session_store_conformance"]

_counter = itertools.count()


class PrefixedProjects:
    """Mixin for a ``SessionStore``: every ``project_key`` gets :attr:`prefix` in front, unique to the instance.

    Keys written through the instance are kept in :attr:`written` (as sent,
    prefix included), so a caller can delete what a test stored.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefix = f"conformance-{uuid.uuid4().hex[:12]}-{next(_counter)}/"
        self.written: list[dict[str, Any]] = []

    def _key(self, key: Mapping[str, Any]) -> dict[str, Any]:
        return {**key, "project_key": self.prefix + key["project_key"]} if isinstance(key, Mapping) else key

    # The ignore[misc] below: super() is the store this mixin is mixed into, which mypy cannot see.

    async def append(self, key: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> Any:
        prefixed = self._key(key)
        result = await super().append(prefixed, entries)  # type: ignore[misc]
        if prefixed not in self.written:
            self.written.append(prefixed)
        return result

    async def load(self, key: Mapping[str, Any]) -> Any:
        return await super().load(self._key(key))  # type: ignore[misc]

    async def list_sessions(self, project_key: str) -> Any:
        return await super().list_sessions(self.prefix + project_key)  # type: ignore[misc]

    async def list_session_summaries(self, project_key: str) -> Any:
        return await super().list_session_summaries(self.prefix + project_key)  # type: ignore[misc]

    async def delete(self, key: Mapping[str, Any]) -> Any:
        return await super().delete(self._key(key))  # type: ignore[misc]

    async def list_subkeys(self, key: Mapping[str, Any]) -> Any:
        return await super().list_subkeys(self._key(key))  # type: ignore[misc]


class IsolatedSessionStore(PrefixedProjects, DurableSessionStore):
    """A :class:`~runtime.client.transcripts.DurableSessionStore` that sees only its own projects on the host.

    Takes the arguments of ``DurableSessionStore``. Empty when made, whatever
    the host holds.
    """

    async def purge(self) -> int:
        """Delete every transcript written through this store (main keys first); how many entries went."""
        removed = 0
        for key in sorted(self.written, key=lambda k: parse_session_key(k)[2] != ""):
            removed += await DurableSessionStore.delete(self, key)
        self.written.clear()
        return removed


async def check_session_store_conformance(
    url: str | None = None, *, token: str | None = None, purge: bool = True,
) -> int:
    """Run the SDK's ``SessionStore`` conformance suite against the host at ``url``, a fresh store per contract.

    Args:
        url: the host (default ``$DURABLE_SESSIONS_URL`` or ``http://127.0.0.1:8787``).
        token: its bearer token (default ``$DURABLE_SESSIONS_TOKEN``).
        purge: delete the transcripts the suite wrote once it is done (also when it fails).

    Returns:
        How many stores were made: one per contract plus the probe (15 with
        the SDK's 14 contracts when every optional method is there, as here).

    Raises:
        AssertionError: a contract failed (the SDK's message says which).
        ImportError: ``claude-agent-sdk`` is not installed.
    """
    from claude_agent_sdk.testing import run_session_store_conformance

    stores: list[IsolatedSessionStore] = []

    def make_store() -> IsolatedSessionStore:
        stores.append(IsolatedSessionStore(url, token=token))
        return stores[-1]

    try:
        await run_session_store_conformance(make_store)
    finally:
        for store in stores:
            try:
                if purge:
                    await store.purge()
            finally:
                await store.aclose()
    return len(stores)
