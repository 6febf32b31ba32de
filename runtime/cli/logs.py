"""Logging of the ``durable-sessions`` command: levels, text or JSON lines, and the access log.

``--log-level`` (DEBUG, INFO, WARNING, ERROR, CRITICAL; any case) and
``--log-format`` (``text``: ``<time> <LEVEL> <logger>: <message>``; ``json``:
one object per line, ``{"time", "level", "logger", "message"}`` plus
``"exception"`` with the traceback text when there is one) are accepted before
or after the subcommand. Everything goes to stderr. In text format a
message's control characters are escaped (``\n``, ``\r``, ``\t``,
``\x1b``, ...): a client's string -- a request path with a decoded ``%0A``
-- can neither start a forged line of its own nor send terminal escapes.
JSON lines escape them by construction.

The access log (``serve --access-log``, ``[server] access_log``) is the logger
:data:`runtime.server.config.ACCESS_LOGGER` at INFO: one line per HTTP request or WebSocket, as
hypercorn writes it (client, request line, status, bytes, user agent, and the
time taken). No token ever appears in it: tokens travel in headers (and a
browser's WebSocket token in a subprotocol), never in a URL.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys

__all__ = ["LEVELS", "LOG_FORMATS", "JsonFormatter", "TextFormatter", "configure_logging", "escape_controls"]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str) -> str:
    """``text`` with every control character (C0, DEL, C1, line/paragraph separators) written as an escape."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(), m.group().encode("unicode_escape").decode("ascii")), text)


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger>: <message>``, one line per message: its control characters escaped.

    A traceback (``exc_info``) still follows on lines of its own.
    """

    def __init__(self) -> None:
        super().__init__(_TEXT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        clone = logging.makeLogRecord(record.__dict__)
        clone.message = escape_controls(record.message)
        return super().formatMessage(clone)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (ISO-8601 UTC, ms), level, logger, message[, exception]."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        entry = {
            "time": moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, log_format: str) -> None:
    """Send the process's logs to stderr at ``level`` in ``log_format`` (``text`` or ``json``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise here
