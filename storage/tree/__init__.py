"""One message-tree engine for both databases: the rules written once, the statements per dialect.

The message tree of a session -- parents, overlay ids, each row's place
(depth, running byte and token totals, jump pointers), path walks,
windows, token totals with the overlays that apply -- is a set of
operations that yield queries (:mod:`storage.tree.steps`):

* :mod:`storage.tree.reads`, :mod:`storage.tree.writes`,
  :mod:`storage.tree.places` -- the rules, dialect-free;
* :mod:`storage.tree.rows` -- the records handed out and taken in
  (:class:`CompactionRow`, :class:`SearchRow`, :class:`NewMessage`,
  :class:`TokenPlace`, :class:`PathTokens`);
* :mod:`storage.tree.sqlite`, :mod:`storage.tree.postgres` -- each
  database's statements and the few steps that differ (search rows, the
  active leaf, ``seq`` values, locking).

:class:`storage.messages.MessageStore` drives them synchronously on apsw,
inside the actor's transaction (no ``await``: the input gate holds);
:class:`storage.postgres.PostgresSessionProvider` drives them on psycopg's
worker thread. Both therefore offer the same methods with the same
results, one synchronous and one ``async``.

Loading this package loads neither apsw nor psycopg.
"""

from __future__ import annotations

from .rows import (
    PATH_CHUNK_BYTES,
    PATH_CHUNK_ROWS,
    CompactionRow,
    NewMessage,
    PathTokens,
    SearchRow,
    TokenPlace,
    to_iso8601,
)

__all__ = [
    "PATH_CHUNK_BYTES",
    "PATH_CHUNK_ROWS",
    "CompactionRow",
    "NewMessage",
    "PathTokens",
    "SearchRow",
    "TokenPlace",
    "to_iso8601",
]
