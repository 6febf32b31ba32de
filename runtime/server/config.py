"""The host's configuration file (``--config sessions.toml``), read with :mod:`tomllib`.

Every key is optional; with no file at all the host serves the default
session of :class:`actors.session_agent.SessionConfig` from ``./data`` on
``127.0.0.1:8787``. Relative paths in the file are relative to the file.
Unknown keys are errors, so a typo never passes silently::

    [server]
    bind = "127.0.0.1:8787"      # host:port; a non-loopback address needs a token
    data = "./data"              # actor files
    idle_timeout_s = 30          # seconds before an idle actor hibernates
    durability = "normal"        # or "full" (also survives power loss)
    max_body_bytes = 8388608     # request body / WebSocket frame limit
    max_body_items = 100000      # values in arrays and objects per body / frame, then 413
    max_active = 4096            # actor files open at once (default: from the fd limit)
    max_pending_calls = 1000     # per actor, then 429
    graceful_timeout_s = 10      # how long shutdown waits for running requests
    keep_alive_timeout_s = 30    # an idle HTTP connection is closed after this
    body_timeout_s = 30          # a request body not all arrived by then: 408
    backlog = 4096               # connections the kernel queues before accept (capped by somaxconn)
    max_requests = 4096          # HTTP requests at once, then 503 at once
    max_connecting = 64          # accepted connections waiting for their first request (others wait in the backlog)
    max_connect_wait_s = 0.5     # a request that waited this long for a place: 503
    head_timeout_s = 3           # a new connection that has not sent its request head by then is closed
    max_connections_per_peer = 512   # connections open at once from one client address, then 503
    max_queue_s = 0.5            # a call not started within this (per actor): 429
    inspector = true             # the /inspect page (it asks for the token, like /docs); false: no route
    allowed_hosts = ["sessions.internal"]  # Host names answered besides loopback ones (checked without a token)
    certfile = "server.pem"      # TLS: serve https:// with this certificate chain (PEM) ...
    keyfile = "server.key"       # ... and its private key (PEM); both or neither

    [storage]                    # where sessions live (default: each actor's SQLite file)
    postgres = "postgresql://app@db.internal/sessions"   # or: serve --postgres URL
    pool_size = 10               # connections to Postgres, shared by every actor
    timeout_s = 10               # connect / wait for a connection / one statement, seconds
    # encryption_key_file = "secrets/data.key"  # encrypt the SQLite files (extra encryption; mode 0600)

    [session]
    cached_prompt = true

    [[session.blocks]]           # in prompt order; replaces the default blocks
    label = "soul"
    kind = "readonly"            # readonly | writable | skills | searchable
    text = "You are a helpful assistant."   # or: file = "soul.md"

    [[session.blocks]]
    label = "memory"
    kind = "writable"
    description = "Learned facts"
    max_tokens = 1100

    [[session.blocks]]
    label = "skills"
    kind = "skills"
    description = "Loadable skills"
    path = "skills"              # folder of <key>.md files
    writable = false             # default: sessions load skills but cannot write the shared folder

    [session.compaction]         # or: compaction = false
    threshold = 100000           # estimated tokens (0: compact only on request)
    summarizer = "extractive"    # or "package.module:function"
    protect_head = 3
    tail_token_budget = 20000
    min_tail_messages = 2

Semantic and hybrid message search (``search?mode=semantic|hybrid``; off without
this section; SQLite files and cluster mode, not yet ``[storage] postgres``)::

    [search]
    embedder = "local"           # WordLlama, offline (pip install -e '.[semantic]'); or "openai"
    # url = "http://10.0.0.7:8000/v1"   # openai: an OpenAI-compatible embeddings endpoint
    # model = "text-embedding-3-small"  # openai: the model (stored beside each vector)
    # api_key_env = "OPENAI_API_KEY"    # openai: the variable holding the key ("": none)
    # dimension = 256              # local: 256, 128 or 64; openai: the vectors' dimension

Several hosts sharing one Postgres (``serve --cluster``; the section's
presence turns cluster mode on, command-line flags override its keys)::

    [cluster]
    postgres = "postgresql://sessions@db.internal/sessions"  # the shared database
    # databases = ["postgresql://db1.internal/sessions", "postgresql://db2.internal/sessions"]
    #                            # instead of postgres: actors spread over several databases
    #                            # (the same list, in the same order, on every host)
    host_id = "n1"               # default: a new random id at every start
    advertise = "http://10.0.0.5:8801"  # how the other hosts reach this one
                                 # (default: http://<bind>; required with a wildcard bind)
    lease_s = 10                 # seconds an owner holds an actor without renewing
    connect_timeout_s = 30       # at start, how long to keep trying to reach Postgres
    snapshot_bytes = 1048576     # log bytes after an actor's snapshot that make a new one
    pitr_days = 7                # point-in-time restore: days of history kept (0: off)

The bearer token is never read from this file: pass ``--token`` or set
``DURABLE_SESSIONS_TOKEN``; keep the Postgres password out of it too
(``PGPASSWORD`` or ``~/.pgpass``, read by libpq).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from actors.session_agent import BlockConfig, CompactionConfig, SessionConfig, resolve_summarizer
from actors.session_embeddings import EmbedderConfig
from common.errors import InvalidInputError
from common.wire import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_BODY_ITEMS
from runtime.server.hosts import normalise_hosts

__all__ = ["ClusterSettings", "ConfigError", "HostConfig", "RetentionSettings", "ServerSettings", "StorageSettings",
           "load_config"]

DURABILITIES = ("normal", "full")


class ConfigError(ValueError):
    """The configuration file is unreadable or holds a bad value; the message names the key."""


#: The access log's logger name (``[server] access_log``, ``serve --access-log``).
ACCESS_LOGGER = "durable_sessions.access"
#: hypercorn's access line: client, request line (query included), status, response bytes, user agent,
#: microseconds taken. Request headers are never logged (the token travels in one).
ACCESS_FORMAT = '%(h)s "%(R)s" %(s)s %(b)s "%(a)s" %(D)sus'


@dataclass(frozen=True)
class ServerSettings:
    """Process-level settings (``[server]``; command-line flags override them).

    Attributes:
        bind: ``host:port`` to listen on (port 0: any free port).
        data: folder of the actor files.
        idle_timeout_s: seconds an actor may idle before it hibernates.
        durability: ``"normal"`` or ``"full"``.
        max_body_bytes: request body and WebSocket frame limit (bytes).
        max_body_items: most values a request body or WebSocket frame may hold
            inside arrays and objects (each array, object, element and member
            counts); more: 413 ``PayloadTooLargeError`` (``field="body"``),
            counted before (JSON) or while (msgpack) the body is parsed.
        max_active: most actor files open at once (``None``: from the fd limit).
        max_pending_calls: calls waiting per actor before 429.
        graceful_timeout_s: seconds shutdown waits for running requests.
        keep_alive_timeout_s: seconds an idle keep-alive connection stays open;
            longer than clients keep idle connections (the Python client: 5 s),
            so a client never sends on a connection the server is closing.
        body_timeout_s: seconds a request body may take to arrive; then 408
            ``RequestTimeoutError`` and the connection closes.
        backlog: the listen backlog: connections the kernel holds before the
            server accepts them (Linux caps it at ``net.core.somaxconn``).
        max_requests: HTTP requests running at once; the next is answered 503
            ``ServerBusyError`` at once (health and metrics are exempt).
        max_connecting: accepted connections whose first request has not yet
            reached the app; further connections wait in the listen backlog.
        max_connect_wait_s: seconds a new connection's request may wait for one
            of the ``max_connecting`` places; then 503 ``ServerBusyError`` (nothing run).
        head_timeout_s: seconds a new connection may take to send its whole
            request head (request line and headers); until then it holds no
            place, after it is closed (:mod:`runtime.server.listener`).
        max_connections_per_peer: connections one client address may hold open
            at once; the next is answered 503 ``ServerBusyError`` with
            ``Retry-After``. Behind a reverse proxy every client has the proxy's
            address: raise it to what the proxy opens.
        max_queue_s: seconds a call may wait for its actor's turn, counted from
            its request's arrival (activation not counted); then 429
            ``ActorBusyError``, the call not run. A call the actor's queue would
            not reach in time is refused at once.
        cors_origins: web page origins (``https://app.example``, ``http://localhost:5173``)
            whose scripts may call the server and open its WebSockets
            (:mod:`runtime.server.browsers`); ``"*"`` allows any. Empty (the
            default): only pages the server itself serves.
        access_log: log one line per HTTP request and WebSocket (logger
            ``durable_sessions.access``, level INFO; ``serve --access-log``).
        drain_s: seconds between the start of a shutdown (SIGTERM) and the
            listener closing: ``GET /v1/ready`` answers 503 while every other
            route is still served, so a load balancer stops sending first.
        inspector: serve the inspector page at ``/inspect``
            (:mod:`runtime.server.inspector`); ``False``: the route does not exist.
        allowed_hosts: ``Host`` names answered besides the loopback ones and the bound
            address (:mod:`runtime.server.hosts`; ``"*"``: any). Checked on a server
            without a token, and on any server when set.
        certfile: TLS certificate chain (PEM) to serve ``https://`` and ``wss://`` with
            (``None``: plain HTTP); needs ``keyfile``.
        keyfile: the certificate's private key (PEM).
    """

    bind: str = "127.0.0.1:8787"
    data: Path = Path("data")
    idle_timeout_s: float = 30.0
    durability: str = "normal"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_body_items: int = DEFAULT_MAX_BODY_ITEMS
    max_active: int | None = None
    max_pending_calls: int = 1000
    graceful_timeout_s: float = 10.0
    keep_alive_timeout_s: float = 30.0
    body_timeout_s: float = 30.0
    backlog: int = 4096
    max_requests: int = 4096
    max_connecting: int = 64
    max_connect_wait_s: float = 0.5
    head_timeout_s: float = 3.0
    max_connections_per_peer: int = 512
    max_queue_s: float = 0.5
    cors_origins: tuple[str, ...] = ()
    access_log: bool = False
    drain_s: float = 0.0
    inspector: bool = True
    allowed_hosts: tuple[str, ...] = ()
    certfile: Path | None = None
    keyfile: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cors_origins", _origins(self.cors_origins))
        try:
            object.__setattr__(self, "allowed_hosts", normalise_hosts(self.allowed_hosts))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if (self.certfile is None) != (self.keyfile is None):
            raise ConfigError("server.certfile and server.keyfile go together (TLS needs both)")
        for name in ("certfile", "keyfile"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        if isinstance(self.drain_s, bool) or not isinstance(self.drain_s, (int, float)) or not self.drain_s >= 0:
            raise ConfigError(f"server.drain_s must be a number of seconds >= 0, not {self.drain_s!r}")
        if not isinstance(self.access_log, bool):
            raise ConfigError(f"server.access_log must be true or false, not {self.access_log!r}")
        if not isinstance(self.bind, str) or ":" not in self.bind or not self.bind.rpartition(":")[2].isdigit():
            raise ConfigError(f"server.bind must be 'host:port', not {self.bind!r}")
        if int(self.bind.rpartition(":")[2]) > 65535:
            raise ConfigError(f"server.bind: port {self.bind.rpartition(':')[2]} is not a port (0-65535)")
        if self.durability not in DURABILITIES:
            raise ConfigError(f"server.durability must be 'normal' or 'full', not {self.durability!r}")
        if not isinstance(self.inspector, bool):
            raise ConfigError(f"server.inspector must be true or false, not {self.inspector!r}")
        for name in ("idle_timeout_s", "graceful_timeout_s", "keep_alive_timeout_s", "body_timeout_s",
                     "max_queue_s", "max_connect_wait_s", "head_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"server.{name} must be a positive number of seconds, not {value!r}")
        for name in ("max_body_bytes", "max_body_items", "max_pending_calls", "max_active", "backlog", "max_requests",
                     "max_connecting", "max_connections_per_peer"):
            value = getattr(self, name)
            if value is None and name == "max_active":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"server.{name} must be a positive integer, not {value!r}")
        object.__setattr__(self, "data", Path(self.data))


#: Default lease length of a cluster (seconds): how long a dead owner's actors wait before moving.
DEFAULT_LEASE_S = 10.0


@dataclass(frozen=True)
class ClusterSettings:
    """Cluster mode (``[cluster]``; ``--cluster`` and its flags override it).

    Attributes:
        postgres: libpq connection string or ``postgresql://`` URL of the shared database
            (a one-database cluster; ``None`` when ``databases`` is given).
        databases: the connection strings of a cluster on several databases, in
            the order of its partition map (actors are spread over them by a
            hash of their id: docs/cluster.md "Several databases"); give
            ``postgres`` or ``databases``, not both. See :attr:`dsns`.
        host_id: this host's id in the cluster (``None``: a random one per start).
        advertise: this host's base URL as the other hosts reach it
            (``None``: ``http://`` + the bound address; see :meth:`advertise_url`).
        lease_s: seconds an owner holds an actor without renewing it; a dead
            host's actors move after at most this long.
        connect_timeout_s: at start, seconds to keep trying to reach Postgres
            before giving up (exit status 1).
        snapshot_bytes: log bytes after an actor's newest snapshot that make
            its owner store a new one (``None``: the host's default, 1 MiB);
            a new owner replays at most about this much.
        pitr_days: the point-in-time window in days (may be fractional; 0: off):
            the cluster keeps this much of each session's log and snapshots, and
            any moment of it can be restored (docs/operations.md, "Point-in-time restore").
    """

    postgres: str | None = None
    host_id: str | None = None
    advertise: str | None = None
    lease_s: float = DEFAULT_LEASE_S
    connect_timeout_s: float = 30.0
    snapshot_bytes: int | None = None
    databases: tuple[str, ...] = ()
    pitr_days: float = 7

    def __post_init__(self) -> None:
        if self.postgres is not None and self.databases:
            raise ConfigError("give cluster.postgres (one database) or cluster.databases (several), not both")
        if self.postgres is None and not self.databases:
            raise ConfigError("cluster.postgres or cluster.databases is missing (the shared databases' "
                              "connection strings)")
        if self.postgres is not None and (not isinstance(self.postgres, str) or not self.postgres.strip()):
            raise ConfigError("cluster.postgres must be a Postgres connection string or postgresql:// URL")
        if isinstance(self.databases, str) or not isinstance(self.databases, (list, tuple)):
            raise ConfigError(f"cluster.databases must be a list of Postgres connection strings, "
                              f"not {self.databases!r}")
        for entry in self.databases:
            if not isinstance(entry, str) or not entry.strip():
                raise ConfigError(f"cluster.databases: {entry!r} is not a Postgres connection string")
        duplicates = sorted({entry for entry in self.databases if self.databases.count(entry) > 1})
        if duplicates:
            raise ConfigError("cluster.databases names a database twice (each database once, in the same "
                              "order on every host)")
        object.__setattr__(self, "databases", tuple(self.databases))
        if self.host_id is not None and (not isinstance(self.host_id, str) or not _HOST_ID.fullmatch(self.host_id)):
            raise ConfigError(f"cluster.host_id must be 1-64 letters, digits, '.', '_', '-', not {self.host_id!r}")
        if self.advertise is not None:
            _check_url(self.advertise, "cluster.advertise")
            object.__setattr__(self, "advertise", self.advertise.rstrip("/"))
        for name in ("lease_s", "connect_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"cluster.{name} must be a positive number of seconds, not {value!r}")
        object.__setattr__(self, "lease_s", float(self.lease_s))
        value = self.snapshot_bytes
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"cluster.snapshot_bytes must be a positive integer, not {value!r}")
        days = self.pitr_days
        if isinstance(days, bool) or not isinstance(days, (int, float)) or not 0 <= days <= 3650:
            raise ConfigError(f"cluster.pitr_days must be a number of days from 0 (off) to 3650, not {days!r}")

    @property
    def dsns(self) -> tuple[str, ...]:
        """The cluster's databases in partition-map order (``(postgres,)`` for one database)."""
        return self.databases or (str(self.postgres),)

    def advertise_url(self, bound: str) -> str:
        """The URL to advertise: ``advertise``, else ``http://`` + ``bound`` (the ``host:port`` listened on).

        Raises:
            ConfigError: no ``advertise`` and ``bound`` is a wildcard address
                (``0.0.0.0``, ``::``) no other host could reach.
        """
        if self.advertise is not None:
            return self.advertise
        host = bound.rsplit(":", 1)[0].strip("[]")
        if host in ("0.0.0.0", "::", ""):
            raise ConfigError(f"listening on {bound} (every address): set cluster.advertise (--advertise) to the "
                              "URL the other hosts reach this one at")
        return f"http://{bound}"


def _origins(value: Any) -> tuple[str, ...]:
    """``server.cors_origins`` as normalised origins (``scheme://host[:port]``, lower case), ``"*"`` or ``"null"``.

    Raises:
        ConfigError: not a list of strings, or an entry that is no origin (a path, no scheme).
    """
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"server.cors_origins must be a list of origins such as [\"https://app.example\"], "
                          f"not {value!r}")
    found = []
    for entry in value:
        if entry in ("*", "null"):
            found.append(entry)
            continue
        parts = urlsplit(entry) if isinstance(entry, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or \
                parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise ConfigError(f"server.cors_origins: {entry!r} is not an origin (scheme://host[:port], no path)")
        port = f":{parts.port}" if parts.port is not None else ""
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        found.append(f"{parts.scheme}://{host.lower()}{port}")
    return tuple(found)


_HOST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: The command-line flag of each cluster setting (for error messages).
_CLUSTER_FLAGS = {"host_id": "--host-id", "advertise": "--advertise", "lease_s": "--lease"}


def _check_url(value: Any, name: str) -> None:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise ConfigError(f"{name} must be a base URL such as http://10.0.0.5:8801, not {value!r}")


@dataclass(frozen=True)
class StorageSettings:
    """Where the sessions live (``[storage]``; ``serve --postgres URL`` sets ``postgres``).

    Attributes:
        postgres: a Postgres connection string (``postgresql://...``): every
            session's messages, blocks, search entries and prompt go there
            (:mod:`actors.session_agent_postgres`); ``None``: each actor's
            SQLite file holds its session.
        pool_size: connections to Postgres, shared by every actor.
        timeout_s: seconds for connecting, waiting for a connection and one
            statement; past them a call answers 503 (retryable).
        encryption_key_file: the file holding the key that encrypts every SQLite
            file of the data folder (:mod:`storage.cipher`; extra ``encryption``),
            relative to the configuration file; ``None``: the variable
            ``DURABLE_SESSIONS_ENCRYPTION_KEY_FILE``, else no encryption.
    """

    postgres: str | None = None
    pool_size: int = 10
    timeout_s: float = 10.0
    encryption_key_file: Path | None = None

    def __post_init__(self) -> None:
        if self.postgres is not None and (not isinstance(self.postgres, str) or not self.postgres.strip()):
            raise ConfigError("storage.postgres must be a non-empty connection string")
        if isinstance(self.pool_size, bool) or not isinstance(self.pool_size, int) or self.pool_size < 1:
            raise ConfigError(f"storage.pool_size must be a positive integer, not {self.pool_size!r}")
        value = self.timeout_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"storage.timeout_s must be a positive number of seconds, not {value!r}")
        key_file = self.encryption_key_file
        if key_file is not None and (not isinstance(key_file, (str, Path)) or not str(key_file).strip()):
            raise ConfigError("storage.encryption_key_file must be the path of a file")
        if isinstance(key_file, str):
            object.__setattr__(self, "encryption_key_file", Path(key_file))


@dataclass(frozen=True)
class RetentionSettings:
    """How long idle sessions are kept (``[retention]``; docs/operations.md, "Data lifecycle").

    Attributes:
        delete_idle_after_days: sessions not written for more than this many
            days are deleted by ``durable-sessions gc`` (``POST /v1/host:gc``),
            by the host catalog's ``updatedAt``; ``None`` (default): nothing
            is ever deleted by retention.
    """

    delete_idle_after_days: int | None = None

    def __post_init__(self) -> None:
        value = self.delete_idle_after_days
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"retention.delete_idle_after_days must be a whole number of days >= 1, not {value!r}")


@dataclass(frozen=True)
class HostConfig:
    """A loaded configuration: ``server`` settings, ``storage``, the ``session`` every actor gets, and
    ``cluster`` (``None``: a single host)."""

    server: ServerSettings = field(default_factory=ServerSettings)
    session: SessionConfig = field(default_factory=SessionConfig)
    storage: StorageSettings = field(default_factory=StorageSettings)
    cluster: ClusterSettings | None = None
    retention: RetentionSettings = field(default_factory=RetentionSettings)

    def with_overrides(self, **changes: Any) -> HostConfig:
        """A copy with the ``server`` fields in ``changes`` replaced (``None`` values are ignored).

        Raises:
            ConfigError: a replaced value is invalid.
        """
        kept = {k: v for k, v in changes.items() if v is not None}
        return replace(self, server=replace(self.server, **kept))

    def with_cluster(self, postgres: str | Sequence[str] | None = None, **changes: Any) -> HostConfig:
        """A copy with cluster mode from ``postgres`` (one connection string or several, as
        ``--cluster`` repeated; else the file's) and the fields in ``changes`` replaced (``None``
        values are ignored); unchanged when neither gives a database.

        Raises:
            ConfigError: a replaced value is invalid.
        """
        kept = {k: v for k, v in changes.items() if v is not None}
        if isinstance(postgres, str):
            postgres = [postgres]
        if postgres:  # the flags' databases replace the file's
            kept["postgres"], kept["databases"] = (postgres[0], ()) if len(postgres) == 1 else (None, tuple(postgres))
        if self.cluster is None:
            if "postgres" not in kept:
                if kept:
                    flag = _CLUSTER_FLAGS.get(next(iter(kept)), next(iter(kept)))
                    raise ConfigError(f"{flag} needs --cluster (or a [cluster] section)")
                return self
            return replace(self, cluster=ClusterSettings(**kept))
        return replace(self, cluster=replace(self.cluster, **kept))


def load_config(path: str | os.PathLike[str] | None) -> HostConfig:
    """Read ``path`` (``None``: the defaults).

    Raises:
        ConfigError: the file cannot be read, is not TOML, has an unknown key
            or a bad value (the message names the key), or names a soul file,
            skills folder or summarizer that does not exist.
    """
    if path is None:
        return HostConfig()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    base = path.resolve().parent
    try:
        _only(data, {"server", "session", "storage", "cluster", "retention", "search"}, "")
        server = _server(_table(data, "server"), base)
        session = _session(_table(data, "session"), base)
        if "search" in data:
            session = replace(session, search=_search(_table(data, "search")))
        storage = _storage(_table(data, "storage"), base)
        cluster = _cluster(data["cluster"]) if "cluster" in data else None
        retention = _retention(_table(data, "retention"))
    except InvalidInputError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return HostConfig(server, session, storage, cluster, retention)


def _retention(table: dict[str, Any]) -> RetentionSettings:
    _only(table, {f.name for f in fields(RetentionSettings)}, "retention.")
    return RetentionSettings(**table)


def _search(table: dict[str, Any]) -> EmbedderConfig:
    _only(table, {f.name for f in fields(EmbedderConfig)}, "search.")
    return EmbedderConfig(**table)


def _storage(table: dict[str, Any], base: Path) -> StorageSettings:
    _only(table, {f.name for f in fields(StorageSettings)}, "storage.")
    values = dict(table)
    if isinstance(values.get("encryption_key_file"), str) and values["encryption_key_file"].strip():
        values["encryption_key_file"] = base / values["encryption_key_file"]
    return StorageSettings(**values)


def _table(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a table")
    return value


def _only(table: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(f"unknown key {where}{unknown[0]} (allowed: {', '.join(sorted(allowed))})")


def _server(table: dict[str, Any], base: Path) -> ServerSettings:
    _only(table, {f.name for f in fields(ServerSettings)}, "server.")
    values = dict(table)
    for key in ("data", "certfile", "keyfile"):
        if key in values:
            values[key] = base / str(values[key])
    return ServerSettings(**values)


def _cluster(table: Any) -> ClusterSettings:
    if not isinstance(table, dict):
        raise ConfigError("cluster must be a table")
    _only(table, {f.name for f in fields(ClusterSettings)}, "cluster.")
    if "postgres" not in table and "databases" not in table:
        raise ConfigError("cluster.postgres is missing (the shared database's connection string; or "
                          "cluster.databases, a list, for several)")
    if "databases" in table and not table["databases"]:
        raise ConfigError("cluster.databases must name at least one database")
    return ClusterSettings(**table)


def _session(table: dict[str, Any], base: Path) -> SessionConfig:
    _only(table, {"blocks", "cached_prompt", "compaction"}, "session.")
    values: dict[str, Any] = {}
    if "cached_prompt" in table:
        if not isinstance(table["cached_prompt"], bool):
            raise ConfigError("session.cached_prompt must be true or false")
        values["cached_prompt"] = table["cached_prompt"]
    if "blocks" in table:
        if not isinstance(table["blocks"], list):
            raise ConfigError("session.blocks must be an array of tables ([[session.blocks]])")
        values["blocks"] = tuple(_block(item, i, base) for i, item in enumerate(table["blocks"]))
    if "compaction" in table:
        values["compaction"] = _compaction(table["compaction"])
    return SessionConfig(**values)


def _block(item: Any, index: int, base: Path) -> BlockConfig:
    where = f"session.blocks[{index}]."
    if not isinstance(item, dict):
        raise ConfigError(f"{where[:-1]} must be a table")
    _only(item, {f.name for f in fields(BlockConfig)}, where)
    values = dict(item)
    for key in ("file", "path"):
        if key in values:
            values[key] = base / str(values[key])
    try:
        block = BlockConfig(**values)
    except InvalidInputError as exc:
        raise ConfigError(f"{where}{exc.field or 'label'}: {exc}") from None
    except TypeError as exc:
        raise ConfigError(f"{where[:-1]}: {exc}") from None
    if block.file is not None and not block.file.is_file():
        raise ConfigError(f"{where}file: {block.file} is not a file")
    if block.path is not None and not block.path.is_dir():
        raise ConfigError(f"{where}path: {block.path} is not a folder")
    return block


def _compaction(value: Any) -> CompactionConfig | None:
    if value is False:
        return None
    if not isinstance(value, dict):
        raise ConfigError("session.compaction must be a table or false")
    _only(value, {f.name for f in fields(CompactionConfig)}, "session.compaction.")
    values = dict(value)
    if values.get("threshold") == 0 and not isinstance(values.get("threshold"), bool):
        values["threshold"] = None
    try:
        config = CompactionConfig(**values)
        resolve_summarizer(config.summarizer)
    except InvalidInputError as exc:
        raise ConfigError(f"session.compaction.{exc.field}: {exc}") from None
    return config
