"""Every error durable-sessions raises on purpose, in one tree.

This module sits at the bottom of the layering (it imports nothing of the
project) so that storage, actors, the runtime and the client all raise and
catch the same classes. The server answers an error with the ``status`` of
its class and ``{"error": {"type": <class name>, "message", "field"?}}``;
the Python client raises the same class again from that body.

Each class says when it is raised, the HTTP status a client sees (in
brackets) and whether repeating the same call can succeed (``retryable``)::

    DurableSessionsError                  root; never raised itself              [500]
    ├── SessionError                      the Session API refused a call          [500]
    │   ├── InvalidInputError (ValueError)   bad argument; ``.field`` names it     [400]
    │   │   ├── InvalidMessageError          a message lacks id/role/parts         [400]
    │   │   └── ContextBlockError            a block write was refused             [400]
    │   ├── NotFoundError (LookupError)      unknown thing; ``.kind``, ``.key``     [404]
    │   │   ├── MessageNotFoundError         unknown message id                    [404]
    │   │   └── SessionNotFoundError         no session with that id on this host  [404]
    │   ├── ConflictError                    the state forbids it                  [409]
    │   └── CompactionError                  compaction cannot run                 [409]
    ├── StorageError                      a fault of a file or of the code        [500]
    │   ├── SchemaTooNewError                file written by a newer version       [500]
    │   ├── StorageClosedError               use after ``close()``                 [500]
    │   ├── SearchQueryError                 SQLite failed while searching         [500]
    │   ├── DatabaseError                    Postgres refused or failed a statement [500]
    │   ├── StorageUnavailableError          the database cannot be reached (retryable) [503]
    │   ├── SkillRestoreError                reading history to restore skills failed (retryable) [503]
    │   ├── StorageFullError                 the disk is full; nothing written (retryable) [507]
    │   ├── ActorStorageCorruptError         an actor's file is damaged; quarantined [500]
    │   └── RestoreError                     cluster: the log does not rebuild an actor's file [500]
    ├── ActorRuntimeError                 the actor host refused or failed a call [500]
    │   ├── InvalidActorIdError (ValueError)  malformed or foreign actor id        [400]
    │   ├── InvalidNamespaceError (ValueError) bad namespace name or binding       [400]
    │   ├── UnknownNamespaceError (LookupError) no class bound to that name        [404]
    │   ├── UnknownMethodError (LookupError)  no callable method of that name      [404]
    │   ├── InvalidArgumentsError (TypeError) arguments do not fit the method      [400]
    │   ├── ActorOverloadedError              too many calls waiting (retryable)   [429]
    │   │   └── ActorBusyError                   no turn within the queue bound (retryable) [429]
    │   ├── TransactionLeftOpenError          a call ended inside a transaction    [500]
    │   ├── HostClosedError                   the host is shutting down (retryable) [503]
    │   ├── NotOwnerError                     another host owns the actor; not run here (retryable) [503]
    │   ├── OwnershipLostError                the actor moved while the call ran; nothing kept (retryable) [503]
    │   └── DataFolderLockedError             another process holds the data folder [500]
    └── HttpError                         the HTTP layer refused a request        [500]
        ├── UnauthorizedError                missing or wrong bearer token         [401]
        ├── RouteNotFoundError               no such route                         [404]
        ├── MethodNotAllowedError            the route exists, not this method     [405]
        ├── PayloadTooLargeError             body (or frame) over the limit        [413]
        ├── UnsupportedMediaTypeError        neither JSON nor msgpack              [415]
        ├── InternalServerError              a bug; details only in the log        [500]
        ├── ServiceUnavailableError          the server is shutting down (retryable) [503]
        ├── OwnerUnreachableError            a forwarded call's owner stopped answering (retryable) [503]
        ├── ServerBusyError                  too many requests in flight (retryable) [503]
        ├── RequestTimeoutError              the body did not arrive in time (retryable) [408]
        ├── NotSupportedError                not in this server's mode (listing, transcripts in a cluster) [501]
        ├── OriginNotAllowedError            a browser page of another origin       [403]
        └── ServerUnreachableError (ConnectionError) no server answered; not run (retryable) [client only]

Bad input (400) and unknown things (404) never change with a retry of the
same call; only fixing the input or the state helps. Messages are part of
the API where the original fixed them (``Block "soul" is readonly``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ActorBusyError", "ActorOverloadedError", "ActorRuntimeError", "ActorStorageCorruptError", "CompactionError",
    "ConflictError", "ContextBlockError", "DataFolderLockedError", "DatabaseError", "DurableSessionsError",
    "HostClosedError", "HttpError", "InternalServerError", "InvalidActorIdError", "InvalidArgumentsError",
    "InvalidInputError", "InvalidMessageError", "InvalidNamespaceError", "MessageNotFoundError",
    "MethodNotAllowedError", "NotFoundError", "NotOwnerError", "NotSupportedError", "OriginNotAllowedError",
    "OwnerUnreachableError", "OwnershipLostError", "PayloadTooLargeError", "RequestTimeoutError", "RestoreError",
    "RouteNotFoundError", "SchemaTooNewError", "SearchQueryError", "ServerBusyError", "ServiceUnavailableError",
    "ServerUnreachableError", "SessionError", "SessionNotFoundError", "SkillRestoreError", "StorageClosedError", "StorageError",
    "StorageFullError", "StorageUnavailableError", "TransactionLeftOpenError", "UnauthorizedError",
    "UnknownMethodError", "UnknownNamespaceError", "UnsupportedMediaTypeError",
]


class DurableSessionsError(Exception):
    """Root of every error the project raises on purpose.

    Attributes:
        status: the HTTP status a server answers this error with.
        retryable: whether the same call, repeated later, can succeed.
    """

    status = 500
    retryable = False


# -- the Session API -------------------------------------------------------------


class SessionError(DurableSessionsError):
    """Base class of the errors of the Session API and the Agent base class."""


class InvalidInputError(SessionError, ValueError):
    """An argument is malformed. ``field`` names it (e.g. ``"message.parts"``); nothing was written."""

    status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidMessageError(InvalidInputError):
    """A message is not ``{"id": str, "role": str, "parts": list, ...}``; nothing was written."""


class ContextBlockError(InvalidInputError):
    """A context-block write was refused: readonly, unknown, keyed, or over ``max_tokens``."""


class NotFoundError(SessionError, LookupError):
    """Something named by the caller does not exist. ``kind`` and ``key`` say what."""

    status = 404

    def __init__(self, message: str, *, kind: str = "object", key: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.key = key


class MessageNotFoundError(NotFoundError):
    """No message with that id in this session."""

    def __init__(self, message_id: str) -> None:
        super().__init__(f"message {message_id!r} not found", kind="message", key=message_id)


class ConflictError(SessionError):
    """The current state forbids the call (e.g. a label that already exists)."""

    status = 409


class CompactionError(SessionError):
    """``compact()`` cannot run, e.g. no compaction function is registered."""

    status = 409


# -- storage ---------------------------------------------------------------------------


class StorageError(DurableSessionsError):
    """A fault of a file or of the code below the Session API.

    Bad *input* is not a storage error: the actor layer validates before it
    writes, so the storage layer only reports faults of the file or the code.
    """


class SchemaTooNewError(StorageError):
    """The file's ``PRAGMA user_version`` is newer than this code knows.

    Raised by :meth:`storage.SqlStorage.open`; the file is left untouched.
    Upgrade ``durable-sessions`` to open it.
    """

    def __init__(self, path: str, found: int, known: int) -> None:
        super().__init__(
            f"{path}: schema version {found} is newer than this code supports "
            f"({known}); upgrade durable-sessions to open this file"
        )
        self.path = path
        self.found = found
        self.known = known


class StorageClosedError(StorageError):
    """A :class:`storage.SqlStorage` was used after :meth:`close`."""


class SearchQueryError(StorageError):
    """SQLite failed while running a full-text query.

    User text never reaches FTS5 syntax (see :mod:`storage.fts`), so this
    signals a fault (a damaged index, a bug), never a malformed query; it is
    raised rather than turned into an empty result (docs/deviations.md #9).
    """


class DatabaseError(StorageError):
    """An external database (Postgres) refused or failed a statement.

    The call's transaction was rolled back: nothing of it was written. A
    missing schema or permission, or a bug, rather than a passing fault.
    """


class StorageUnavailableError(StorageError):
    """The database cannot be reached: the connection was lost mid-call, the
    server is down or restarting, no connection was free within the timeout,
    or the transaction lost a serialization race. In cluster mode also: the
    actor's local working copy failed (it could not be rebuilt or its changes
    captured); the log in Postgres rebuilds it on the next call.

    Nothing of the call was committed; a retry (once the database is back)
    can succeed. Servers answer 503 with ``Retry-After``.
    """

    status = 503
    retryable = True


class SkillRestoreError(StorageError):
    """Restoring a session's loaded-skill set from its stored history failed (the
    one-time walk of a session with no saved set: an import, a fork, an older file).

    The walk only reads: nothing was written and nothing is remembered of
    the failure, so the next call that needs the set walks again (other
    calls of the session are unaffected). The cause is chained.
    """

    status = 503
    retryable = True


class RestoreError(StorageError):
    """Cluster mode: the log in Postgres does not rebuild the actor's file (a gap in
    the log, a changeset that does not fit its snapshot, a snapshot that is no
    database, a log from another actor-file schema version).

    Damage, named in the answer (500 with this message, which names the actor):
    nothing was changed on disk, and the actor cannot be activated until the
    log is repaired. Not retryable.
    """


# -- the actor host ------------------------------------------------------------------------


class ActorRuntimeError(DurableSessionsError):
    """Base class of the errors the actor host raises (routing, lifecycle, calls).

    Errors raised by actor code itself (``on_start``, a method, ``alarm``)
    reach the caller unchanged.
    """


class InvalidActorIdError(ActorRuntimeError, ValueError):
    """An actor id is not 64 hex digits, or was not made by this namespace.

    Raised by ``Namespace.id_from_string`` and ``Namespace.get``. No file is touched.
    """

    status = 400


class InvalidNamespaceError(ActorRuntimeError, ValueError):
    """``ActorHost.bind`` was given a bad name, a non-``Agent`` class, or a name already bound."""

    status = 400


class UnknownNamespaceError(ActorRuntimeError, LookupError):
    """``ActorHost.namespace(name)`` names no bound namespace."""

    status = 404

    def __init__(self, name: str) -> None:
        super().__init__(f"no actor namespace named {name!r} is bound")
        self.name = name


class UnknownMethodError(ActorRuntimeError, LookupError):
    """The actor class has no method of that name callable through a stub.

    Raised before the actor is woken (nothing is created). Private names,
    ``on_*`` hooks, attributes inherited from ``Agent`` and non-methods are
    never callable (see ``actors.agent.callable_method``).
    """

    status = 404

    def __init__(self, class_name: str, method: str) -> None:
        super().__init__(f"actor class {class_name} has no callable method {method!r}")
        self.method = method


class InvalidArgumentsError(ActorRuntimeError, TypeError):
    """The call's arguments do not bind to the method's signature. Raised before the actor is woken."""

    status = 400


class ActorOverloadedError(ActorRuntimeError):
    """The actor already holds ``max_pending_calls`` unanswered calls.

    Raised at once, without waiting; the call was not admitted. A retry
    after a short pause can succeed.
    """

    status = 429
    retryable = True
    #: ``max_pending_calls`` when the mailbox was full; ``None`` for :class:`ActorBusyError` (a wait, not a count).
    limit: int | None

    def __init__(self, actor: str, limit: int) -> None:
        super().__init__(f"actor {actor} is overloaded: {limit} calls are already pending")
        self.limit = limit


class TransactionLeftOpenError(ActorRuntimeError):
    """A call returned while the actor's storage was inside a transaction.

    Actor code must never ``await`` inside ``storage.transaction()``. The
    transaction is rolled back and the caller gets this error instead of a
    reply, so no reply ever reports writes that were not committed.
    """


class HostClosedError(ActorRuntimeError):
    """The host is closed or closing; the call was not (or not fully) run.

    A retry against a running host can succeed.
    """

    status = 503
    retryable = True


class NotOwnerError(ActorRuntimeError):
    """Cluster mode: another live host owns the actor, so this host did not run the call.

    Raised by the actor host *before* anything of the call ran and before any
    file was touched, so forwarding the same call to ``owner_url`` (or
    retrying it anywhere later) is always safe. Servers forward it; a client
    that sees it may retry after ``retry_after_s``.

    Attributes:
        actor: ``<namespace>/<hex>`` of the actor.
        owner_url: the owner host's advertised URL (``None`` when rebuilt from an error body).
        owner_host: the owner's host id.
        lease_left_s: seconds until the owner's lease expires if it is not renewed
            (by Postgres' clock, unrounded, may be 0): after that any host may take
            the actor over. ``None`` when not known (an error rebuilt from a body).
        retry_after_s: ``lease_left_s`` but at least 1 (the ``Retry-After`` header).

    ``reason`` replaces the message (e.g. a host that is shutting down and hands its actors over).
    """

    status = 503
    retryable = True
    actor: str | None = None
    owner_url: str | None = None
    owner_host: str | None = None
    lease_left_s: float | None = None
    retry_after_s: float = 1.0

    def __init__(self, actor: str, owner_url: str | None, *, owner_host: str | None = None,
                 retry_after_s: float = 1.0, lease_left_s: float | None = None, reason: str | None = None) -> None:
        super().__init__(reason or f"actor {actor} is owned by host {owner_host} at {owner_url}")
        self.actor = actor
        self.owner_url = owner_url
        self.owner_host = owner_host
        self.lease_left_s = None if lease_left_s is None else max(0.0, lease_left_s)
        self.retry_after_s = max(1.0, retry_after_s if lease_left_s is None else lease_left_s)


class OwnershipLostError(ActorRuntimeError):
    """Cluster mode: another host took the actor over while this call ran here.

    Nothing the call wrote was kept (its writes were refused by the fence and
    the local copy is discarded); the call's other effects may have happened.
    A retry reaches the new owner.
    """

    status = 503
    retryable = True


# -- the HTTP layer ----------------------------------------------------------------------------


class HttpError(DurableSessionsError):
    """An error of the HTTP layer (not of a session or the host).

    The client also raises it, with the answer's ``status``, for an error
    body it cannot map to a class of this tree.
    """


class UnauthorizedError(HttpError):
    """The bearer token is missing or wrong. Send ``Authorization: Bearer <token>``."""

    status = 401


class RouteNotFoundError(HttpError):
    """No route has this path."""

    status = 404


class MethodNotAllowedError(HttpError):
    """The path exists but does not take this HTTP method."""

    status = 405
    #: The methods the path takes (the answer's ``Allow`` header); set where known.
    allowed: Sequence[str] = ()


class PayloadTooLargeError(HttpError):
    """The request body or WebSocket frame is larger than the server's limit (its bytes, or the values
    it holds: ``field`` names what, e.g. ``"body"``)."""

    status = 413

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class UnsupportedMediaTypeError(HttpError):
    """The body is neither ``application/json`` nor ``application/msgpack``."""

    status = 415


class InternalServerError(HttpError):
    """The server failed (a bug). The message holds a reference to its log entry, never a traceback."""

    status = 500


class ServiceUnavailableError(HttpError):
    """The server is shutting down; retry against a running one."""

    status = 503
    retryable = True


class OwnerUnreachableError(HttpError):
    """The actor's owner stopped answering while a forwarded call was with it.

    Whether the call ran is unknown: repeat it only when repeating is safe
    (a read, an idempotent write, an append with the same message ids). Once
    the owner's lease runs out another host takes the actor over.
    """

    status = 503
    retryable = True


# -- faults: a full disk, damaged files, a shared data folder, floods (appended) ---------------


class StorageFullError(StorageError):
    """The disk holding the data folder is full (SQLite's ``SQLITE_FULL``, or ``ENOSPC``).

    The call's transaction was rolled back: nothing of it was stored, and
    everything acknowledged before stays readable. A retry once space was
    freed can succeed; servers answer 507 Insufficient Storage with
    ``Retry-After``.
    """

    status = 507
    retryable = True


class ActorStorageCorruptError(StorageError):
    """An actor's file is damaged (a bad header, a file gone back in time or
    vanished, a failed integrity check, or SQLite reporting corruption).

    The actor is quarantined: its files were moved to the data folder's
    ``_quarantine`` folder and no call to it runs until an operator releases
    it (``durable-sessions doctor``); every call gets this error, naming the
    session. Other actors are not affected. Not retryable. (In cluster mode
    the file is a working copy of what Postgres holds: a damaged copy is
    moved aside and rebuilt from Postgres, so only the call that met the
    damage gets this error.)

    Attributes:
        session: the session id (actor name) when known, else ``namespace/hex``.
        problem: what was found, in words.
    """

    def __init__(self, session: str, problem: str) -> None:
        super().__init__(
            f"session {session!r} is damaged and quarantined: {problem}; no call to it runs until an "
            "operator checks it (durable-sessions doctor)"
        )
        self.session = session
        self.problem = problem


class DataFolderLockedError(ActorRuntimeError):
    """Another process (a running host, an import) holds the data folder.

    Raised by ``open_host`` before anything in the folder is opened: one
    process owns a data folder for its whole life, so two hosts never write
    the same actor files.
    """


class ActorBusyError(ActorOverloadedError):
    """The call waited longer than the host's queue bound for its turn; it was not run.

    A flood on one actor is refused after a bounded wait instead of queueing
    without end. A retry after a short pause can succeed (429 with ``Retry-After``).
    """

    def __init__(self, actor: str, waited_s: float) -> None:
        ActorRuntimeError.__init__(
            self, f"actor {actor} is busy: the call could not start within {waited_s:g} s and was not run"
        )
        self.limit = None
        self.waited_s = waited_s


class ServerBusyError(HttpError):
    """The server already runs as many requests as it admits; this one was not started.

    Answered at once with 503 and ``Retry-After``; a retry can succeed.
    """

    status = 503
    retryable = True


class RequestTimeoutError(HttpError):
    """The request body did not arrive within the server's body timeout; nothing was run."""

    status = 408
    retryable = True


# -- listing sessions, browsers (appended) -----------------------------------------------------


class SessionNotFoundError(NotFoundError):
    """No session with that id was ever written on this host (``GET /v1/sessions/{id}``)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r} on this host", kind="session", key=session_id)


class NotSupportedError(HttpError):
    """The server cannot do this in the mode it runs in (listing sessions in cluster mode, or
    with the sessions in Postgres; Claude Agent SDK transcripts in cluster mode, whose listings
    come from a catalog local to one host); the message says why and what works instead.
    Nothing ran; a retry at the same server gets the same answer."""

    status = 501


class OriginNotAllowedError(HttpError):
    """A browser request (a WebSocket upgrade) came from a page of an origin the server does not allow
    (``[server] cors_origins``); nothing was run."""

    status = 403


class ServerUnreachableError(HttpError, ConnectionError):
    """No server answered the client: every URL it tried refused the connection or did not accept it in
    time (raised by :class:`runtime.client.SessionsClient`, never answered by a server).

    The request was never sent, so the call did not run; a retry once a server listens can succeed.
    It is a :class:`ConnectionError` too (so an ``except OSError`` keeps catching it); the transport's
    own error is its ``__context__`` (not printed: the traceback stays short).

    Attributes:
        urls: the base URLs tried, in order.
        hint: what to try next, in words (also the end of the message).
        reason: the transport's words for the last failure (``""`` when none).
    """

    status = 503
    retryable = True

    def __init__(self, urls: tuple[str, ...] | list[str], hint: str, reason: str = "") -> None:
        detail = f" ({reason})" if reason else ""
        super().__init__(f"no server answered at {', '.join(urls)}{detail}: {hint}")
        self.urls = tuple(urls)
        self.hint = hint
        self.reason = reason
