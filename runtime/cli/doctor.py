"""``durable-sessions doctor``: check every actor file of a data folder, offline.

For each actor file (every namespace folder of the data folder) it checks
the file headers and WAL frame headers, every WAL frame checksum, the full
``PRAGMA integrity_check``, and the file's generation against the host
catalog (:mod:`storage.catalog`); it lists actors the catalog knows whose
file vanished, and actors quarantined earlier. Files without a catalog row
get one (the rescan the catalog's lazy updates rely on).

``--quarantine`` moves the files of each damaged actor to
``_quarantine/<namespace>/`` and marks it in the catalog, as a running host
would; ``--release ID`` drops the catalog row of a quarantined or vanished
actor (a hex id, or a session id of the ``sessions`` namespace) so that id
can be used again, starting empty (restore its files first to keep them).

Each file gets a time budget (``--time-budget``, default
:data:`DEFAULT_BUDGET_S`): a file whose checks take longer is reported
``unchecked`` (exit status 1; never quarantined for it). Files are opened
without trusting their schema: no view, trigger or schema function of a
hostile file runs (:func:`storage.integrity.open_for_inspection`).

An encrypted data folder (:mod:`storage.cipher`) is checked with its key,
taken from ``$DURABLE_SESSIONS_ENCRYPTION_KEY_FILE``; without it the command
refuses at start with one line (exit status 2) rather than report every
file as damaged.

The doctor takes the data folder's lock: it refuses a folder a running host
holds. Exit status: 0 nothing wrong, 1 damage found (or listed), 2 bad usage.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common.errors import InvalidActorIdError, InvalidNamespaceError
from runtime.host.file_guard import FileGuard
from runtime.host.folder_lock import DataFolderLock
from runtime.host.ids import ActorId, check_namespace_name, id_from_name, id_from_string
from storage.catalog import CatalogEntry, HostCatalog, actor_files
from storage.integrity import InspectionTimeout, examine

__all__ = ["Finding", "run_doctor"]

#: Seconds of checks one actor file may take by default (``doctor --time-budget``).
DEFAULT_BUDGET_S = 60.0
#: Namespace ``--release`` maps a session id into.
SESSIONS_NAMESPACE = "sessions"


@dataclass(frozen=True)
class Finding:
    """One problem: ``kind`` is ``damaged``, ``vanished``, ``quarantined`` (earlier, by a host) or
    ``unchecked`` (its checks ran past the time budget)."""

    namespace: str
    actor_id: str
    name: str | None
    kind: str
    problem: str
    quarantined_to: str | None = None


@dataclass
class Report:
    checked: int = 0
    cataloged: int = 0
    released: int = 0


def run_doctor(data_dir: Path, *, quarantine: bool = False, release: tuple[str, ...] = (),
               as_json: bool = False, out: Any = None, budget_s: float = DEFAULT_BUDGET_S) -> int:
    """Check ``data_dir``, print the findings to ``out`` (default stdout); the exit status.

    ``budget_s``: the most seconds the checks of one actor file may take.

    Raises:
        DataFolderLockedError: a running host (or another doctor) holds the folder.
        FileNotFoundError: ``data_dir`` is not a folder.
    """
    if not data_dir.is_dir():
        raise FileNotFoundError(f"no data folder at {data_dir}")
    lock = DataFolderLock.acquire(data_dir)
    try:
        catalog = HostCatalog.open(data_dir)
        try:
            return _doctor(data_dir, catalog, quarantine=quarantine, release=release, as_json=as_json, out=out,
                           budget_s=budget_s)
        finally:
            catalog.close()
    finally:
        lock.release()


def _doctor(data_dir: Path, catalog: HostCatalog, *, quarantine: bool, release: tuple[str, ...], as_json: bool,
            out: Any, budget_s: float) -> int:
    report = Report()
    for text in release:
        report.released += _release(catalog, text)
    guard = FileGuard(data_dir, catalog, lambda actor_id: _path(data_dir, actor_id))
    findings: list[Finding] = []
    for namespace in _namespaces(data_dir, catalog):
        findings += _check_namespace(data_dir, catalog, namespace, report, budget_s)
    if quarantine:
        findings = [_quarantine(guard, catalog, finding) for finding in findings]
    _print(data_dir, findings, report, as_json, out)
    return 1 if findings else 0


def _namespaces(data_dir: Path, catalog: HostCatalog) -> list[str]:
    found = {entry.namespace for entry in catalog.entries()}
    for child in data_dir.iterdir():
        if child.is_dir() and not child.name.startswith(("_", ".")):
            found.add(child.name)
    return sorted(found)


def _check_namespace(data_dir: Path, catalog: HostCatalog, namespace: str, report: Report,
                     budget_s: float) -> Iterator[Finding]:
    on_disk = set()
    for hex_id in actor_files(data_dir, namespace):
        on_disk.add(hex_id)
        report.checked += 1
        entry = catalog.get(namespace, hex_id)
        try:
            problem = _check_file(data_dir / namespace / hex_id[:2] / f"{hex_id}.sqlite3", entry, catalog,
                                  namespace, hex_id, report, budget_s)
        except InspectionTimeout as exc:
            yield Finding(namespace, hex_id, entry.name if entry else None, "unchecked", str(exc))
            continue
        if problem is not None:
            yield Finding(namespace, hex_id, entry.name if entry else None, "damaged", problem)
    for entry in catalog.entries(namespace):
        if entry.quarantined:
            yield Finding(namespace, entry.actor_id, entry.name, "quarantined", entry.problem or "",
                          entry.quarantined_to)
        elif entry.actor_id not in on_disk:
            yield Finding(namespace, entry.actor_id, entry.name, "vanished",
                          f"its file vanished (the catalog saw generation {entry.generation}, "
                          f"{entry.messages} messages)")


def _check_file(path: Path, entry: CatalogEntry | None, catalog: HostCatalog, namespace: str, hex_id: str,
                report: Report, budget_s: float) -> str | None:
    """The first problem of one actor file, or ``None`` (a file without a catalog row then gets one).

    Raises:
        InspectionTimeout: the checks ran past ``budget_s`` seconds.
    """
    problem, facts = examine(path, entry.generation if entry is not None else None, budget_s=budget_s)
    if problem is not None:
        if entry is not None and problem.startswith("its file went back in time"):
            problem = problem[:-1] + f" with {entry.messages} messages)"
        return problem
    if entry is None:
        assert facts is not None  # examine() gives facts exactly when it finds no problem
        catalog.record(namespace, hex_id, facts, wrote=False)
        report.cataloged += 1
    return None


def _quarantine(guard: FileGuard, catalog: HostCatalog, finding: Finding) -> Finding:
    if finding.kind in ("quarantined", "unchecked"):
        return finding
    actor_id = ActorId(finding.namespace, finding.actor_id)
    guard.quarantine(actor_id, finding.problem, name=finding.name)
    entry = catalog.get(finding.namespace, finding.actor_id)
    moved = entry.quarantined_to if entry is not None else None
    return Finding(finding.namespace, finding.actor_id, finding.name, finding.kind, finding.problem, moved)


def _release(catalog: HostCatalog, text: str) -> int:
    """Drop the catalog rows ``text`` names (``namespace/hex``, a hex id, or a session id); how many."""
    released = 0
    for namespace, hex_id in _candidates(catalog, text):
        entry = catalog.get(namespace, hex_id)
        gone = not _path(catalog.data_dir, ActorId(namespace, hex_id)).exists()
        if entry is not None and (entry.quarantined or gone):
            released += catalog.forget(namespace, hex_id)
    return released


def _candidates(catalog: HostCatalog, text: str) -> Iterator[tuple[str, str]]:
    namespace, _, rest = text.partition("/")
    if rest:
        try:
            yield check_namespace_name(namespace), id_from_string(namespace, rest).hex
        except (InvalidActorIdError, InvalidNamespaceError):
            pass
        return
    for entry in catalog.entries():
        if entry.actor_id == text.lower() or entry.name == text:
            yield entry.namespace, entry.actor_id
    yield SESSIONS_NAMESPACE, id_from_name(SESSIONS_NAMESPACE, text).hex


def _path(data_dir: Path, actor_id: ActorId) -> Path:
    return data_dir / actor_id.namespace / actor_id.shard / f"{actor_id.hex}.sqlite3"


def _print(data_dir: Path, findings: list[Finding], report: Report, as_json: bool, out: Any) -> None:
    counts = {kind: sum(f.kind == kind for f in findings)
              for kind in ("damaged", "vanished", "quarantined", "unchecked")}
    if as_json:
        body = {"data": str(data_dir), "checked": report.checked, "cataloged": report.cataloged,
                "released": report.released, **counts, "findings": [asdict(f) for f in findings]}
        print(json.dumps(body, ensure_ascii=False, indent=2), file=out)
        return
    for f in findings:
        name = f" ({f.name})" if f.name else ""
        where = f"; files in {f.quarantined_to}" if f.quarantined_to else ""
        print(f"{f.namespace}/{f.actor_id}{name}: {f.kind}: {f.problem}{where}", file=out)
    print(f"checked {report.checked} actor files: {counts['damaged']} damaged, {counts['vanished']} vanished, "
          f"{counts['quarantined']} quarantined earlier"
          + (f", {counts['unchecked']} unchecked (over the time budget)" if counts["unchecked"] else "")
          + f"; {report.cataloged} added to the catalog"
          + (f"; {report.released} released" if report.released else ""), file=out)
