"""The session archive: one session as JSON Lines, the format of ``export`` and ``import`` (docs/export-format.md).

Pure data (no I/O, no project imports beyond :mod:`common.errors`), so the
server, the actors and the client-side CLI share one definition. An archive
is UTF-8 text, one JSON object per line, each with a ``"type"``:

==================  ==========================================================================
type                keys (all required; ``null`` only where shown)
==================  ==========================================================================
``header``          ``format`` (:data:`ARCHIVE_FORMAT`), ``version`` (:data:`ARCHIVE_VERSION`),
                    ``sessionId``, ``exportedAt`` (volatile: ISO-8601 UTC)
``message``         ``id``, ``parentId`` (string or null), ``createdAt``, ``message`` (object)
``compaction``      ``id``, ``summary``, ``fromMessageId``, ``toMessageId``, ``createdAt``
``config``          ``key``, ``value`` (the session's small values: metadata, loaded skills, ...)
``contextBlock``    ``label``, ``content``, ``updatedAt`` (the cached prompt is the block ``_system_prompt``)
``searchEntry``     ``label``, ``key``, ``content``, ``createdAt``, ``updatedAt``
``kv``              ``key``, ``value`` (base64 of the stored bytes)
``end``             ``records``: how many records lie between the header and this line
==================  ==========================================================================

The header comes first and ``end`` last; a file without its ``end`` line
was cut short and is refused whole. :func:`parse_archive` checks every
line and raises :class:`ArchiveError` naming the first bad one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from common.errors import InvalidInputError

__all__ = [
    "ARCHIVE_FORMAT",
    "ARCHIVE_VERSION",
    "IDENTITY_KEYS",
    "RECORD_KEYS",
    "VOLATILE_FIELDS",
    "ArchiveError",
    "dump_record",
    "is_archive_head",
    "parse_archive",
]

#: The header's ``format``.
ARCHIVE_FORMAT = "durable-sessions/session-archive"
#: The header's ``version``; a reader refuses a newer one.
ARCHIVE_VERSION = 1
#: Fields whose value may differ between two exports of the same session: ``(record type, key)``.
VOLATILE_FIELDS = (("header", "exportedAt"),)

_STR = (str,)
_OPT = (str, type(None))
#: Each record type's keys and the JSON types their values may have.
RECORD_KEYS: Mapping[str, Mapping[str, tuple[type, ...]]] = {
    "header": {"format": _STR, "version": (int,), "sessionId": _STR, "exportedAt": _STR},
    "message": {"id": _STR, "parentId": _OPT, "createdAt": _STR, "message": (dict,)},
    "compaction": {"id": _STR, "summary": _STR, "fromMessageId": _STR, "toMessageId": _STR, "createdAt": _STR},
    "config": {"key": _STR, "value": _STR},
    "contextBlock": {"label": _STR, "content": _STR, "updatedAt": _STR},
    "searchEntry": {"label": _STR, "key": _STR, "content": _STR, "createdAt": _STR, "updatedAt": _STR},
    "kv": {"key": _STR, "value": _STR},
    "end": {"records": (int,)},
}


#: What names a record of each type inside one session (no two records of a type share it).
IDENTITY_KEYS: Mapping[str, tuple[str, ...]] = {
    "message": ("id",), "compaction": ("id",), "config": ("key",), "contextBlock": ("label",),
    "searchEntry": ("label", "key"), "kv": ("key",),
}


class ArchiveError(InvalidInputError):
    """An archive that is not one (bad JSON, an unknown record, a missing key, cut short) [400].

    ``line`` is the 1-based number of the first bad line; the message starts with ``line <n>:``.
    """

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}", field="archive")
        self.line = line


def dump_record(record: Mapping[str, Any]) -> str:
    """One record as its line (no newline): compact JSON, keys in the order given, non-ASCII kept."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def is_archive_head(first_line: str | bytes) -> bool:
    """``True`` when ``first_line`` is an archive header (any version): how ``import`` tells the format."""
    try:
        record = json.loads(first_line)
    except ValueError:
        return False
    return isinstance(record, dict) and record.get("type") == "header" and record.get("format") == ARCHIVE_FORMAT


def parse_archive(lines: Iterable[str | bytes]) -> list[dict[str, Any]]:
    """Every record of an archive, header first and ``end`` last, each checked.

    Raises:
        ArchiveError: the first bad line (not JSON, not an object, an unknown
            type, a missing key or a value of the wrong type, no header first,
            a newer version, two records of a type naming the same thing
            (:data:`IDENTITY_KEYS`), anything after ``end``, a wrong ``end``
            count, or no ``end`` at all: a cut-short file).
    """
    records: list[dict[str, Any]] = []
    seen: dict[tuple[Any, ...], int] = {}  # (type, identity...) -> the line that first named it
    number = 0
    ended = False
    for number, line in enumerate(lines, start=1):  # noqa: B007 - the last number names a missing end
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        if not line.strip():
            if ended:
                continue
            raise ArchiveError(number, "an empty line (each line holds one record)")
        if ended:
            raise ArchiveError(number, "a record after the end record")
        record = _record(number, line)
        kind = record["type"]
        if number == 1:
            _check_header(record)
        elif kind == "header":
            raise ArchiveError(number, "a second header")
        elif kind == "end":
            if record["records"] != len(records) - 1:
                raise ArchiveError(number, f"the end record counts {record['records']} records, the file holds "
                                           f"{len(records) - 1}")
            ended = True
        elif (keys := IDENTITY_KEYS.get(kind)) is not None:
            identity = (kind, *(record[key] for key in keys))
            first = seen.setdefault(identity, number)
            if first != number:
                named = " ".join(f"{key} {record[key]!r}" for key in keys)
                raise ArchiveError(number, f"a second {kind} record with {named} (the first is on line {first})")
        records.append(record)
    if not records:
        raise ArchiveError(1, "an empty file (an archive starts with its header record)")
    if not ended:
        raise ArchiveError(number + 1, "the archive ends before its end record: the file was cut short")
    return records


def _record(number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ArchiveError(number, f"not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise ArchiveError(number, "not a JSON object")
    kind = record.get("type")
    keys = RECORD_KEYS.get(kind) if isinstance(kind, str) else None
    if keys is None:
        raise ArchiveError(number, f"unknown record type {kind!r} (known: {', '.join(RECORD_KEYS)})")
    for key, types in keys.items():
        if key not in record:
            raise ArchiveError(number, f"a {kind} record needs {key!r}")
        value = record[key]
        if not isinstance(value, types) or (isinstance(value, bool) and int in types):
            raise ArchiveError(number, f"{kind}.{key} must be {_describe(types)}, not {type(value).__name__}")
    return record


def _check_header(record: dict[str, Any]) -> None:
    if record["type"] != "header" or record.get("format") != ARCHIVE_FORMAT:
        raise ArchiveError(1, f"the first record must be the header with format {ARCHIVE_FORMAT!r}")
    if record["version"] > ARCHIVE_VERSION:
        raise ArchiveError(1, f"archive version {record['version']} is newer than this release reads "
                              f"({ARCHIVE_VERSION})")
    if not record["sessionId"]:
        raise ArchiveError(1, "header.sessionId is empty")


def _describe(types: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", dict: "an object", type(None): "null"}
    return " or ".join(names[t] for t in types)
