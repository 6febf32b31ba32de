"""Reading request bodies and sending answers when the client is slow or gone.

* :func:`read_body` reads the request body within the server's body
  timeout (quart's ``BODY_TIMEOUT``, from ``ServerSettings.body_timeout_s``):
  a body that does not arrive in time is answered 408
  :class:`~common.errors.RequestTimeoutError`, one over the limit 413
  :class:`~common.errors.PayloadTooLargeError` -- never an anonymous 500.
* :func:`quiet_send` wraps an ASGI ``send``: when the client has already gone
  (hypercorn is closing the socket while the answer is being written), the
  failure is logged at debug level and the answer dropped, instead of
  hypercorn logging "Error in ASGI Framework" for a client that merely hung up.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import h11
import trio
from quart import current_app, g, request
from werkzeug.exceptions import RequestEntityTooLarge, RequestTimeout

from common.errors import PayloadTooLargeError, RequestTimeoutError

__all__ = ["body_read", "body_timed_out", "client_gone", "quiet_send", "read_body"]

logger = logging.getLogger(__name__)

Send = Callable[[dict[str, Any]], Awaitable[None]]


async def read_body() -> bytes:
    """The whole request body.

    Raises:
        PayloadTooLargeError: it is larger than ``MAX_CONTENT_LENGTH``.
        RequestTimeoutError: it did not all arrive within ``BODY_TIMEOUT`` seconds
            (the connection is closed after the answer).
    """
    try:
        body = await request.get_data(cache=True, as_text=False, parse_form_data=False)  # the bytes overload
    except RequestEntityTooLarge:
        limit = current_app.config.get("MAX_CONTENT_LENGTH")
        raise PayloadTooLargeError(f"the body is larger than {limit} bytes") from None
    except RequestTimeout:
        g.body_timed_out = True
        timeout = current_app.config.get("BODY_TIMEOUT")
        raise RequestTimeoutError(f"the request body did not arrive within {timeout:g} s") from None
    g.body_read = True
    return body


def body_read() -> bool:
    """``True`` when this request's whole body was read (by :func:`read_body`): nothing is left to drain."""
    return bool(g.get("body_read", False))


def body_timed_out() -> bool:
    """``True`` when this request's body already timed out (nothing more will be read)."""
    return bool(g.get("body_timed_out", False))


#: What sending to (or serving) a client that hung up raises: hypercorn closes the socket (or writes
#: its own error answer) while ours is being written.
_GONE = (trio.BusyResourceError, trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError,
         h11.RemoteProtocolError)


def client_gone(error: BaseException) -> bool:
    """``True`` when ``error`` (or every error of a group) only says the client went away."""
    if isinstance(error, BaseExceptionGroup):
        return all(client_gone(inner) for inner in error.exceptions)
    return isinstance(error, _GONE)


def quiet_send(send: Send) -> Send:
    """``send``, dropping what cannot be sent because the client is gone (logged at debug level).

    After the first such failure the rest of the answer is dropped too.
    """
    gone = False

    async def send_or_drop(message: dict[str, Any]) -> None:
        nonlocal gone
        if gone:
            return
        try:
            await send(message)
        except _GONE as exc:
            gone = True
            logger.debug("client gone before the answer (%s) was sent: %r", message.get("type"), exc)

    return send_or_drop
