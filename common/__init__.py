"""The vocabulary every layer of durable-sessions shares, at the bottom of the house.

Nothing here persists anything or runs anything: storage, actors, the runtime
and the Python client all import these modules, and they import nothing of
the project outside :mod:`common` (nor apsw, trio, quart or psycopg), so
``import common.wire`` stays as light as a client needs.

* :mod:`common.errors` -- the one exception tree (each class's HTTP status
  and whether a repeat can succeed);
* :mod:`common.shapes` -- plain values: :data:`~common.shapes.LATEST_LEAF`,
  the overlay id prefix, transcript keys;
* :mod:`common.wire` -- the wire format server and client share: bodies
  (JSON/msgpack), error payloads, path prefixes, session ids;
* :mod:`common.openai_items`, :mod:`common.openai_session` -- the OpenAI
  Agents SDK's items as Session messages, and its ``Session`` protocol over
  any Session-like target (pure adapters; the SDK itself is optional);
* :mod:`common.transcript_summary` -- the Claude Agent SDK's session-summary
  fold, without the SDK.

The modules moved here from ``storage/`` and ``runtime/wire.py``; the old
import paths still work (``common.errors.NotOwnerError is
common.errors.NotOwnerError``).
"""
