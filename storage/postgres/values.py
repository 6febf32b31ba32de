"""Checks of the values the Postgres providers store, before anything is sent.

Postgres ``TEXT`` holds UTF-8 without NUL, so a value the SQLite path would
store can still be refused here: each check raises
:class:`~common.errors.InvalidInputError` naming the field,
never a driver exception, and runs before the call's transaction starts.

* :func:`check_text` -- a stored value (id, role, message JSON, block
  content, ...): a ``str`` without NUL and without lone UTF-16 surrogates,
  at most ``max_bytes`` UTF-8 bytes.
* :func:`lookup_key` -- an id read back (or deleted, updated, used as a
  parent): one holding NUL cannot be stored, so it names no row -- the
  same answer as an unknown id, as on SQLite (where it could be stored);
* :func:`search_text` -- the text a message is searched by (its text parts,
  its tool calls): lone surrogates are refused, NUL characters become
  spaces (the text is an index, not data: the message's JSON keeps them,
  escaped), and it is cut to a whole character at
  :data:`SEARCH_TEXT_MAX_BYTES` / :data:`SEARCH_TOOLS_MAX_BYTES` so its
  ``tsvector`` always fits Postgres' 1 MB limit (worst case ~3 bytes of
  ``tsvector`` per byte of text). A hit's ``content`` is that text.
"""

from __future__ import annotations

from typing import Any

from common.errors import InvalidInputError

#: Most UTF-8 bytes of one stored value: SQLite's string limit, the bound of the SQLite path.
MAX_VALUE_BYTES = 1_000_000_000
#: Most UTF-8 bytes of a message's text parts kept for search (``text_content``).
SEARCH_TEXT_MAX_BYTES = 256 * 1024
#: Most UTF-8 bytes of a message's tool names and inputs kept for search (``tools_content``).
SEARCH_TOOLS_MAX_BYTES = 64 * 1024


def _type_name(value: Any) -> str:
    return type(value).__name__


def utf8_size(value: str, field: str) -> int:
    """UTF-8 bytes of ``value``.

    Raises:
        InvalidInputError: ``value`` holds a lone UTF-16 surrogate.
    """
    if value.isascii():
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            f"{field} holds a lone UTF-16 surrogate at index {exc.start}, which is not text", field=field
        ) from None


def check_text(value: Any, field: str, *, max_bytes: int = MAX_VALUE_BYTES) -> str:
    """``value`` when Postgres can store it as ``TEXT``; ``field`` names it in errors.

    Raises:
        InvalidInputError: not a ``str``; holds a NUL character or a lone
            surrogate; more than ``max_bytes`` UTF-8 bytes.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{field} must be a string, not {_type_name(value)}", field=field)
    if "\x00" in value:
        raise InvalidInputError(
            f"{field} holds a NUL character at index {value.index(chr(0))}, which Postgres text cannot store",
            field=field,
        )
    size = utf8_size(value, field)
    if size > max_bytes:
        raise InvalidInputError(f"{field} is {size} UTF-8 bytes, over the limit of {max_bytes}", field=field)
    return value


def lookup_key(value: Any, field: str) -> str | None:
    """An id to look up: ``value`` when it could be stored, ``None`` when it holds NUL (so no row
    can have it: the caller answers "not found" without asking Postgres).

    Raises:
        InvalidInputError: not a ``str``, or holds a lone surrogate.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{field} must be a string, not {_type_name(value)}", field=field)
    utf8_size(value, field)
    return None if "\x00" in value else value


def check_optional_text(value: Any, field: str) -> str | None:
    """:func:`check_text`, with ``None`` allowed."""
    return None if value is None else check_text(value, field)


def check_int(value: Any, field: str) -> int:
    """``value`` when it is an ``int`` (not a ``bool``) that fits a ``BIGINT``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInputError(f"{field} must be an integer, not {_type_name(value)}", field=field)
    if not -(2**63) <= value < 2**63:
        raise InvalidInputError(f"{field} is out of the BIGINT range", field=field)
    return value


def check_number(value: Any, field: str) -> int | float:
    """``value`` when it is an ``int`` or ``float`` (not a ``bool``, not NaN); ints must fit a ``BIGINT``."""
    if isinstance(value, float) and value == value:
        return value
    if isinstance(value, float):
        raise InvalidInputError(f"{field} must be a number, not NaN", field=field)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInputError(f"{field} must be a number, not {_type_name(value)}", field=field)
    return check_int(value, field)


def search_text(value: Any, field: str, max_bytes: int) -> str:
    """The searchable form of ``value``: NUL -> space, cut to ``max_bytes`` at a character boundary.

    Raises:
        InvalidInputError: not a ``str``, or holds a lone surrogate.
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{field} must be a string, not {_type_name(value)}", field=field)
    value = value.replace("\x00", " ")
    if utf8_size(value, field) <= max_bytes:
        return value
    return value.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")
