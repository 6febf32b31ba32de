"""Schemathesis hooks for the property-based run (``SCHEMATHESIS_HOOKS=tests.support.schemathesis_hooks``).

The server speaks msgpack as well as JSON (``Content-Type`` / ``Accept:
application/msgpack``), and the OpenAPI document says so: these let
Schemathesis send msgpack bodies and validate msgpack replies against the
same schemas instead of skipping them.
"""

from __future__ import annotations

from typing import Any

import msgpack
import schemathesis


def _packable(value: Any) -> Any:
    """``value`` as a msgpack client can send it: an integer beyond 64 bits becomes a float."""
    if isinstance(value, dict):
        return {k: _packable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_packable(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return float(value)
    return value


@schemathesis.serializer("application/msgpack")
def to_msgpack(ctx: Any, value: Any) -> bytes:
    """The request body as msgpack."""
    return value if isinstance(value, bytes) else msgpack.packb(_packable(value), use_bin_type=True)


@schemathesis.deserializer("application/msgpack")
def from_msgpack(ctx: Any, response: Any) -> Any:
    """A msgpack reply as the JSON data it stands for."""
    return msgpack.unpackb(response.content, raw=False)
