"""``DurableCheckpointer``: LangGraph's checkpointer on a running host, each thread an actor (extra ``langgraph``).

::

    from langgraph.graph import StateGraph
    from runtime.client import DurableCheckpointer

    saver = DurableCheckpointer("http://127.0.0.1:8787", token=token)
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "order-42"}})      # or await graph.ainvoke(...)

Each LangGraph thread is a :class:`actors.checkpoint_agent.CheckpointAgent` of
the host's ``"checkpoints"`` namespace, reached through
``/v1/checkpoints/{thread_id}/...`` (:mod:`runtime.checkpoint_api`, msgpack).
What the saver does is :class:`runtime.checkpointer.ActorCheckpointer`'s;
here is only the transport: async methods go through a
:class:`~runtime.client.http.SessionsClient` (several URLs of a cluster,
``Retry-After`` on a busy host, errors raised as :mod:`common.errors`
classes), sync methods through a blocking ``httpx.Client`` to the first URL.
Both open on first use; :meth:`DurableCheckpointer.aclose` / :meth:`close`
(or ``async with`` / ``with``) close them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import msgpack

from common.wire import MSGPACK, encode_body, error_from_payload, quote_segment
from runtime.checkpoint_api import CHECKPOINTS_PREFIX, ROUTE_OF, CheckpointRoute
from runtime.checkpointer import ActorCheckpointer, SerializerProtocol
from runtime.client.http import SessionsClient, server_url
from runtime.client.failover import parse_urls

__all__ = ["DurableCheckpointer"]


class DurableCheckpointer(ActorCheckpointer):
    """LangGraph's ``BaseCheckpointSaver`` over HTTP: each thread an actor of the host at ``url``.

    Args:
        url: the server's base URL, or several of one cluster (default ``$DURABLE_SESSIONS_URL``
            or ``http://127.0.0.1:8787``).
        token: the bearer token (default ``$DURABLE_SESSIONS_TOKEN``).
        timeout: seconds per request.
        serde: LangGraph's serializer (default: its ``JsonPlusSerializer``).

    Raises (from the methods): the server's errors as their :mod:`common.errors` classes
    (``InvalidInputError`` for a bad argument, ``UnauthorizedError`` for the token), and
    ``ServerUnreachableError`` when no host answers.
    """

    def __init__(self, url: str | Sequence[str] | None = None, *, token: str | None = None,
                 timeout: float | None = 30.0, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self._client = SessionsClient(url, token=token, timeout=timeout, encoding="msgpack")
        self._entered = False
        self._sync: httpx.Client | None = None
        self._timeout = timeout
        self._url = parse_urls(server_url(url))[0]

    # -- transport -------------------------------------------------------------------------

    async def _acall(self, thread_id: str, method: str, /, *args: Any) -> Any:
        if not self._entered:
            await self._client.__aenter__()
            self._entered = True
        route = ROUTE_OF[method]
        path = _path(route, thread_id)
        values = dict(zip(route.params, args))
        if route.verb in ("GET", "DELETE"):
            reply = await self._client.request(route.verb, path, params=values)
        else:
            reply = await self._client.request(route.verb, path, body=values)
        return reply["result"]

    def _call(self, thread_id: str, method: str, /, *args: Any) -> Any:
        if self._sync is None:
            headers = {"Accept": MSGPACK}
            if self._client.token:
                headers["Authorization"] = f"Bearer {self._client.token}"
            self._sync = httpx.Client(base_url=self._url, headers=headers, timeout=self._timeout)
        route = ROUTE_OF[method]
        path = _path(route, thread_id)
        values = dict(zip(route.params, args))
        if route.verb in ("GET", "DELETE"):
            response = self._sync.request(route.verb, path, params={k: v for k, v in values.items() if v is not None})
        else:
            response = self._sync.request(route.verb, path, content=encode_body(values, MSGPACK),
                                          headers={"Content-Type": MSGPACK})
        payload: Any = msgpack.unpackb(response.content, raw=False) if response.content else None
        if response.status_code >= 400:
            raise error_from_payload(response.status_code, payload)
        return payload["result"]

    # -- closing ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close both connection pools (idempotent)."""
        await self._client.aclose()
        self.close()

    def close(self) -> None:
        """Close the blocking connection pool (idempotent)."""
        if self._sync is not None:
            self._sync.close()

    async def __aenter__(self) -> DurableCheckpointer:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    def __enter__(self) -> DurableCheckpointer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _path(route: CheckpointRoute, thread_id: str) -> str:
    path = f"{CHECKPOINTS_PREFIX}{quote_segment(thread_id)}"
    return f"{path}/{route.path}" if route.path else path
