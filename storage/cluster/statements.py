"""Every statement the cluster sends to Postgres (``%(name)s`` parameters).

Postgres' ``now()`` is the only clock compared across hosts: lease expiries
are written and tested by the server. A host keeps its own deadline for each
lease with its monotonic clock, started *before* the granting statement was
sent (:mod:`storage.cluster.ownership`).

**Why the fence is an UPDATE.** Each write updates the actor's ``ds_actors``
row (``epoch`` and ``last_seq`` checked in its ``WHERE``) in the same
statement that inserts the log row. The UPDATE takes the row lock, so a
concurrent takeover (:data:`ACQUIRE`, which also updates the row) either
waits for the write to commit and then sees it (``last_seq``), or commits
first, and the write then re-checks the new row version and matches nothing.
A check that only reads the row (``WHERE EXISTS``) is not safe: it reads the
statement's snapshot, and a takeover committing between that snapshot and the
write's commit goes unnoticed (docs/cluster.md "Measured in the prototype", Q5A).

Changesets and images travel in binary (``%(name)b``): the text form of ``bytea``
doubles them in hex, which cost the client and the server about as much
again as the rest of a group-commit statement (8 entries: 190 -> 110 us of
client CPU, 175 -> 100 us of server CPU). The catalog rows (JSON text) travel in
binary too: the text form of a ``text[]`` escapes every ``"`` of every row
with a regular expression in Python (about 40 us of host CPU per append;
binary: none). The hot statements are prepared once per connection
(``prepare=True``).
"""

_LEASE = "now() + %(lease_ms)s * interval '1 millisecond'"

#: Take a free or expired actor, or re-take one this host owns (creating its row).
#: Every success bumps the epoch. Returns (epoch, last_seq, tail_bytes, base_version, catalogued, incarnation),
#: or no row; ``catalogued`` is false for a written actor without a ``ds_catalog`` row (written
#: before the cluster schema had the catalog: the new owner ships its row).
ACQUIRE = f"""
INSERT INTO ds_actors AS a (actor_id, owner, owner_address, epoch, lease_expires, base_version)
VALUES (%(actor)s, %(me)s, %(address)s, 1, {_LEASE}, %(base_version)s)
ON CONFLICT (actor_id) DO UPDATE
   SET owner = EXCLUDED.owner, owner_address = EXCLUDED.owner_address,
       epoch = a.epoch + 1, lease_expires = EXCLUDED.lease_expires
 WHERE a.owner IS NULL OR a.owner = EXCLUDED.owner OR a.lease_expires <= now()
RETURNING epoch, last_seq, tail_bytes, base_version,
          last_seq = 0 OR EXISTS (SELECT 1 FROM ds_catalog c WHERE c.actor_id = a.actor_id) AS catalogued,
          incarnation
"""

#: Who owns the actor and for how much longer (milliseconds by the server's clock).
OWNER = """
SELECT owner, owner_address, epoch, last_seq,
       GREATEST(0, ceil(EXTRACT(EPOCH FROM lease_expires - now()) * 1000))::bigint AS remaining_ms
  FROM ds_actors WHERE actor_id = %(actor)s
"""

#: Extend many leases. An owner keeps its epoch even if its lease lapsed meanwhile:
#: an unchanged epoch proves nobody else owned the actor in between.
RENEW = f"""
UPDATE ds_actors AS a SET lease_expires = {_LEASE}
  FROM unnest(%(actors)s::text[], %(epochs)s::bigint[]) AS r(actor_id, epoch)
 WHERE a.actor_id = r.actor_id AND a.owner = %(me)s AND a.epoch = r.epoch
RETURNING a.actor_id
"""

#: Give many actors up (the next caller anywhere acquires them at once).
RELEASE = """
UPDATE ds_actors AS a SET owner = NULL, owner_address = NULL, lease_expires = now()
  FROM unnest(%(actors)s::text[], %(epochs)s::bigint[]) AS r(actor_id, epoch)
 WHERE a.actor_id = r.actor_id AND a.owner = %(me)s AND a.epoch = r.epoch
"""

#: The columns of a catalog row as the JSON text an entry carries (:mod:`storage.cluster.catalog`).
_CATALOG_RECORD = """c(namespace text, kind text, name text, project_key text, session_id text, messages bigint,
      compactions bigint, compacted_through text, created_ms bigint, updated_ms bigint, mtime_ms bigint,
      summary text, delete boolean)"""

#: Upsert of a catalog row: ``created_ms`` is kept, a transcript's columns are kept when an entry
#: carries none (a write before the actor published its row again since it woke).
_CATALOG_UPSERT = """
  ON CONFLICT (actor_id) DO UPDATE SET
     namespace = EXCLUDED.namespace, name = coalesce(EXCLUDED.name, ds_catalog.name),
     kind = CASE WHEN EXCLUDED.project_key IS NULL THEN ds_catalog.kind ELSE EXCLUDED.kind END,
     project_key = coalesce(EXCLUDED.project_key, ds_catalog.project_key),
     session_id = coalesce(EXCLUDED.session_id, ds_catalog.session_id),
     mtime_ms = coalesce(EXCLUDED.mtime_ms, ds_catalog.mtime_ms),
     summary = coalesce(EXCLUDED.summary, ds_catalog.summary),
     messages = EXCLUDED.messages, compactions = EXCLUDED.compactions,
     compacted_through = EXCLUDED.compacted_through,
     created_ms = LEAST(ds_catalog.created_ms, EXCLUDED.created_ms),
     updated_ms = GREATEST(ds_catalog.updated_ms, EXCLUDED.updated_ms)"""

_CATALOG_COLUMNS = ("actor_id, namespace, kind, name, project_key, session_id, messages, compactions, "
                    "compacted_through, created_ms, updated_ms, mtime_ms, summary")
_CATALOG_VALUES = ("c.namespace, c.kind, c.name, c.project_key, c.session_id, c.messages, c.compactions, "
                   "c.compacted_through, c.created_ms, c.updated_ms, c.mtime_ms, c.summary")


def _catalog_ctes(source: str, catalog: str, actor: str) -> str:
    """The two CTEs that write the catalog row of each fenced actor: ``source`` yields ``actor_id``
    (fenced) and the row's JSON text as ``catalog`` (``NULL``: leave the row as it is)."""
    return f"""
catalog_set AS (
  INSERT INTO ds_catalog ({_CATALOG_COLUMNS})
  SELECT s.actor_id, {_CATALOG_VALUES}
    FROM {source}, jsonb_to_record({catalog}::jsonb) AS {_CATALOG_RECORD}
   WHERE {catalog} IS NOT NULL AND c.delete IS NOT TRUE{_CATALOG_UPSERT}),
catalog_del AS (
  DELETE FROM ds_catalog d USING {source}
   WHERE d.actor_id = {actor} AND {catalog} IS NOT NULL AND ({catalog}::jsonb ->> 'delete') = 'true')"""


#: The group commit: one statement appends the next entry of many actors.
#: Per actor: the fence (owner, epoch, ``last_seq = seq - 1``) renews the lease,
#: the log row is inserted, the alarm index follows (op 1: set, 2: delete, 0: as is), and so
#: does the catalog row (JSON text; ``NULL``: as it is; ``{"delete": true}``: removed).
#: Returns the actor ids whose entry was appended; any other was refused.
APPEND = f"""
WITH req AS (
  SELECT * FROM unnest(%(actors)s::text[], %(seqs)s::bigint[], %(epochs)s::bigint[], %(changesets)b::bytea[],
                       %(alarm_ops)s::smallint[], %(alarm_ms)s::bigint[], %(catalogs)b::text[])
    AS r(actor_id, seq, epoch, changeset, alarm_op, alarm_ms, catalog)),
fence AS (
  UPDATE ds_actors a SET last_seq = r.seq, lease_expires = {_LEASE},
                         tail_bytes = a.tail_bytes + octet_length(r.changeset)
    FROM req r
   WHERE a.actor_id = r.actor_id AND a.owner = %(me)s AND a.epoch = r.epoch AND a.last_seq = r.seq - 1
  RETURNING a.actor_id),
logged AS (
  INSERT INTO ds_log (actor_id, seq, epoch, changeset)
  SELECT r.actor_id, r.seq, r.epoch, r.changeset FROM req r JOIN fence f USING (actor_id)
  RETURNING actor_id),
alarm_set AS (
  INSERT INTO ds_alarms (actor_id, scheduled_ms)
  SELECT r.actor_id, r.alarm_ms FROM req r JOIN fence f USING (actor_id) WHERE r.alarm_op = 1
  ON CONFLICT (actor_id) DO UPDATE SET scheduled_ms = EXCLUDED.scheduled_ms),
alarm_del AS (
  DELETE FROM ds_alarms d USING req r JOIN fence f USING (actor_id)
   WHERE d.actor_id = r.actor_id AND r.alarm_op = 2),{_catalog_ctes("req s JOIN fence f USING (actor_id)", "s.catalog", "s.actor_id")}
SELECT actor_id FROM logged
"""

#: :data:`APPEND` for one actor (its catalog row too), with scalar parameters: half the client CPU of the array
#: form (psycopg's array dumping) and less server work; the common case when actors are few.
APPEND_ONE = f"""
WITH fence AS (
  UPDATE ds_actors SET last_seq = %(seq)s::bigint, lease_expires = {_LEASE},
                       tail_bytes = tail_bytes + octet_length(%(changeset)b::bytea)
   WHERE actor_id = %(actor)s AND owner = %(me)s AND epoch = %(epoch)s AND last_seq = %(seq)s - 1
  RETURNING actor_id),
logged AS (
  INSERT INTO ds_log (actor_id, seq, epoch, changeset)
  SELECT actor_id, %(seq)s::bigint, %(epoch)s::bigint, %(changeset)b::bytea FROM fence
  RETURNING actor_id),{_catalog_ctes("fence s", "%(catalog)s::text", "%(actor)s")}
SELECT actor_id FROM logged
"""

#: :data:`APPEND_ONE` that also moves the actor's row of the alarm index (op 1: set, 2: delete).
APPEND_ONE_ALARM = f"""
WITH fence AS (
  UPDATE ds_actors SET last_seq = %(seq)s::bigint, lease_expires = {_LEASE},
                       tail_bytes = tail_bytes + octet_length(%(changeset)b::bytea)
   WHERE actor_id = %(actor)s AND owner = %(me)s AND epoch = %(epoch)s AND last_seq = %(seq)s - 1
  RETURNING actor_id),
logged AS (
  INSERT INTO ds_log (actor_id, seq, epoch, changeset)
  SELECT actor_id, %(seq)s::bigint, %(epoch)s::bigint, %(changeset)b::bytea FROM fence
  RETURNING actor_id),
alarm_set AS (
  INSERT INTO ds_alarms (actor_id, scheduled_ms)
  SELECT actor_id, %(alarm_ms)s::bigint FROM fence WHERE %(alarm_op)s::smallint = 1
  ON CONFLICT (actor_id) DO UPDATE SET scheduled_ms = EXCLUDED.scheduled_ms),
alarm_del AS (
  DELETE FROM ds_alarms WHERE actor_id = %(actor)s AND %(alarm_op)s::smallint = 2 AND EXISTS (SELECT 1 FROM fence)),{_catalog_ctes("fence s", "%(catalog)s::text", "%(actor)s")}
SELECT actor_id FROM logged
"""

#: After an append that matched nothing, or whose outcome is unknown: why, per actor.
DIAGNOSE = """
SELECT r.actor_id, a.owner, a.owner_address, a.epoch, a.last_seq, l.epoch, md5(l.changeset),
       s.epoch, GREATEST(0, ceil(EXTRACT(EPOCH FROM a.lease_expires - now()) * 1000))::bigint
  FROM unnest(%(actors)s::text[], %(seqs)s::bigint[]) AS r(actor_id, seq)
  LEFT JOIN ds_actors a ON a.actor_id = r.actor_id
  LEFT JOIN ds_log l ON l.actor_id = r.actor_id AND l.seq = r.seq
  LEFT JOIN ds_snapshots s ON s.actor_id = r.actor_id AND s.seq = r.seq
"""

#: Where the log and snapshots of an actor may be trimmed once a snapshot at ``%(seq)s`` exists, as two
#: bounds: log entries below ``log_below`` and snapshots below ``snap_below`` go. Without a point-in-time
#: window (``%(window_ms)s`` = 0) the new snapshot covers everything before it. With one, the base of the
#: window is kept: the newest snapshot stored at least the window ago (and its own log row, which maps
#: its time), with every entry and snapshot after it, so every moment of the window can be rebuilt
#: (:mod:`storage.cluster.history`); ``NULL`` (no such snapshot) trims nothing.
_WINDOW_BASE = """(SELECT max(seq) FROM ds_snapshots WHERE actor_id = %(actor)s
                    AND written_at <= now() - %(window_ms)s::bigint * interval '1 millisecond')"""


def _trim_ctes(source: str, log_below_plain: str) -> str:
    """The CTEs that trim an actor's log and snapshots behind a snapshot at ``%(seq)s`` (see
    :data:`_WINDOW_BASE`), once ``source`` (a CTE) returned a row."""
    return f"""
base AS (
  SELECT CASE WHEN %(window_ms)s::bigint = 0 THEN {log_below_plain} ELSE {_WINDOW_BASE} END AS log_below,
         CASE WHEN %(window_ms)s::bigint = 0 THEN %(seq)s::bigint ELSE {_WINDOW_BASE} END AS snap_below
    FROM {source} LIMIT 1),
trim_log AS (
  DELETE FROM ds_log WHERE actor_id = %(actor)s AND seq < (SELECT log_below FROM base)),
trim_snapshots AS (
  DELETE FROM ds_snapshots WHERE actor_id = %(actor)s AND seq < (SELECT snap_below FROM base))"""


#: A log entry that is a whole file (the schema changed, so changesets cannot carry it; or a
#: point-in-time restore): fenced like APPEND; the log and snapshots it makes unneeded (outside the
#: point-in-time window) are trimmed in the same statement.
APPEND_SNAPSHOT = f"""
WITH fence AS (
  UPDATE ds_actors SET last_seq = %(seq)s, lease_expires = {_LEASE}, tail_bytes = 0
   WHERE actor_id = %(actor)s AND owner = %(me)s AND epoch = %(epoch)s AND last_seq = %(seq)s - 1
  RETURNING actor_id),
snap AS (
  INSERT INTO ds_snapshots (actor_id, seq, epoch, schema_version, image)
  SELECT actor_id, %(seq)s, %(epoch)s, %(schema_version)s, %(image)b FROM fence
  RETURNING actor_id),
logged AS (
  INSERT INTO ds_log (actor_id, seq, epoch, changeset)
  SELECT actor_id, %(seq)s, %(epoch)s, ''::bytea FROM fence),{_trim_ctes("fence", "%(seq)s::bigint")},
alarm_set AS (
  INSERT INTO ds_alarms (actor_id, scheduled_ms)
  SELECT actor_id, %(alarm_ms)s FROM fence WHERE %(alarm_op)s = 1
  ON CONFLICT (actor_id) DO UPDATE SET scheduled_ms = EXCLUDED.scheduled_ms),
alarm_del AS (
  DELETE FROM ds_alarms WHERE actor_id = %(actor)s AND %(alarm_op)s = 2 AND EXISTS (SELECT 1 FROM fence)),{_catalog_ctes("fence s", "%(catalog)s::text", "%(actor)s")}
SELECT actor_id FROM snap
"""

#: A snapshot of a state already in the log (entries up to ``seq`` durable), taken by the
#: owner; the log it covers and older snapshots go (outside the point-in-time window). Returns a
#: row when it was stored.
STORE_SNAPSHOT = f"""
WITH fence AS (
  UPDATE ds_actors SET tail_bytes = (
           SELECT coalesce(sum(octet_length(changeset)), 0) FROM ds_log
            WHERE actor_id = %(actor)s AND seq > %(seq)s)
   WHERE actor_id = %(actor)s AND owner = %(me)s AND epoch = %(epoch)s AND last_seq >= %(seq)s
  RETURNING actor_id),
snap AS (
  INSERT INTO ds_snapshots (actor_id, seq, epoch, schema_version, image)
  SELECT actor_id, %(seq)s, %(epoch)s, %(schema_version)s, %(image)b FROM fence
  ON CONFLICT (actor_id, seq) DO NOTHING
  RETURNING actor_id),{_trim_ctes("snap", "%(seq)s::bigint + 1")}
SELECT actor_id FROM snap
"""

#: Every actor's log and snapshots older than the point-in-time window that no moment of the window
#: needs (see :data:`_WINDOW_BASE`): what a snapshot's own trim left behind for actors that have not
#: stored one since, for at most ``%(limit)s`` actors. Returns ``(actors, log rows, log bytes, snapshots)``
#: pruned. Not fenced: it removes only history behind a snapshot that stays.
PRUNE_WINDOW = """
WITH candidates AS (
  SELECT actor_id, max(seq) AS seq FROM ds_snapshots
   WHERE written_at <= now() - %(window_ms)s::bigint * interval '1 millisecond'
   GROUP BY actor_id),
base AS (
  SELECT c.actor_id, c.seq FROM candidates c
   WHERE EXISTS (SELECT 1 FROM ds_log l WHERE l.actor_id = c.actor_id AND l.seq < c.seq)
      OR EXISTS (SELECT 1 FROM ds_snapshots s WHERE s.actor_id = c.actor_id AND s.seq < c.seq)
   LIMIT %(limit)s),
log_del AS (
  DELETE FROM ds_log l USING base b WHERE l.actor_id = b.actor_id AND l.seq < b.seq
  RETURNING octet_length(l.changeset) AS size),
snapshots_del AS (
  DELETE FROM ds_snapshots s USING base b WHERE s.actor_id = b.actor_id AND s.seq < b.seq RETURNING 1)
SELECT (SELECT count(*) FROM base), (SELECT count(*) FROM log_del), (SELECT coalesce(sum(size), 0) FROM log_del),
       (SELECT count(*) FROM snapshots_del)
"""

#: Point-in-time restore (:mod:`storage.cluster.history`): the newest entry written at or before
#: ``%(at)s`` (epoch ms; ``NULL`` when none), the oldest entry kept, the actor's newest entry, and the
#: server's time (epoch ms).
POINT_AT = """
SELECT (SELECT max(seq) FROM ds_log WHERE actor_id = %(actor)s
         AND written_at <= to_timestamp(%(at_ms)s::bigint / 1000.0)),
       (SELECT min(seq) FROM ds_log WHERE actor_id = %(actor)s),
       (SELECT last_seq FROM ds_actors WHERE actor_id = %(actor)s),
       (EXTRACT(EPOCH FROM now()) * 1000)::bigint
"""

#: When an entry was written (epoch ms), or no row when it is not kept.
ENTRY_TIME = """
SELECT (EXTRACT(EPOCH FROM written_at) * 1000)::bigint FROM ds_log WHERE actor_id = %(actor)s AND seq = %(seq)s
"""

#: The server's time (epoch ms).
NOW_MS = "SELECT (EXTRACT(EPOCH FROM now()) * 1000)::bigint"

#: Restore reads, in one REPEATABLE READ transaction (a concurrent trim cannot split them).
LATEST_SNAPSHOT = """
SELECT seq, schema_version, image FROM ds_snapshots
 WHERE actor_id = %(actor)s AND seq <= %(upto)s ORDER BY seq DESC LIMIT 1
"""
TAIL = """
SELECT seq, changeset FROM ds_log
 WHERE actor_id = %(actor)s AND seq > %(after)s AND seq <= %(upto)s ORDER BY seq
"""

#: Due alarms of actors no live host owns, in bound namespaces (the actor id's prefix).
DUE_ALARMS = """
SELECT al.actor_id, al.scheduled_ms FROM ds_alarms al JOIN ds_actors a USING (actor_id)
 WHERE al.scheduled_ms <= (EXTRACT(EPOCH FROM now()) * 1000)::bigint
   AND (a.owner IS NULL OR a.lease_expires <= now())
   AND split_part(al.actor_id, '/', 1) = ANY(%(namespaces)s::text[])
 ORDER BY al.scheduled_ms LIMIT %(limit)s
"""

#: Erase an actor (a deleted session): its lease row, log, snapshots, alarm and catalog rows, in this one
#: statement (one transaction), fenced like :data:`APPEND` by the lease the erasing host holds (owner,
#: epoch). The ``ds_actors`` row goes too, so the actor reads as never written and its next write starts
#: a fresh one (epoch 1, seq 1). Returns ``(log rows, snapshots)`` removed, or no row when the fence failed.
ERASE = """
WITH fence AS (
  DELETE FROM ds_actors WHERE actor_id = %(actor)s AND owner = %(me)s AND epoch = %(epoch)s
  RETURNING actor_id),
log_del AS (
  DELETE FROM ds_log WHERE actor_id = %(actor)s AND EXISTS (SELECT 1 FROM fence) RETURNING seq),
snapshots_del AS (
  DELETE FROM ds_snapshots WHERE actor_id = %(actor)s AND EXISTS (SELECT 1 FROM fence) RETURNING seq),
alarm_del AS (
  DELETE FROM ds_alarms WHERE actor_id = %(actor)s AND EXISTS (SELECT 1 FROM fence)),
catalog_del AS (
  DELETE FROM ds_catalog WHERE actor_id = %(actor)s AND EXISTS (SELECT 1 FROM fence))
SELECT (SELECT count(*) FROM log_del), (SELECT count(*) FROM snapshots_del) FROM fence
"""

#: Whether the actor was ever written anywhere in the cluster.
WRITTEN = "SELECT last_seq > 0 FROM ds_actors WHERE actor_id = %(actor)s"

REGISTER_HOST = f"""
INSERT INTO ds_hosts (host_id, address, lease_expires) VALUES (%(me)s, %(address)s, {_LEASE})
ON CONFLICT (host_id) DO UPDATE SET address = EXCLUDED.address, lease_expires = EXCLUDED.lease_expires
"""
LIVE_HOSTS = "SELECT host_id, address FROM ds_hosts WHERE lease_expires > now() ORDER BY host_id"
UNREGISTER_HOST = "DELETE FROM ds_hosts WHERE host_id = %(me)s"
#: Hosts gone for a day are forgotten (their actors were taken long ago).
FORGET_HOSTS = "DELETE FROM ds_hosts WHERE lease_expires < now() - interval '1 day'"

#: One page of a namespace's catalog (:mod:`storage.cluster.catalog`): named actors, newest
#: ``updated_ms`` first (ties: actor id descending, bytewise), below the key ``(below_ms, below_actor)``
#: (``NULL``: from the top),
#: names starting with ``prefix`` (``NULL``: any). ``active``: a live host holds its lease.
CATALOG_PAGE = """
SELECT c.actor_id, c.name, c.messages, c.compactions, c.compacted_through, c.created_ms, c.updated_ms,
       (a.owner IS NOT NULL AND a.lease_expires > now()) AS active
  FROM ds_catalog c LEFT JOIN ds_actors a USING (actor_id)
 WHERE c.namespace = %(namespace)s AND c.kind = 'session' AND c.name IS NOT NULL
   AND (%(below_ms)s::bigint IS NULL
        OR (c.updated_ms, c.actor_id COLLATE "C") < (%(below_ms)s::bigint, %(below_actor)s::text COLLATE "C"))
   AND (%(prefix)s::text IS NULL OR starts_with(c.name, %(prefix)s::text))
 ORDER BY c.updated_ms DESC, c.actor_id COLLATE "C" DESC
 LIMIT %(limit)s
"""

#: One actor's catalog row (same columns as :data:`CATALOG_PAGE`).
CATALOG_GET = """
SELECT c.actor_id, c.name, c.messages, c.compactions, c.compacted_through, c.created_ms, c.updated_ms,
       (a.owner IS NOT NULL AND a.lease_expires > now()) AS active
  FROM ds_catalog c LEFT JOIN ds_actors a USING (actor_id)
 WHERE c.actor_id = %(actor)s AND c.kind = 'session'
"""

#: The transcript sessions of a project: ``(session_id, mtime_ms, summary)`` by session id
#: (bytewise, as SQLite orders them on a single host).
TRANSCRIPT_ROWS = """
SELECT session_id, mtime_ms, summary FROM ds_catalog
 WHERE project_key = %(project_key)s AND kind = 'transcript'
 ORDER BY session_id COLLATE "C"
"""
