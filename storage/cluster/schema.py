"""The cluster's tables in Postgres, created idempotently.

``ds_cluster_meta``  ``key -> value``: ``schema_version``, ``cluster_id``
                     (a random UUID made with the tables: the identity of
                     this database; an actor file remembers which one its
                     log belongs to), and the *partition map* the database
                     belongs to (``partitions``, ``partition_map``: see
                     :func:`record_partition_map`).
``ds_hosts``         one row per running host: ``host_id`` (random per process
                     start), ``address`` (the URL other hosts forward to) and
                     a host lease, renewed with the actors' leases.
``ds_actors``        one row per actor ever activated in the cluster, and the
                     *fence*: ``owner`` (a host id, ``NULL`` once released),
                     ``owner_address``, ``epoch`` (+1 on every acquisition: the
                     fencing token), ``lease_expires`` (Postgres time),
                     ``last_seq`` (the newest log entry), ``tail_bytes`` (log
                     bytes after the newest snapshot), ``base_version``
                     (the actor-file schema version its log starts from) and
                     ``incarnation`` (version 3: when the row was created, in
                     microseconds; a session deleted and written again has a
                     new one, so a host's stale copy of the old one is never
                     taken for current).
``ds_log``           the durable log: ``(actor_id, seq)`` -> the writer's
                     ``epoch``, a SQLite session ``changeset`` (an empty
                     one where the entry is a snapshot) and ``written_at``
                     (version 3: the server's time of the append, which
                     maps a point in time to an entry for point-in-time
                     restore: :mod:`storage.cluster.history`).
``ds_snapshots``     whole actor files, ``zlib`` of ``sqlite3_serialize``, each
                     covering the log up to and including ``seq``, and
                     ``written_at`` (version 3). The log and snapshots of the
                     point-in-time window (``[cluster] pitr_days``) are kept.
``ds_alarms``        the cluster-wide alarm index: one row per actor with an
                     alarm, written in the statement of the log entry that
                     changed it.
``ds_catalog``       (version 2) the listing: one row per written actor --
                     ``namespace``, ``kind`` (``session`` or ``transcript``),
                     ``name`` (a session id), ``messages``, ``compactions``,
                     ``compacted_through``, ``created_ms``/``updated_ms`` (epoch
                     ms), and for a transcript actor ``project_key``,
                     ``session_id``, ``mtime_ms`` and the folded ``summary``
                     (JSON text). Written in the statement of each log entry,
                     fenced like it (:mod:`storage.cluster.catalog`).

Version 1 databases (no ``ds_catalog``) are upgraded in place by the first
host of version 2 that starts: the table is created empty, and a written
actor gets its row the next time it wakes (``ACQUIRE`` says it has none; its
first entry then carries it). Version 3 adds ``written_at`` to ``ds_log`` and
``ds_snapshots`` and ``incarnation`` to ``ds_actors`` (rows already there get
the time of the upgrade; each actor file is rebuilt once on its next activation,
its marker naming no incarnation yet).

Actor ids are ``<namespace>/<64 hex>``. Everything runs in one transaction
under an advisory lock, so hosts starting together do not race; a database
of a newer cluster schema is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from common.errors import DatabaseError, SchemaTooNewError

from .driver import PgConnection

#: Version of the cluster tables this code writes (``ds_cluster_meta.schema_version``).
CLUSTER_SCHEMA_VERSION = 3

_LOCK_KEY = 0x64735F636C  # "ds_cl": one advisory lock for schema changes

_DDL = """
CREATE TABLE IF NOT EXISTS ds_cluster_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE IF NOT EXISTS ds_hosts (
    host_id       text PRIMARY KEY,
    address       text NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    lease_expires timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS ds_actors (
    actor_id      text PRIMARY KEY,
    owner         text,
    owner_address text,
    epoch         bigint NOT NULL,
    lease_expires timestamptz NOT NULL,
    last_seq      bigint NOT NULL DEFAULT 0,
    tail_bytes    bigint NOT NULL DEFAULT 0,
    base_version  integer NOT NULL
) WITH (fillfactor = 70);
ALTER TABLE ds_actors ADD COLUMN IF NOT EXISTS incarnation text NOT NULL
    DEFAULT (floor(EXTRACT(EPOCH FROM now()) * 1000000))::bigint::text;
CREATE TABLE IF NOT EXISTS ds_log (
    actor_id  text   NOT NULL,
    seq       bigint NOT NULL,
    epoch     bigint NOT NULL,
    changeset bytea  NOT NULL,
    PRIMARY KEY (actor_id, seq)
);
ALTER TABLE ds_log ALTER COLUMN changeset SET STORAGE EXTERNAL;
ALTER TABLE ds_log ADD COLUMN IF NOT EXISTS written_at timestamptz NOT NULL DEFAULT now();
CREATE TABLE IF NOT EXISTS ds_snapshots (
    actor_id       text    NOT NULL,
    seq            bigint  NOT NULL,
    epoch          bigint  NOT NULL,
    schema_version integer NOT NULL,
    image          bytea   NOT NULL,
    PRIMARY KEY (actor_id, seq)
);
ALTER TABLE ds_snapshots ALTER COLUMN image SET STORAGE EXTERNAL;
ALTER TABLE ds_snapshots ADD COLUMN IF NOT EXISTS written_at timestamptz NOT NULL DEFAULT now();
CREATE TABLE IF NOT EXISTS ds_alarms (
    actor_id     text PRIMARY KEY,
    scheduled_ms bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS ds_alarms_due ON ds_alarms (scheduled_ms);
CREATE TABLE IF NOT EXISTS ds_catalog (
    actor_id          text PRIMARY KEY,
    namespace         text NOT NULL,
    kind              text NOT NULL,
    name              text,
    project_key       text,
    session_id        text,
    messages          bigint NOT NULL DEFAULT 0,
    compactions       bigint NOT NULL DEFAULT 0,
    compacted_through text,
    created_ms        bigint NOT NULL,
    updated_ms        bigint NOT NULL,
    mtime_ms          bigint,
    summary           text
) WITH (fillfactor = 70);
CREATE INDEX IF NOT EXISTS ds_catalog_by_update
    ON ds_catalog (namespace, updated_ms DESC, actor_id COLLATE "C" DESC) WHERE name IS NOT NULL;
CREATE INDEX IF NOT EXISTS ds_catalog_by_project
    ON ds_catalog (project_key, session_id) WHERE project_key IS NOT NULL;
INSERT INTO ds_cluster_meta (key, value) VALUES ('cluster_id', gen_random_uuid()::text)
    ON CONFLICT (key) DO NOTHING;
INSERT INTO ds_cluster_meta (key, value) VALUES ('schema_version', '3')
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
"""

_READ_META = "SELECT key, value FROM ds_cluster_meta WHERE key IN ('cluster_id', 'schema_version')"


#: Seconds the start-up schema step (:func:`create_cluster_schema`) may take, waiting for other hosts' included.
SCHEMA_TIMEOUT_S = 60.0


async def create_cluster_schema(conn: PgConnection) -> str:
    """Create the cluster tables if missing; return the cluster id.

    Idempotent and safe to run from several hosts at once.

    Raises:
        SchemaTooNewError: the database holds a newer cluster schema.
        StorageUnavailableError, DatabaseError: see :class:`PgConnection`.
    """
    async with conn.transaction():
        # Start-up only, never on a call's path: the DDL (or another host's, holding the lock) may take
        # longer than the per-statement limit a short lease sets, so this transaction gets its own.
        limit_ms = round(SCHEMA_TIMEOUT_S * 1000)
        for setting in ("statement_timeout", "lock_timeout"):
            await conn.execute(f"SET LOCAL {setting} = {limit_ms}", timeout_s=SCHEMA_TIMEOUT_S)
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY], timeout_s=SCHEMA_TIMEOUT_S)
        meta = await _read_meta(conn)
        found = int(meta.get("schema_version", 0))
        if found > CLUSTER_SCHEMA_VERSION:
            raise SchemaTooNewError("the cluster tables in Postgres", found, CLUSTER_SCHEMA_VERSION)
        # also upgrades versions 1 and 2: ds_catalog (2), written_at (3)
        await conn.execute(_DDL, timeout_s=SCHEMA_TIMEOUT_S)
        meta = await _read_meta(conn)
    return meta["cluster_id"]


async def _read_meta(conn: PgConnection) -> dict[str, str]:
    exists = await conn.execute("SELECT to_regclass('ds_cluster_meta') IS NOT NULL")
    if not exists[0][0]:
        return {}
    return dict(await conn.execute(_READ_META))


@dataclass(frozen=True, slots=True)
class PartitionMap:
    """How a cluster's actors are spread over its databases, as each of them records it.

    Attributes:
        partitions: the fixed number of partitions actor ids hash into.
        databases: ``(cluster_id, name)`` of each database, in map order
            (partition ``p`` lives in database ``p % len(databases)``); the
            name is ``host:port/dbname``, for messages only (never a password).
    """

    partitions: int
    databases: tuple[tuple[str, str], ...]

    @property
    def ids(self) -> tuple[str, ...]:
        """The databases' cluster ids, in map order."""
        return tuple(cluster_id for cluster_id, _name in self.databases)


#: The partition of a row's ``actor_id`` in SQL (the same hash as ``runtime.host.partitions.partition_of``,
#: for 256 partitions): for moving rows by hand when a database is added (docs/cluster.md).
PARTITION_OF_SQL = "mod(('x' || left(encode(sha256(convert_to(actor_id, 'UTF8')), 'hex'), 8))::bit(32)::bigint, 256)"

_READ_MAP = "SELECT key, value FROM ds_cluster_meta WHERE key IN ('partitions', 'partition_map')"
_WRITE_MAP = """INSERT INTO ds_cluster_meta (key, value) VALUES ('partitions', %s), ('partition_map', %s)
    ON CONFLICT (key) DO NOTHING"""


async def record_partition_map(conn: PgConnection, proposed: PartitionMap, own_id: str, *,
                               write: bool = True) -> PartitionMap | None:
    """The partition map this database belongs to; ``proposed`` is recorded first when it has none
    (with ``write=False``: nothing is written, and ``None`` means no map is recorded yet).

    ``own_id`` is this database's ``cluster_id``. A database without a map
    that already holds actors was used by a one-database cluster (written
    before maps were recorded): its map is itself alone, not ``proposed``,
    so its actors are never spread away from it. Runs in one transaction
    under the schema lock: hosts starting together agree.

    Raises:
        DatabaseError: the recorded map does not parse (edited by hand).
        StorageUnavailableError: see :class:`PgConnection`.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        recorded = dict(await conn.execute(_READ_MAP))
        if not recorded:
            if len(proposed.databases) > 1 and (await conn.execute("SELECT EXISTS (SELECT 1 FROM ds_actors)"))[0][0]:
                name = dict(proposed.databases).get(own_id, own_id)
                proposed = PartitionMap(proposed.partitions, ((own_id, name),))
                if not write:
                    return proposed
            if not write:
                return None
            await conn.execute(_WRITE_MAP, [str(proposed.partitions),
                                            json.dumps([list(entry) for entry in proposed.databases])])
            recorded = dict(await conn.execute(_READ_MAP))
    try:
        databases = tuple((str(cluster_id), str(name)) for cluster_id, name in json.loads(recorded["partition_map"]))
        return PartitionMap(int(recorded["partitions"]), databases)
    except (KeyError, ValueError, TypeError) as exc:
        raise DatabaseError(f"the partition map in ds_cluster_meta does not parse ({exc!r})") from None
