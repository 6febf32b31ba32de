"""Errors raised by the actor host (routing, lifecycle, calls).

Hierarchy (the HTTP status a server client sees is in brackets; whether a
retry of the same request can succeed is said per class)::

    ActorRuntimeError                  base class                           [500]
    ├── InvalidActorIdError (ValueError)  malformed or foreign actor id      [400]
    ├── InvalidNamespaceError (ValueError) bad namespace name or binding     [400]
    ├── UnknownNamespaceError (LookupError) no class bound to that name      [404]
    ├── UnknownMethodError (LookupError)  no callable method of that name    [404]
    ├── InvalidArgumentsError (TypeError) arguments do not fit the method   [400]
    ├── ActorOverloadedError              too many calls waiting             [429]
    ├── TransactionLeftOpenError          a call ended inside a transaction  [500]
    └── HostClosedError                   the host is shutting down          [503]

Errors raised by actor code itself (``on_start``, a method, ``alarm``) reach
the caller unchanged: the actor layer's errors carry their own ``status``.
"""

from __future__ import annotations


class ActorRuntimeError(Exception):
    """Base class of every error the actor host raises on purpose."""

    #: HTTP status a server reports for this error.
    status = 500


class InvalidActorIdError(ActorRuntimeError, ValueError):
    """An actor id is not 64 hex digits, or was not made by this namespace.

    Raised by ``Namespace.id_from_string`` and ``Namespace.get``. No file is
    touched. A retry cannot succeed.
    """

    status = 400


class InvalidNamespaceError(ActorRuntimeError, ValueError):
    """``ActorHost.bind`` was given a bad name, a non-``Agent`` class, or a name already bound."""

    status = 400


class UnknownNamespaceError(ActorRuntimeError, LookupError):
    """``ActorHost.namespace(name)`` names no bound namespace. A retry cannot succeed."""

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
    """The call's arguments do not bind to the method's signature.

    Raised before the actor is woken. A retry with the same arguments cannot succeed.
    """

    status = 400


class ActorOverloadedError(ActorRuntimeError):
    """The actor already holds ``max_pending_calls`` unanswered calls.

    Raised at once, without waiting; the call was not admitted. A retry
    after a short pause can succeed.
    """

    status = 429

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
