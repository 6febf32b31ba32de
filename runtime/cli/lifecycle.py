"""The data-lifecycle commands: ``delete``, ``export``, ``import`` of an archive, ``gc``, ``backup``, ``restore``.

::

    durable-sessions delete  SESSION_ID                 erase a session (DELETE /v1/sessions/{id})
    durable-sessions export  SESSION_ID [-o FILE]       its archive (docs/export-format.md), stdout by default
    durable-sessions import  ARCHIVE [--prefix P]       an archive (told by its header line) -> a new session
    durable-sessions gc      [--dry-run]                delete sessions idle past [retention] delete_idle_after_days
    durable-sessions backup  --to DIR                   an online copy of every session (the server writes DIR)
    durable-sessions restore --from DIR --data DIR      a backup back into a new data folder (no server on it)

All but ``restore`` are clients of a running server (``--url``, ``--token``)
and load no server module. ``backup`` asks the server to copy (``POST
/v1/host:backup``): a running host holds every awake actor's file with an
exclusive lock, so only the host can read them; it copies each one through
SQLite's online backup API from the actor's own connection, as one turn,
while other actors keep serving. ``restore`` runs here, on a folder no
process holds (:mod:`runtime.host.folder_lock`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from common.archive import is_archive_head, parse_archive

__all__ = ["add_parsers", "is_archive", "run"]

#: The commands of this module, and those of them that are clients of a server.
COMMANDS = ("delete", "export", "gc", "backup", "restore")
CLIENT_COMMANDS = frozenset({"delete", "export", "gc", "backup"})


class LifecycleUsageError(Exception):
    """Bad arguments (exit status 2)."""


def add_parsers(commands: Any, client_options: Any) -> None:
    """Add the subcommands to ``commands`` (main's ``_Commands``); ``client_options(parser)`` adds ``--url``/``--token``."""
    delete = commands.add_parser("delete", help="delete a session and erase its data")
    delete.add_argument("session_id")
    client_options(delete)
    export = commands.add_parser("export", help="write a session's archive (JSON Lines, docs/export-format.md)")
    export.add_argument("session_id")
    export.add_argument("-o", "--output", type=Path, help="write to FILE (default: stdout)")
    client_options(export)
    gc = commands.add_parser("gc", help="delete sessions idle past [retention] delete_idle_after_days")
    gc.add_argument("--dry-run", action="store_true", dest="dry_run", help="only list what would be deleted")
    client_options(gc)
    backup = commands.add_parser("backup", help="copy every session while the server runs")
    backup.add_argument("--to", type=Path, required=True, help="new or empty folder (on the server's machine)")
    client_options(backup)
    restore = commands.add_parser("restore", help="bring a backup back as a data folder (no server on it)")
    restore.add_argument("--from", type=Path, required=True, dest="source", help="the backup folder")
    restore.add_argument("--data", type=Path, required=True, help="the data folder to fill (new or empty)")


def is_archive(path: Path) -> bool:
    """``True`` when the file's first line is an archive header (``import`` then reads it as one)."""
    try:
        with open(path, "rb") as handle:
            return is_archive_head(handle.readline())
    except OSError:
        return False


async def run(command: str, args: argparse.Namespace, client: Any) -> int:
    """Run a client command with ``client`` (an open-able :class:`runtime.client.SessionsClient`)."""
    async with client:
        if command == "delete":
            await client.delete_session(args.session_id)
            print(f"deleted session {args.session_id}")
        elif command == "export":
            await _export(client, args)
        elif command == "gc":
            _report_gc(await client.collect_garbage(dry_run=args.dry_run))
        elif command == "backup":
            found = await client.backup_host(str(args.to.resolve()))
            print(f"backed up {found['sessions']} actor files ({found['bytes']} bytes) to {found['to']}")
    return 0


async def _export(client: Any, args: argparse.Namespace) -> None:
    text = await client.export_session(args.session_id)
    if args.output is None:
        sys.stdout.write(text)
        return
    partial = args.output.with_name(args.output.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, args.output)
    print(f"exported session {args.session_id} to {args.output} ({text.count(chr(10))} records)", file=sys.stderr)


def _report_gc(found: dict[str, Any]) -> None:
    if found["idleDays"] is None:
        print("retention is off ([retention] delete_idle_after_days is not set): nothing deleted")
        return
    verb = "deleted" if found["deleted"] else "would delete"
    for entry in found["sessions"]:
        print(f"{verb} {entry['id']} (last written {entry['updatedAt']})")
    print(f"{verb} {len(found['sessions'])} sessions idle for more than {found['idleDays']} days")


async def import_archive(path: Path, prefix: str, client: Any) -> int:
    """``import`` of an archive: check every line here, then ``POST /v1/sessions/{prefix+id}/import``.

    Raises:
        ArchiveError: the first bad line (nothing is sent).
    """
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    records = parse_archive(text.splitlines())
    session_id = prefix + records[0]["sessionId"]
    async with client:
        count = await client.import_session(session_id, text)
    print(f"imported session {session_id}: {count} messages stored")
    return 0


def restore(source: Path, data: Path) -> int:
    """Copy the backup ``source`` into the new or empty data folder ``data`` (holding its lock meanwhile).

    Every database is checked first (``PRAGMA quick_check``); nothing is copied when one fails.

    Raises:
        LifecycleUsageError: ``source`` is not a backup, ``data`` is not empty, or a copied file is damaged.
        DataFolderLockedError: a process holds ``data``.
    """
    from runtime.host.folder_lock import DataFolderLock
    from storage.backup import check_database
    from storage.catalog import CATALOG_FILE
    from storage.private_files import make_private_dirs

    if not (source / CATALOG_FILE).is_file():
        raise LifecycleUsageError(f"{source} is not a backup (no {CATALOG_FILE} in it)")
    files = sorted(path for path in source.rglob("*.sqlite3") if path.is_file() and not path.is_symlink())
    for path in files:
        problem = check_database(path)
        if problem is not None:
            raise LifecycleUsageError(f"{path} does not open cleanly ({problem}); nothing was restored")
    make_private_dirs(data)
    lock = DataFolderLock.acquire(data)
    try:
        present = [entry.name for entry in data.iterdir() if entry.name != "_host.lock"]
        if present:
            raise LifecycleUsageError(f"{data} is not empty ({present[0]} ...): restore fills a new or empty folder")
        for path in files:
            target = data / path.relative_to(source)
            make_private_dirs(target.parent)
            shutil.copyfile(path, target)
            with open(target, "rb+") as handle:
                os.fsync(handle.fileno())
    finally:
        lock.release()
    print(f"restored {len(files)} files from {source} into {data}")
    return 0
