"""Cluster storage: actor files made durable in a shared Postgres (``serve --cluster``).

Several hosts share one Postgres database; each actor's SQLite file stays
its working copy on the host that owns it, and Postgres holds what makes it
durable and movable:

* :mod:`~storage.cluster.driver` -- psycopg connections driven by anyio (they run under trio);
* :mod:`~storage.cluster.schema` -- the cluster tables, created idempotently;
* :mod:`~storage.cluster.ownership` -- leases: one owner per actor, fenced by epochs;
* :mod:`~storage.cluster.capture` -- every committed change of a file, as changesets;
* :mod:`~storage.cluster.log` -- the fenced, group-committed log and each actor's output gate;
* :mod:`~storage.cluster.restore` -- snapshots, and rebuilding a file from Postgres.

Like the rest of :mod:`storage` this knows nothing of actors or the runtime
and imports no trio (waits are anyio). docs/cluster.md tells the whole design.
"""

from .capture import MARKER_TABLE, ChangeCapture, Marker, read_marker, start_capture, write_marker
from .driver import PgConnection, PgPool
from .log import ActorLog, GroupCommitAppender, LogStatistics
from .ownership import Lease, Owner, Ownership
from .restore import RestoreError, file_marker, file_state, restore_actor, restore_file
from .schema import CLUSTER_SCHEMA_VERSION, create_cluster_schema

__all__ = [
    "CLUSTER_SCHEMA_VERSION",
    "MARKER_TABLE",
    "ActorLog",
    "ChangeCapture",
    "GroupCommitAppender",
    "Lease",
    "LogStatistics",
    "Marker",
    "Owner",
    "Ownership",
    "PgConnection",
    "PgPool",
    "RestoreError",
    "create_cluster_schema",
    "file_marker",
    "file_state",
    "read_marker",
    "restore_actor",
    "restore_file",
    "start_capture",
    "write_marker",
]
