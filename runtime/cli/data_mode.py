"""Which storage a data folder belongs to: no silent shadowing between ``serve`` and ``serve --postgres``.

With ``serve --postgres`` the sessions are in Postgres and the data folder
holds only host-local state (actor names, KV, alarms). Two mistakes would
otherwise pass silently:

* ``serve --postgres`` on a folder that holds single-host sessions (actor
  files with messages or compactions): those sessions would vanish from
  view, shadowed by the database's. Refused (:func:`check_data_mode`).
* ``serve`` (without ``--postgres``) on a folder a ``--postgres`` host
  used: every session would answer as empty while its messages sit in
  Postgres. Refused too.

The mark is the file ``<data>/_postgres_mode`` (:data:`MARK_FILE`),
written when ``serve --postgres`` starts on a folder that passed the check.
A folder without the mark is looked through once (the actor files of the
session and manager namespaces, read-only, stopping at the first session
found), so a folder a ``--postgres`` host of an older version used --
files without messages -- is accepted and marked. The check holds the
folder's lock (:mod:`runtime.host.folder_lock`); a folder in use by another
process is left to the host's own refusal, which names the holder.
"""

from __future__ import annotations

from pathlib import Path

from common.errors import DataFolderLockedError
from runtime.host.folder_lock import DataFolderLock
from storage.catalog import actor_files, read_facts

__all__ = ["MARK_FILE", "DataModeError", "check_data_mode", "single_host_session"]

#: The mark of a data folder a ``serve --postgres`` host uses.
MARK_FILE = "_postgres_mode"
#: Namespaces whose actor files hold sessions on a single host.
NAMESPACES = ("sessions", "managers")


class DataModeError(Exception):
    """The data folder belongs to the other storage mode (one line naming the folder and what to do)."""


def single_host_session(data: Path) -> Path | None:
    """The first actor file under ``data`` that holds messages or compactions, or ``None``."""
    for namespace in NAMESPACES:
        for hex_id in actor_files(data, namespace):
            path = data / namespace / hex_id[:2] / f"{hex_id}.sqlite3"
            facts, _ = read_facts(path)
            if facts is not None and (facts.messages or facts.compactions):
                return path
    return None


def check_data_mode(data: Path, postgres: bool) -> None:
    """Refuse a data folder of the other mode; mark a folder ``serve --postgres`` may use.

    Args:
        data: the host's data folder (it need not exist yet).
        postgres: the host keeps its sessions in Postgres.

    Raises:
        DataModeError: ``postgres`` and the folder holds single-host sessions,
            or not ``postgres`` and the folder is marked as a ``--postgres`` host's.
    """
    if not data.is_dir():  # a new folder: nothing to shadow
        if postgres:
            _mark(data)
        return
    try:
        lock = DataFolderLock.acquire(data)  # no other host changes the folder while it is looked at
    except DataFolderLockedError:
        return  # in use: opening the host refuses it with the holder's pid, which says more
    try:
        _check(data, postgres)
    finally:
        lock.release()


def _check(data: Path, postgres: bool) -> None:
    mark = data / MARK_FILE
    if not postgres:
        if mark.exists():
            raise DataModeError(
                f"the data folder {data} belongs to a serve --postgres host (its sessions are in Postgres): "
                f"start with --postgres URL, or use another folder")
        return
    if mark.exists():
        return
    found = single_host_session(data)
    if found is not None:
        raise DataModeError(
            f"the data folder {data} holds sessions stored on this host (e.g. {found.relative_to(data)}); "
            f"--postgres would hide them: use a new --data folder, or keep serving it without --postgres")
    _mark(data)


def _mark(data: Path) -> None:
    data.mkdir(parents=True, exist_ok=True)
    (data / MARK_FILE).write_text("sessions of this folder's host are in Postgres (serve --postgres)\n",
                                  encoding="utf-8")
