"""The records the message tree hands out and takes in, the same on every database.

Plain frozen dataclasses and constants, loaded without SQLite or Postgres:
:class:`CompactionRow`, :class:`SearchRow`, :class:`NewMessage`,
:class:`TokenPlace`, :class:`PathTokens`, and :func:`to_iso8601`. Stored
times are UTC text with milliseconds (``YYYY-MM-DD HH:MM:SS.SSS``) on both
databases.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "PATH_CHUNK_BYTES",
    "PATH_CHUNK_ROWS",
    "CompactionRow",
    "NewMessage",
    "PathTokens",
    "SearchRow",
    "TokenPlace",
    "to_iso8601",
    "utf8_length",
]

#: ``path_chunks``: most UTF-8 bytes of stored JSON in one chunk (a larger row comes alone) ...
PATH_CHUNK_BYTES = 1 << 20
#: ... and most rows in one chunk.
PATH_CHUNK_ROWS = 1024


@dataclass(frozen=True, slots=True)
class CompactionRow:
    """One ``assistant_compactions`` row; ``created_at`` as stored (UTC, ms)."""

    seq: int
    id: str
    summary: str
    from_message_id: str
    to_message_id: str
    created_at: str


@dataclass(frozen=True, slots=True)
class SearchRow:
    """One search hit: the message's id and role, its searched text, when it was stored."""

    id: str
    role: str
    content: str
    created_at: str


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message ready to store, as ``append_chain`` takes it.

    ``content`` is the stored JSON, ``text`` the text it is searched by
    (``""``: none), ``tools`` its tool calls, searched with the text
    (``""``: none), ``tokens`` the message's estimated tokens (summed into
    ``path_tokens``).
    """

    id: str
    role: str
    content: str
    text: str = ""
    tools: str = ""
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class TokenPlace:
    """Where a stored message sits, for token sums: ``tokens`` its own, ``path_tokens`` root -> it."""

    id: str
    seq: int
    depth: int
    tokens: int
    path_tokens: int


@dataclass(frozen=True, slots=True)
class PathTokens:
    """The stored token total of a path and the overlays that apply on it.

    ``total`` is ``path_tokens`` of the leaf (every stored message root ->
    leaf); ``hidden`` pairs each compaction that applies on this path (as
    ``get_history`` applies them) with the tokens of the messages it hides.
    The visible estimate is ``total - sum(hidden) + <the overlays' own tokens>``.
    """

    total: int
    hidden: tuple[tuple[CompactionRow, int], ...]


def to_iso8601(created_at: str) -> str:
    """Stored ``YYYY-MM-DD HH:MM:SS.SSS`` (UTC) -> ``YYYY-MM-DDTHH:MM:SS.SSSZ``."""
    return f"{created_at[:10]}T{created_at[11:]}Z"


def utf8_length(text: str) -> int:
    """UTF-8 bytes of ``text`` (a lone surrogate counts as its 3 bytes, as SQLite stores it)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
