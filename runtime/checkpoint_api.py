"""The HTTP routes of LangGraph thread actors, ``/v1/checkpoints/{thread_id}/...``: one table that the
server (:mod:`runtime.server.checkpoint_routes`) and the client (:mod:`runtime.client.langgraph`) share.

Each row maps one :class:`actors.checkpoint_agent.CheckpointAgent` method to a
verb and a path under ``/v1/checkpoints/{thread_id}`` (the id percent-encoded
as one segment, 1-512 UTF-8 bytes), with its parameters in the order the
method takes them: in the query string for ``GET``, else in a msgpack body
object. The answer is ``{"result": <the method's return value>}``.

Bodies and answers are **msgpack** (``Content-Type``/``Accept:
application/msgpack``): checkpoints and write values are bytes, which JSON
cannot carry; a JSON request is refused 400 naming this.

======  ===============  =================  =====================================================
verb    path             method             parameters
======  ===============  =================  =====================================================
PUT     ``checkpoints``  ``put``            checkpoint_ns, checkpoint_id, parent_checkpoint_id,
                                            type, checkpoint (bytes), metadata (JSON text)
POST    ``writes``       ``put_writes``     checkpoint_ns, checkpoint_id, task_id, task_path,
                                            writes ``[[idx, channel, type, bytes]]``, replace
GET     ``checkpoint``   ``get_tuple``      checkpoint_ns, checkpoint_id (absent: the newest)
POST    ``list``         ``list_checkpoints`` checkpoint_ns, filter, before, limit
DELETE  (none)           ``delete_thread``
GET     ``rows``         ``export``
PUT     ``rows``         ``load``           rows
POST    ``prune``        ``prune``          strategy
======  ===============  =================  =====================================================
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["CHECKPOINTS_PREFIX", "CheckpointRoute", "ROUTES", "ROUTE_OF"]

#: Where the thread actors' routes live; the thread id follows as one path segment.
CHECKPOINTS_PREFIX = "/v1/checkpoints/"


class CheckpointRoute(NamedTuple):
    verb: str
    path: str  # under /v1/checkpoints/{thread_id}; "" for the thread itself
    method: str
    params: tuple[str, ...]


ROUTES: tuple[CheckpointRoute, ...] = (
    CheckpointRoute("PUT", "checkpoints", "put",
                    ("checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "checkpoint", "metadata")),
    CheckpointRoute("POST", "writes", "put_writes",
                    ("checkpoint_ns", "checkpoint_id", "task_id", "task_path", "writes", "replace")),
    CheckpointRoute("GET", "checkpoint", "get_tuple", ("checkpoint_ns", "checkpoint_id")),
    CheckpointRoute("POST", "list", "list_checkpoints", ("checkpoint_ns", "filter", "before", "limit")),
    CheckpointRoute("DELETE", "", "delete_thread", ()),
    CheckpointRoute("GET", "rows", "export", ()),
    CheckpointRoute("PUT", "rows", "load", ("rows",)),
    CheckpointRoute("POST", "prune", "prune", ("strategy",)),
)
#: method name -> its route.
ROUTE_OF = {route.method: route for route in ROUTES}
