"""``durable-sessions serve --cluster``: a host that joins the cluster sharing one or several Postgres databases.

The order of a start, and why:

1. **Bind** the listening socket (``--bind``; port 0 picks one), so the
   address this host advertises to the others (``--advertise``, default
   ``http://<bound address>``) is known before it joins.
2. **Join**: open the actor host in cluster mode (it connects to Postgres
   and registers this host). When Postgres cannot be reached the host keeps
   trying, logging each failure, for ``connect_timeout_s`` (default 30 s;
   a cluster started together with its database needs a moment); then the
   command exits with status 1 and one line naming the database (never its
   password). A connection string that does not parse is bad
   configuration: exit status 2. So is a database that answers but refuses
   for good -- a wrong password or role, a database that does not exist, a
   newer cluster schema, a list of databases that differs from the
   cluster's partition map (``--cluster`` repeated: actors are spread over
   several databases, :mod:`runtime.host.partitions`): exit status 2 at
   once with one line naming the database and the cause
   (:class:`ClusterRefusedError`), no retrying.
3. **Serve** on the bound socket with a
   :class:`~runtime.server.forwarding.Forwarder` (requests and WebSockets for
   sessions other hosts own go to them) until SIGINT or SIGTERM; then the
   host refuses new requests, hands its actors over (their writes durable,
   their leases released together: ``ActorHost.drain``), closes its
   WebSockets with 1012 (clients connect again elsewhere), lets the
   connections still open finish and leaves the cluster.

Claude Agent SDK transcripts (``/v1/transcripts``) are served too: each
``(project, session)`` pair is an actor, and the listings read the catalog in
Postgres that each actor's log entries keep (docs/cluster.md).
"""

from __future__ import annotations

import logging
import secrets
import signal
import socket
from collections.abc import Callable
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import Any

import trio
from psycopg import ProgrammingError

from actors.agent import Agent
from common.errors import DatabaseError, SchemaTooNewError, StorageError, StorageUnavailableError
from runtime.host.actor_host import ActorHost, open_host
from runtime.server.app import bind_sessions, bind_socket, serve
from runtime.server.config import ClusterSettings, ConfigError, HostConfig, ServerSettings
from runtime.server.checkpoint_routes import bind_checkpoints
from runtime.server.forwarding import Forwarder, hop_secret
from runtime.server.managers import bind_managers
from storage.cluster.driver import PostgresRefusedError, describe_dsn

__all__ = ["ClusterRefusedError", "ClusterUnreachableError", "describe_database", "new_host_id", "serve_cluster"]

logger = logging.getLogger("durable_sessions")

#: First and longest pause between attempts to reach Postgres at start (seconds).
FIRST_RETRY_S, MAX_RETRY_S = 0.25, 2.0


class ClusterUnreachableError(Exception):
    """Postgres could not be reached within ``connect_timeout_s`` at start (exit status 1)."""


class ClusterRefusedError(ConfigError):
    """A database answered but refuses this host for good (exit status 2, one line): a wrong password
    or role, a missing database, a newer cluster schema, a partition map that differs."""


def new_host_id() -> str:
    """A host id for this process start: ``<hostname>-<6 hex>`` (at most 64 characters)."""
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname())[:50] or "host"
    return f"{name}-{secrets.token_hex(3)}"


def describe_database(dsn: str) -> str:
    """``host:port/dbname`` of a connection string or URL, without user or password.

    Raises:
        ConfigError: the string does not parse.
    """
    try:
        return describe_dsn(dsn)
    except ProgrammingError as exc:
        reason = " ".join(str(exc).split())
        raise ConfigError(f"cluster.postgres does not parse as a Postgres connection string: {reason}") from None


async def serve_cluster(
    config: HostConfig, token: str | None, agent_class: type[Agent], ready_file: Path | None,
    announce: Callable[..., None], *, insecure_no_token: bool = False,
) -> int:
    """Run one cluster host until SIGINT or SIGTERM (see the module docstring); the exit status.

    Raises:
        ConfigError: bad cluster settings (a wildcard bind without
            ``advertise``, a connection string that does not parse).
        ClusterUnreachableError: Postgres stayed unreachable for ``connect_timeout_s``.
        OSError: the address cannot be bound.
    """
    settings, cluster = config.server, config.cluster
    assert cluster is not None  # the caller serves a cluster host only for a config with one
    database = ", ".join(describe_database(dsn) for dsn in cluster.dsns)
    listen: socket.socket | None
    listen, bound = bind_socket(settings.bind)
    try:
        advertise = cluster.advertise_url(bound)
        if settings.certfile is not None and cluster.advertise is None:  # served over TLS
            advertise = "https" + advertise[len("http"):]
        host_id = cluster.host_id or new_host_id()
        async with AsyncExitStack() as stack:
            host = await _join(stack, settings, cluster, host_id, advertise)
            bind_sessions(host, config.session, agent_class=agent_class)
            bind_managers(host, config.session)
            bind_checkpoints(host)
            forwarder = Forwarder(host_id=host_id, advertise_url=advertise, lease_s=cluster.lease_s,
                                  secret=hop_secret(token))
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

                async def shutdown_trigger() -> None:
                    async for signum in signals:
                        logger.info("received %s: leaving the cluster", signal.Signals(signum).name)
                        return

                async with trio.open_nursery() as nursery:
                    urls = await nursery.start(partial(
                        serve, host, settings, token=token, shutdown_trigger=shutdown_trigger,
                        forwarder=forwarder, listen_socket=listen, insecure_no_token=insecure_no_token,
                        retention_days=config.retention.delete_idle_after_days))
                    listen = None
                    announce(urls, settings.data, ready_file, f"; cluster host {host_id} at {advertise}, "
                             f"database{'s' * (len(cluster.dsns) > 1)} {database}")
    finally:
        if listen is not None:
            listen.close()
    print("durable-sessions: stopped", flush=True)
    return 0


async def _join(stack: AsyncExitStack, settings: ServerSettings, cluster: ClusterSettings, host_id: str,
                advertise: str) -> ActorHost:
    """Open the actor host in cluster mode, retrying while Postgres is unreachable (bounded).

    Raises:
        ClusterUnreachableError: a database stayed unreachable for ``connect_timeout_s``.
        ClusterRefusedError: a database refused for good (no retry; see the module docstring).
    """
    from runtime.host.partitions import PartitionMapError

    deadline = trio.current_time() + cluster.connect_timeout_s
    pause = FIRST_RETRY_S
    while True:
        placement = cluster_placement(cluster, host_id, advertise)
        try:
            return await stack.enter_async_context(open_host(
                settings.data, idle_timeout_s=settings.idle_timeout_s, max_active=settings.max_active,
                durability=settings.durability, max_pending_calls=settings.max_pending_calls,
                max_queue_s=settings.max_queue_s, placement=placement))
        except (PartitionMapError, StorageError) as exc:
            database = placement.joining or ", ".join(placement.names)
            refused = _refused(exc, database)
            if refused is not None:
                raise refused from None
            if not isinstance(exc, StorageUnavailableError):
                raise
            reason = " ".join(str(exc).split())  # libpq's messages span lines
            if trio.current_time() + pause > deadline:
                raise ClusterUnreachableError(
                    f"cannot reach Postgres at {database} (tried for {cluster.connect_timeout_s:g} s): {reason}"
                ) from None
            logger.warning("cannot reach Postgres at %s yet (%s); trying again in %.2g s", database, reason, pause)
            await trio.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_S)


def _refused(exc: Exception, database: str) -> ClusterRefusedError | None:
    """``exc``, raised while joining ``database``, as the one line of a refusal no retry changes
    (``None``: Postgres is only unreachable for now)."""
    from runtime.host.partitions import PartitionMapError

    if isinstance(exc, PartitionMapError):
        return ClusterRefusedError(f"the cluster's databases refuse this host: {exc}")
    if isinstance(exc, SchemaTooNewError):
        return ClusterRefusedError(f"Postgres at {database} holds cluster tables of schema version {exc.found}, "
                                   f"newer than this release's {exc.known}: upgrade durable-sessions on this host")
    if isinstance(exc, PostgresRefusedError):  # a wrong password, role or database name
        return ClusterRefusedError(f"Postgres at {database} refused this host: {exc.reason}")
    if isinstance(exc, DatabaseError):
        return ClusterRefusedError(f"Postgres at {database} refused this host: {' '.join(str(exc).split())}")
    return None


def host_cluster_options(cluster: ClusterSettings, host_id: str, advertise: str) -> dict[str, Any]:
    """The keyword arguments that put :func:`~runtime.host.actor_host.open_host` in cluster mode
    on the cluster's first database (see :func:`cluster_placement` for all of them)."""
    from runtime.host.cluster import ClusterOptions  # cluster-core's host side

    tuning = {} if cluster.snapshot_bytes is None else {"snapshot_min_bytes": cluster.snapshot_bytes}
    return {"cluster": ClusterOptions(dsn=cluster.dsns[0], advertise_url=advertise, host_id=host_id,
                                      lease_s=cluster.lease_s, pitr_window_s=cluster.pitr_days * 86_400.0, **tuning)}


def cluster_placement(cluster: ClusterSettings, host_id: str, advertise: str) -> Any:
    """The host's placement on every database of ``cluster`` (:func:`runtime.host.partitions.cluster_placement`):
    a ``HostCluster`` for one database, a ``PartitionedCluster`` for several; each names the database it is
    joining (``joining``) and all of them (``names``)."""
    from runtime.host.partitions import cluster_placement as placement_on

    return placement_on(host_cluster_options(cluster, host_id, advertise)["cluster"], cluster.dsns)
