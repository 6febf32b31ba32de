"""How the tree rules talk to a database: operations that yield steps, and what a dialect provides.

An :data:`Operation` is a generator. It yields a step -- ``(statement, args)``,
one statement run with positional ``args``, or :class:`Many`, one statement
run once per argument tuple -- and receives the step's rows as a list of
tuples (``[]`` for :class:`Many`), then returns its result. It never touches
a connection, so the same operation runs

* synchronously on apsw with :func:`drive` (inside the actor's transaction:
  no ``await`` between the steps, so the input gate holds), and
* on psycopg's worker thread (:mod:`storage.postgres.messages`, which
  hands each step to :mod:`storage.postgres.connection`).

A statement is whatever the dialect's driver runs: SQL text for SQLite, a
:class:`~storage.tree.postgres.PgStatement` for Postgres. The rules name
statements only through a :class:`Dialect`, so the text stays per database
(``storage/tree/sqlite.py``, ``storage/tree/postgres.py``) while the rules
are written once (``storage/tree/reads.py``, ``writes.py``, ``places.py``).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .rows import NewMessage

__all__ = ["Connection", "Dialect", "Many", "Operation", "Place", "Rows", "Step", "drive"]

T = TypeVar("T")

#: The rows of one step, each a tuple in the statement's column order.
Rows = list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Many:
    """One statement run once per tuple of ``args`` (``executemany``); its rows are ``[]``."""

    statement: Any
    args: Sequence[Sequence[Any]]


#: One step: ``(statement, args)``, or :class:`Many`.
Step = tuple[Any, Sequence[Any]] | Many

#: A call on the tree: yields steps, receives each step's rows, returns the call's result.
Operation = Generator[Step, Rows, T]

#: ``(depth, path_bytes, tokens, path_tokens, jump_seq)`` of a row: what it knows of its place.
Place = tuple[int, int, int, int, int | None]


class Dialect(Protocol):
    """What a database gives the tree rules: statements (by name) and the few steps that differ.

    Every statement takes the session id first and returns the columns named
    here, in this order; ``ref`` is how a row points at its parent for a
    walk (SQLite: the parent's ``seq``; Postgres: its id). ``ids`` arguments
    are passed through :meth:`id_list`.

    * ``LOCK (s)`` -- taken first by every write (``None``: writes of one
      session are already serialised);
    * ``GET (s, id) -> content``; ``EXISTS (s, id) -> 1``; ``COUNT (s) -> n``;
    * ``LATEST_LEAF (s) -> id`` (no row, or ``NULL``: an empty session);
    * ``PATH_CONTENT (s, leaf) -> content`` root first; ``PATH_JSON (s, leaf)
      -> (array text leaf first | NULL when too big, count)``;
      ``PATH_STATS (s, leaf) -> (id, role, bytes)`` root first;
    * ``CHUNK_FROM_LEAF (s, leaf, max_rows, max_bytes)`` and ``CHUNK_FROM_ROW
      (s, ref, max_rows, max_bytes, below) -> (seq, parent ref, content)``
      leaf first;
    * ``WINDOW (s, leaf, min_rows, max_bytes) -> (parent ref, content)`` root first;
    * ``PLACE (s, id) -> (depth, path_bytes)``; ``CHILDREN (s, id) -> content``;
    * ``COMPACTIONS (s) -> CompactionRow columns``; ``COMPACTION_END (s, id) -> to_message_id``;
      ``ADD_COMPACTION (s, id, summary, from, to) -> (seq, created_at)``;
    * ``TOKEN_PLACES (s, ids) -> TokenPlace columns``; ``CLIMB (s, seq, depth) -> seq``;
      ``LATEST_TOKENS (s) -> (leaf id, path_tokens, has compactions)``;
    * ``LINK (s, id)`` and ``LATEST_LINK (s)`` (the latest leaf's, its id
      first) ``-> (seq, depth, path_bytes, path_tokens, jump depth, jump's
      jump seq, its depth)``; ``DEPTH_JUMP (seq) -> (depth, jump seq or itself)``;
    * ``STORED_IDS (s, ids) -> id``; ``OLD_SIZE (s, id) -> (seq, bytes, tokens)``;
      ``SHIFT (s, id, seq, bytes, tokens)`` moves the path totals of ``id``
      and every row below it;
    * ``ROW_FOR_DELETE (s, id) -> (seq, parent_id, parent ref)``;
      ``SUBTREES (s, ids) -> (seq, id, parent_id, bytes, tokens)`` parents first;
      ``SET_PLACE`` (many: ``depth, path_bytes, path_tokens, jump_seq, seq``).
    """

    LOCK: Any
    GET: Any
    EXISTS: Any
    COUNT: Any
    LATEST_LEAF: Any
    PATH_CONTENT: Any
    PATH_JSON: Any
    PATH_STATS: Any
    CHUNK_FROM_LEAF: Any
    CHUNK_FROM_ROW: Any
    WINDOW: Any
    PLACE: Any
    CHILDREN: Any
    COMPACTIONS: Any
    COMPACTION_END: Any
    ADD_COMPACTION: Any
    TOKEN_PLACES: Any
    CLIMB: Any
    LATEST_TOKENS: Any
    LINK: Any
    LATEST_LINK: Any
    DEPTH_JUMP: Any
    STORED_IDS: Any
    OLD_SIZE: Any
    SHIFT: Any
    ROW_FOR_DELETE: Any
    SUBTREES: Any
    SET_PLACE: Any

    def id_list(self, ids: Iterable[str]) -> Any:
        """``ids`` as the one argument an ``ids`` statement takes."""
        ...

    def insert(
        self, s: str, message_id: str, role: str, content: str, text: str, tools: str,
        parent: str | None, parent_seq: int | None, place: Place,
    ) -> Operation[int | None]:
        """Store one message (and what it is searched by); its ``seq``, ``None`` when the id is taken."""
        ...

    def new_seqs(self, count: int) -> Operation[list[int]]:
        """``count`` rising ``seq`` values for new rows, each above every stored one."""
        ...

    def insert_chain(self, s: str, rows: list[tuple[int, NewMessage, str | None, int | None, Place]]) -> Operation[None]:
        """Store ``(seq, message, parent, parent seq, place)`` rows, ids known to be new, parents first."""
        ...

    def rewrite(
        self, s: str, seq: int, message_id: str, role: str, content: str, text: str, tools: str, tokens: int
    ) -> Operation[None]:
        """Replace the role, content, tokens (and search text) of the stored row ``seq``."""
        ...

    def remove(self, s: str, seq: int, message_id: str, parent: str | None, parent_ref: Any) -> Operation[list[str]]:
        """Delete row ``seq`` and hand its children to ``parent``; the ids of the children moved."""
        ...

    def after_delete(self, s: str, deleted: list[str]) -> Operation[None]:
        """What follows deleting ``deleted`` (each stored before) in the same transaction."""
        ...

    def clear(self, s: str) -> Operation[None]:
        """Delete every message, compaction and search row of session ``s``."""
        ...


class Connection(Protocol):
    """What :func:`drive` runs steps on (apsw's ``Connection``)."""

    def execute(self, statement: Any, args: Sequence[Any]) -> Any:
        """A cursor whose ``fetchall()`` gives the rows."""
        ...

    def executemany(self, statement: Any, args: Sequence[Sequence[Any]]) -> Any:
        """Run ``statement`` once per tuple of ``args``."""
        ...


def drive(connection: Connection, op: Operation[T]) -> T:
    """Run every step of ``op`` synchronously on ``connection`` and return its result.

    Nothing here suspends: run inside a transaction, the whole operation is
    one synchronous call (the hot path: a few hundred nanoseconds per step
    beyond the statement itself, ``benchmarks/bench_tree_engine.py``).
    """
    send, execute = op.send, connection.execute
    try:
        step = next(op)
        while True:
            if step.__class__ is Many:
                connection.executemany(step.statement, step.args)
                step = send([])
            else:  # a (statement, args) tuple: the `__class__ is` test (the hot path's) does not narrow
                step = send(execute(*step).fetchall())  # type: ignore[misc]
    except StopIteration as done:
        result: T = done.value
        return result
