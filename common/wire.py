"""The wire protocol shared by the server and the client: bodies, errors, paths.

Part of :mod:`common`, the vocabulary below every other package: the server
and the client both import it, and it imports neither (nor quart, hypercorn,
trio or apsw; of the project only :mod:`common.errors` and
:mod:`common.shapes`), so a program that only talks to a host loads httpx
and msgpack.

Bodies are JSON (``application/json``, the default) or msgpack
(``application/msgpack``): a request says which with ``Content-Type``, and
gets msgpack back when its ``Accept`` prefers it.

Errors travel as ``{"error": {"type", "message"}}`` plus ``"field"`` when
the error names one (400s). ``type`` is the exception's class name, one of
the tree of :mod:`common.errors`, so the client raises the same class again
(:func:`error_from_payload`); the HTTP status is the class's ``status``.

Session ids are the caller's own strings: 1 to 512 UTF-8 bytes, sent
percent-encoded as one path segment (:func:`quote_segment`) under
:data:`SESSIONS_PREFIX`; transcripts live under :data:`TRANSCRIPTS_PREFIX`.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote, unquote

import msgpack

from common import errors
from common.errors import InvalidInputError, PayloadTooLargeError, UnsupportedMediaTypeError
from common.shapes import LATEST_LEAF, MAIN_SUBPATH, encode_entry, parse_session_key

JSON = "application/json"
MSGPACK = "application/msgpack"
#: Longest session id, in UTF-8 bytes.
MAX_SESSION_ID_BYTES = 512
#: Default request body (and WebSocket frame) limit: 8 MiB.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: Default most values a request body may hold inside arrays and objects (:func:`decode_body`'s
#: ``max_items``): each array and object counts, and so does each of their elements and members.
DEFAULT_MAX_BODY_ITEMS = 100_000
#: Prefix of every session route (``/v1/sessions/{session_id}/...``).
SESSIONS_PREFIX = "/v1/sessions/"
#: The custom method of ``POST /v1/sessions/{id}:restore`` (point-in-time restore, cluster mode).
RESTORE_SUFFIX = ":restore"
#: Prefix of the Claude Agent SDK transcript routes.
TRANSCRIPTS_PREFIX = "/v1/transcripts"

__all__ = [
    "CLOSE_RECONNECT", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_BODY_ITEMS", "HOP_HEADER", "JSON", "LATEST_LEAF",
    "MAIN_SUBPATH",
    "MAX_SESSION_ID_BYTES", "MSGPACK", "OWNER_HEADER", "RESTORE_SUFFIX", "SESSIONS_PREFIX", "TRANSCRIPTS_PREFIX", "check_session_id",
    "decode_body", "encode_body", "encode_entry", "error_from_payload", "error_payload", "media_type",
    "parse_session_key", "payload_for", "quote_segment", "status_of", "unquote_segment",
]


def _error_classes() -> dict[str, type[errors.DurableSessionsError]]:
    return {
        name: value for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.DurableSessionsError)
    }


#: Error classes a client can raise again, by ``type`` name.
ERROR_CLASSES = _error_classes()


def status_of(error: BaseException) -> int:
    """HTTP status for ``error``: its class's ``status`` when it has one, else 500."""
    status = getattr(type(error), "status", 500)
    return status if isinstance(status, int) and 400 <= status <= 599 else 500


def error_payload(error_type: str, message: str, field: str | None = None) -> dict[str, Any]:
    """``{"error": {"type", "message"[, "field"]}}``."""
    body: dict[str, Any] = {"type": error_type, "message": message}
    if field is not None:
        body["field"] = field
    return {"error": body}


def payload_for(error: BaseException) -> dict[str, Any]:
    """The error body for a known (non-500) error: its class name, message and ``field``."""
    field = getattr(error, "field", None)
    return error_payload(type(error).__name__, str(error), field if isinstance(field, str) else None)


def error_from_payload(status: int, payload: Any) -> Exception:
    """Rebuild the exception an error body describes.

    A known ``type`` gives an instance of that class with the same message
    (and ``field``, ``kind``/``key`` set to what the body says or ``None``);
    anything else an :class:`HttpError` carrying ``status``.
    """
    body = payload.get("error") if isinstance(payload, dict) else None
    error: errors.DurableSessionsError
    if not isinstance(body, dict):
        error = errors.HttpError(f"HTTP {status}: {str(payload)[:200]}")
        error.status = status
        return error
    message = str(body.get("message", ""))
    cls = ERROR_CLASSES.get(str(body.get("type")))
    if cls is None:
        error = errors.HttpError(f"{body.get('type')}: {message}")
        error.status = status
        return error
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    for name in ("field", "kind", "key"):
        try:
            setattr(error, name, body.get(name))
        except AttributeError:  # pragma: no cover - a slotted class
            pass
    return error


# -- bodies ------------------------------------------------------------------------------


def media_type(content_type: str | None) -> str:
    """The bare media type of a ``Content-Type`` value (JSON when absent)."""
    if not content_type:
        return JSON
    return content_type.split(";", 1)[0].strip().lower() or JSON


def decode_body(data: bytes, content_type: str | None, *, max_items: int | None = None) -> Any:
    """Parse a request body (``None`` when empty).

    ``max_items`` bounds the work: the body may hold at most that many values
    inside arrays and objects (each array and object counts, and so does each
    element and each member); ``None``: no bound. A JSON body is measured
    before it is parsed (:func:`json_items`), a msgpack body while it is
    (no single array or map longer than the bound is even allocated), so a
    body of a million empty arrays costs about as little as its bytes.

    Raises:
        UnsupportedMediaTypeError: neither JSON nor msgpack.
        PayloadTooLargeError: (``field="body"``) more than ``max_items`` values
            in arrays and objects.
        InvalidInputError: (``field="body"``) the bytes do not parse, nest deeper
            than the parser can follow, or (JSON) hold a lone surrogate escape
            such as ``"\\ud800"``, which no stored text can hold. (``NaN`` and
            ``Infinity`` literals parse; the layer that stores a value refuses them.)
    """
    kind = media_type(content_type)
    if kind not in (JSON, MSGPACK):
        raise UnsupportedMediaTypeError(f"send {JSON} or {MSGPACK}, not {kind}")
    if not data:
        return None
    name = "msgpack" if kind == MSGPACK else "JSON"
    if max_items is not None and kind == JSON and json_items(data, max_items) > max_items:
        raise _too_many_items(max_items)
    try:
        if kind == MSGPACK:
            return _unpack(data, max_items)
        value = json.loads(data)
    except (RecursionError, msgpack.StackError):
        raise InvalidInputError(f"the body is not valid {name}: it is nested too deeply",
                                             field="body") from None
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        reason = str(exc) or type(exc).__name__
        raise InvalidInputError(f"the body is not valid {name}: {reason}", field="body") from None
    if _SURROGATE_ESCAPE.search(data) and _has_lone_surrogate(value):
        raise InvalidInputError(
            "the body is not valid JSON: it holds a lone UTF-16 surrogate (\\ud800-\\udfff)", field="body")
    return value


def _too_many_items(max_items: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"the body holds more than {max_items} values in arrays and objects, "
                                "the server's limit (server.max_body_items)", field="body")


class _TooManyItems(Exception):
    """Raised inside msgpack's hooks once the body's bound is passed (never escapes :func:`decode_body`)."""


def _unpack(data: bytes, max_items: int | None) -> Any:
    """``msgpack.unpackb`` counting values as arrays and maps complete (see :func:`decode_body`)."""
    if max_items is None:
        return msgpack.unpackb(data, raw=False, strict_map_key=True)
    seen = 0

    def count(container: Any) -> Any:
        nonlocal seen
        seen += len(container) + 1
        if seen > max_items:
            raise _TooManyItems
        return container

    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, list_hook=count, object_hook=count,
                               max_array_len=max_items, max_map_len=max_items)
    except _TooManyItems:
        raise _too_many_items(max_items) from None
    except ValueError as exc:
        if "exceeds max_" in str(exc):  # one array or map longer than the bound on its own
            raise _too_many_items(max_items) from None
        raise


# A JSON string: its quotes and everything between them (escapes included), matched without backtracking.
_JSON_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"')


def json_items(data: bytes, limit: int) -> int:
    """How many values ``data`` (JSON text) holds inside arrays and objects, as :func:`decode_body`
    counts them, or an estimate above ``limit`` once it is clear the count passes it.

    Costs a few byte counts (C speed) for most bodies; only a body whose brackets and commas,
    strings included, pass ``limit`` is scanned once more with its strings left out. Does not
    validate: text that is not JSON gets some count, and the parser refuses it afterwards.
    """
    commas = data.count(b",")
    if commas <= limit:
        bound = 2 * (data.count(b"[") + data.count(b"{")) + commas  # members <= commas + containers
        if bound <= limit:
            return bound
    # Every string is a key or an element (a member has at most two): too many quotes, too many items.
    quotes = data.count(b'"')
    if quotes // 2 > 2 * limit + 1 and (quotes - data.count(b'\\"')) // 2 > 2 * limit + 1:
        return 2 * limit + 2
    bare = _without_strings(data, quotes)
    containers = bare.count(b"[") + bare.count(b"{")
    empty = len(_EMPTY_CONTAINER.findall(bare)) if containers <= limit else 0
    return 2 * containers - empty + bare.count(b",")


_EMPTY_CONTAINER = re.compile(rb"\[\s*\]|\{\s*\}")
#: Quotes past which :func:`_without_strings` lets the regex find the strings (short ones, many).
_FEW_QUOTES = 8192


def _without_strings(data: bytes, quotes: int) -> bytes:
    """``data`` (holding ``quotes`` double quotes) with every JSON string replaced by ``""``. Few
    strings (long texts): found with ``bytes.find`` (memchr speed); many: with one regex substitution."""
    if quotes > _FEW_QUOTES:
        return _JSON_STRING.sub(b'""', data)
    gaps, position = [], 0
    while (start := data.find(b'"', position)) >= 0:
        gaps.append(data[position:start])
        end = data.find(b'"', start + 1)
        if end > 0 and data[end - 1] == 0x5C:  # an escaped quote, perhaps: let the regex walk the escapes
            found = _JSON_STRING.match(data, start)
            end = found.end() - 1 if found else -1
        if end < 0:  # an unterminated string: nothing more is structure
            return b'""'.join(gaps)
        position = end + 1
    gaps.append(data[position:])
    return b'""'.join(gaps)


# JSON may spell a UTF-16 surrogate as an escape; a pair decodes to one character, a lone one
# stays a surrogate that no UTF-8 text (nor SQLite) can hold. Only bodies with such an escape are checked.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def _has_lone_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except RecursionError:  # pragma: no cover - it decoded at this depth; later layers judge it
        return False
    return False


def encode_body(value: Any, kind: str) -> bytes:
    """Serialise a response body as ``kind`` (:data:`JSON` or :data:`MSGPACK`)."""
    if kind == MSGPACK:
        packed: bytes = msgpack.packb(value, use_bin_type=True)
        return packed
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_json_default).encode("utf-8")


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON data")


# -- ids in paths ---------------------------------------------------------------------------


def quote_segment(value: str) -> str:
    """``value`` as one percent-encoded path segment (every reserved character encoded).

    The segments ``.`` and ``..`` are sent as ``%2E`` and ``%2E%2E``: as they
    are, clients and proxies remove them from the path (RFC 3986 dot segments).
    """
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


def unquote_segment(segment: str, name: str) -> str:
    """Decode one path segment as UTF-8.

    Raises:
        InvalidInputError: (``field=name``) bad percent-encoding or not UTF-8.
    """
    try:
        return unquote(segment, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{name} is not valid UTF-8", field=name) from None


def check_session_id(session_id: str) -> str:
    """Return ``session_id`` when it is 1 to 512 UTF-8 bytes.

    Raises:
        InvalidInputError: (``field="session_id"``) empty or too long.
    """
    size = len(session_id.encode("utf-8", "surrogatepass"))
    if size == 0:
        raise InvalidInputError("session_id must not be empty", field="session_id")
    if size > MAX_SESSION_ID_BYTES:
        raise InvalidInputError(
            f"session_id is {size} UTF-8 bytes; the limit is {MAX_SESSION_ID_BYTES}", field="session_id"
        )
    return session_id


# -- several hosts (``serve --cluster``) ------------------------------------------------------

#: Request header a host adds when it forwards a request to the actor's owner (value: its host id).
#: An owner never forwards a request that carries it again: it answers 503 instead.
HOP_HEADER = "X-Durable-Sessions-Hop"
#: Response header of a cluster host naming the advertised URL of the session's owner, so a
#: client that knows that URL can send the session's next requests there directly.
OWNER_HEADER = "X-Durable-Sessions-Owner"
#: WebSocket close code asking the client to connect again (RFC 6455 registry: "Service Restart"):
#: the session's owner moved or stopped; any host of the cluster serves the new socket.
CLOSE_RECONNECT = 1012
