"""How the server answers an HTTP request: one :class:`Responder` for the app and every plug-in.

A value is encoded as the client accepts it (msgpack when its ``Accept``
prefers it, else JSON, :mod:`common.wire`); an error becomes ``{"error":
{"type", "message"[, "field"]}}`` with its class's status
(:func:`~runtime.server.routes.describe_error`) and the headers that status
calls for (:meth:`Responder.error_headers`). The request body is read within
the server's size and time limits (:mod:`runtime.server.client_io`) and
decoded by its ``Content-Type``. The server's plug-ins (the listing, the
manager, transcript and docs routes, the inspector) answer through
``server.responder``; none builds an error answer of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from quart import Response, has_request_context, request

from common.wire import DEFAULT_MAX_BODY_ITEMS, JSON, MSGPACK, decode_body, encode_body
from runtime.server.client_io import read_body
from runtime.server.forwarding import retry_after
from runtime.server.routes import describe_error, retry_headers

__all__ = ["Responder", "View"]

#: A view that answers ``(status, body)`` (or raises): see :meth:`Responder.answering`.
View = Callable[..., Awaitable[tuple[int, Any]]]

_JSON_ACCEPTS = frozenset(("*/*", JSON))


class Responder:
    """Builds the server's answers (``server.responder``).

    Attributes:
        max_body_items: the bound :meth:`read_body` decodes bodies with (``server.max_body_items``).
    """

    def __init__(self, max_body_items: int | None = DEFAULT_MAX_BODY_ITEMS) -> None:
        self.max_body_items = max_body_items

    def kind(self) -> str:
        """The encoding of this request's answer: :data:`~common.wire.MSGPACK` when its ``Accept``
        prefers it, else :data:`~common.wire.JSON` (also outside a request: a WebSocket handler's error)."""
        if not has_request_context():
            return JSON
        accept = request.headers.get("Accept")
        if not accept or accept in _JSON_ACCEPTS:  # most clients: no header parsing needed
            return JSON
        return request.accept_mimetypes.best_match([JSON, MSGPACK], default=JSON)

    def respond(self, status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
        """``body`` (a JSON-able value) with ``status``, encoded as :meth:`kind` says."""
        kind = self.kind()
        return Response(encode_body(body, kind), status=status, content_type=kind, headers=headers)

    def error(self, error: BaseException) -> Response:
        """The answer to ``error``: its status, its error body and :meth:`error_headers`
        (anything not of :mod:`common.errors` is a logged 500, see ``describe_error``)."""
        status, body = describe_error(error)
        return self.respond(status, body, self.error_headers(error, status))

    @staticmethod
    def error_headers(error: BaseException, status: int) -> dict[str, str]:
        """The headers of an error answer: ``WWW-Authenticate`` (401), ``Allow`` (405), and
        ``Retry-After`` where a retry can help (429, 503, 507; for a 503 the error's own wait,
        e.g. what is left of a dead owner's lease, when it says one)."""
        headers = retry_headers(status)
        if status == 503 and getattr(error, "retry_after_s", None) is not None:
            headers["Retry-After"] = retry_after(error)
        if status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        elif status == 405 and getattr(error, "allowed", None):
            headers["Allow"] = ", ".join(getattr(error, "allowed"))
        return headers

    async def read_body(self) -> Any:
        """This request's body, decoded by its ``Content-Type`` (``None`` when empty).

        Raises:
            PayloadTooLargeError, RequestTimeoutError: over the size limit, or too slow to arrive.
            InvalidInputError: not valid JSON or msgpack.
            PayloadTooLargeError: more than :attr:`max_body_items` values in arrays and objects.
        """
        return decode_body(await read_body(), request.headers.get("Content-Type"), max_items=self.max_body_items)

    def answering(self, view: View) -> Callable[..., Awaitable[Response]]:
        """A Quart view of ``view``: its ``(status, body)`` answered with :meth:`respond`, or its
        error with :meth:`error`."""

        async def answer(*args: Any, **kwargs: Any) -> Response:
            try:
                status, body = await view(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - every error becomes an error response
                return self.error(exc)
            return self.respond(status, body)

        answer.__name__ = view.__name__
        return answer
