"""Actor ids: 64 hex digits that carry a check of their namespace.

An id is 32 bytes: a 24-byte body and an 8-byte tag, ``HMAC-SHA256(key =
"tag:" + namespace, body)[:8]``. The tag lets a namespace refuse ids made by
another namespace or mistyped ones without looking at the disk. It is an
integrity check, not a secret: ids are addresses, not credentials.

* ``id_from_name``: body = ``HMAC-SHA256("name:" + namespace, name)[:24]``:
  the same name always gives the same id, different namespaces give different ids.
* ``new_unique_id``: 24 random bytes (``secrets``).

Files are named from the hex id only (``<data_dir>/<namespace>/<hex[:2]>/<hex>.sqlite3``),
so no client string ever becomes part of a path.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field

from common.errors import InvalidActorIdError, InvalidNamespaceError

BODY_BYTES = 24
TAG_BYTES = 8
ID_HEX_LENGTH = 2 * (BODY_BYTES + TAG_BYTES)
#: Names whose ids are kept (most recently used first): a server maps the same session names to ids on
#: every request, and each mapping is two HMAC-SHA256 computations.
NAMED_IDS_KEPT = 4096

#: Namespace names become folder names: letters, digits, ``_`` and ``-``,
#: starting with a letter or digit (names starting ``_`` or ``.`` are the host's).
NAMESPACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_HEX = re.compile(r"[0-9a-f]{%d}" % ID_HEX_LENGTH)


@dataclass(frozen=True, slots=True)
class ActorId:
    """An actor's address within a namespace. ``str(actor_id)`` is the 64-hex id.

    Made by :func:`id_from_name`, :func:`new_unique_id` or
    :func:`id_from_string`; equal when namespace and hex are equal.
    """

    namespace: str
    hex: str
    name: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return self.hex

    @property
    def shard(self) -> str:
        """The folder the actor's file lives in (first two hex digits)."""
        return self.hex[:2]


def check_namespace_name(name: object) -> str:
    """Return ``name`` if it is a valid namespace name.

    Raises:
        InvalidNamespaceError: not a ``str`` matching :data:`NAMESPACE_NAME`.
    """
    if not isinstance(name, str) or not NAMESPACE_NAME.fullmatch(name):
        raise InvalidNamespaceError(
            f"namespace names are 1-64 letters, digits, '_' or '-', starting with a letter or digit; got {name!r}"
        )
    return name


def id_from_name(namespace: str, name: str) -> ActorId:
    """The id ``name`` maps to in ``namespace`` (deterministic).

    Raises:
        InvalidActorIdError: ``name`` is not a ``str``.
    """
    if type(name) is str:
        return _named_id(namespace, name)
    if not isinstance(name, str):
        raise InvalidActorIdError(f"actor names are str, not {type(name).__name__}")
    return _named_id.__wrapped__(namespace, name)  # a str subclass: not kept (its equality may differ)


@functools.lru_cache(maxsize=NAMED_IDS_KEPT)
def _named_id(namespace: str, name: str) -> ActorId:
    body = _mac(b"name:", namespace, name.encode("utf-8"))[:BODY_BYTES]
    return ActorId(namespace, _with_tag(namespace, body), name)


def new_unique_id(namespace: str) -> ActorId:
    """A fresh random id in ``namespace``."""
    return ActorId(namespace, _with_tag(namespace, secrets.token_bytes(BODY_BYTES)))


def id_from_string(namespace: str, text: object) -> ActorId:
    """Parse a 64-hex id made by ``namespace`` (upper-case hex is accepted).

    Raises:
        InvalidActorIdError: ``text`` is not 64 hex digits, or its tag shows it
            belongs to another namespace (or was mistyped).
    """
    if not isinstance(text, str):
        raise InvalidActorIdError(f"actor ids are str, not {type(text).__name__}")
    hex_id = text.lower()
    if not _HEX.fullmatch(hex_id):
        raise InvalidActorIdError(f"actor ids are {ID_HEX_LENGTH} hex digits; got {text[:80]!r}")
    body = bytes.fromhex(hex_id[: 2 * BODY_BYTES])
    if _with_tag(namespace, body) != hex_id:
        raise InvalidActorIdError(f"actor id {hex_id} does not belong to namespace {namespace!r}")
    return ActorId(namespace, hex_id)


def _with_tag(namespace: str, body: bytes) -> str:
    return (body + _mac(b"tag:", namespace, body)[:TAG_BYTES]).hex()


def _mac(purpose: bytes, namespace: str, message: bytes) -> bytes:
    return hmac.new(purpose + namespace.encode("utf-8"), message, hashlib.sha256).digest()
