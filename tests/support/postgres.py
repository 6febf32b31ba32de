"""A throwaway Postgres server for tests: ``initdb`` into a temp dir, ``pg_ctl`` on loopback.

:class:`PostgresServer` owns one cluster: a fresh data directory under
``<tmp>/durable-sessions-pg/run-*``, a free TCP port on 127.0.0.1 (kept
across :meth:`~PostgresServer.restart`, so clients reconnect to the same
address), trust authentication for the superuser ``durable``, and a
private Unix-socket directory. It runs as an unprivileged OS user when the
tests run as root (``pg_ctl`` refuses root): ``$DURABLE_SESSIONS_PG_USER``,
else ``postgres`` when that user exists, else a system user
``durable-pg`` created for the purpose; the run directory is handed to it.

Binaries are looked up in ``$DURABLE_SESSIONS_PG_BIN`` (a directory), then
on ``PATH`` (the directory holding ``initdb``), then in
``/usr/lib/postgresql/<version>/bin`` (the newest version).
:func:`find_bin_dir` returns ``None`` when none has ``initdb``, ``pg_ctl``
and ``postgres``; the fixtures then skip the test, or fail it when the
environment variable ``CI`` is set (CI must never skip Postgres silently).

Robustness:

* every run directory records its owner (pid and process start time); a
  new server first removes the directories of owners that are gone,
  stopping their servers (``pg_ctl stop -m immediate``) -- so a test run
  killed with ``kill -9`` leaves nothing that breaks the next run, while a
  concurrent run (another pytest on this machine) is left alone;
* :meth:`PostgresServer.close` stops the server and deletes the directory;
  the session fixture calls it in ``finally`` and an ``atexit`` hook calls
  it again should the fixture's teardown never run.

Settings: ``fsync=off`` (tests never survive an OS crash; a killed or
restarted *server* still keeps every committed transaction, since the
kernel holds the written WAL), ``synchronous_commit`` left ``on``
(acknowledged commits survive ``stop("immediate")``), ``max_connections=200``.

Fixtures (registered in ``tests/conftest.py``):

* ``pg_server`` (session) -- the running :class:`PostgresServer`;
* ``pg_dsn`` -- a fresh database per test, created from a template that
  already holds :func:`storage.postgres.create_schema`; dropped afterwards;
* ``pg_empty_dsn`` -- a fresh database per test without the schema;
* ``pg_conn`` -- an autocommit ``psycopg.Connection`` to ``pg_dsn``.
"""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

#: Environment variables read here.
BIN_ENV = "DURABLE_SESSIONS_PG_BIN"
USER_ENV = "DURABLE_SESSIONS_PG_USER"

#: The cluster's superuser (trust authentication on loopback only).
SUPERUSER = "durable"
#: OS user created when tests run as root and neither the env var nor ``postgres`` names one.
FALLBACK_OS_USER = "durable-pg"
#: Where run directories live (one per server).
RUNS_ROOT = Path(tempfile.gettempdir()) / "durable-sessions-pg"

_REQUIRED = ("initdb", "pg_ctl", "postgres")
_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "32MB",
    "log_min_messages": "warning",
}


# -- finding binaries and a user -------------------------------------------------------


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", Path(path).parent.name))


def _complete(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name in _REQUIRED)


def find_bin_dir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or ``None`` (see the module docstring)."""
    configured = os.environ.get(BIN_ENV)
    if configured:
        return Path(configured) if _complete(Path(configured)) else None
    on_path = shutil.which("initdb")
    if on_path and _complete(Path(os.path.realpath(on_path)).parent):
        return Path(os.path.realpath(on_path)).parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True):
        if _complete(Path(candidate)):
            return Path(candidate)
    return None


def _os_user() -> pwd.struct_passwd | None:
    """The account the server runs as: ``None`` (the current user) unless we are root."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get(USER_ENV) or _existing("postgres") or FALLBACK_OS_USER
    if _existing(name) is None:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
    return pwd.getpwnam(name)


def _existing(name: str) -> str | None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return None
    return name


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- owners and stale runs -------------------------------------------------------------


def _process_start(pid: int) -> str | None:
    """Start time of process ``pid`` (clock ticks since boot), ``None`` when it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def _owner_alive(run_dir: Path) -> bool:
    try:
        pid_text, start = (run_dir / "owner").read_text().split()
    except (OSError, ValueError):
        # No owner file yet: a run being created right now, or debris; judge by age.
        try:
            return time.time() - run_dir.stat().st_mtime < 60
        except OSError:
            return False
    return _process_start(int(pid_text)) == start


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def remove_stale_runs(root: Path = RUNS_ROOT) -> list[Path]:
    """Stop the servers of runs whose owner process is gone and delete their directories.

    Returns the directories removed. Runs of live processes are untouched.
    """
    removed = []
    for run_dir in sorted(root.glob("run-*")):
        if _owner_alive(run_dir):
            continue
        pid = _postmaster_pid(run_dir / "data")
        if pid is not None:
            try:
                os.kill(pid, signal.SIGQUIT)  # immediate shutdown; children follow the postmaster
            except (ProcessLookupError, PermissionError):
                pass
            _wait_gone(pid, timeout=10)
        shutil.rmtree(run_dir, ignore_errors=True)
        removed.append(run_dir)
    return removed


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _process_start(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    if _process_start(pid) is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# -- the server --------------------------------------------------------------------------


class PostgresServer:
    """One throwaway cluster. ``start()`` -> use ``dsn()`` -> ``close()``.

    Args:
        bin_dir: directory of ``initdb``/``pg_ctl``/``postgres`` (default: :func:`find_bin_dir`).

    Raises:
        RuntimeError: no binaries, or ``initdb``/``pg_ctl`` failed (its log is in the message).
    """

    def __init__(self, bin_dir: Path | None = None) -> None:
        found = bin_dir or find_bin_dir()
        if found is None:
            raise RuntimeError("Postgres binaries not found (initdb, pg_ctl, postgres)")
        self.bin_dir = Path(found)
        self.user = _os_user()
        self.port: int | None = None
        self.run_dir: Path | None = None
        self._db_names = itertools.count(1)

    # -- paths and commands

    @property
    def data_dir(self) -> Path:
        return self._run_dir() / "data"

    @property
    def log_file(self) -> Path:
        return self._run_dir() / "server.log"

    def _run_dir(self) -> Path:
        if self.run_dir is None:
            raise RuntimeError("the server was never started")
        return self.run_dir

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run a Postgres binary as the server's OS user, with a clean environment."""
        kwargs = {}
        if self.user is not None:
            kwargs = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "TZ": "UTC"}
        proc = subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            capture_output=True, text=True, env=env, cwd=self._run_dir(), **kwargs,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}{self._log_tail()}")
        return proc

    def _log_tail(self) -> str:
        try:
            return "\n--- server.log ---\n" + self.log_file.read_text()[-4000:]
        except (OSError, RuntimeError):
            return ""

    # -- lifecycle

    def start(self) -> PostgresServer:
        """Create the cluster (first call) and start the server; returns ``self``.

        The first start removes stale runs, runs ``initdb`` and picks a free
        port; later starts (after :meth:`stop`) reuse the data and the port.
        """
        if self.run_dir is None:
            self._create()
        if self.port is None:
            for attempt in range(5):
                self.port = free_port()
                if self._pg_ctl_start(check=attempt == 4):
                    break
        else:
            self._pg_ctl_start(check=True)
        return self

    def _create(self) -> None:
        RUNS_ROOT.mkdir(mode=0o755, exist_ok=True)
        remove_stale_runs()
        self.run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=RUNS_ROOT))
        (self.run_dir / "owner").write_text(f"{os.getpid()} {_process_start(os.getpid())}\n")
        (self.run_dir / "sockets").mkdir()
        if self.user is not None:
            for path in (self.run_dir, self.run_dir / "sockets"):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        initdb = ("initdb", "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8")
        # A UTF-8 ctype makes CJK letters word characters for pg_trgm (its index then
        # serves CJK searches); plain C still gives correct results, by scanning.
        if self._run(*initdb, "--locale=C.UTF-8", check=False).returncode != 0:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self._run(*initdb, "--locale=C")
        with open(self.data_dir / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("".join(f"{k} = '{v}'\n" for k, v in _SETTINGS.items()))
            conf.write(f"unix_socket_directories = '{self.run_dir / 'sockets'}'\n")

    def _pg_ctl_start(self, *, check: bool) -> bool:
        proc = self._run(
            "pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data_dir), "-l", str(self.log_file),
            "-o", f"-p {self.port}", check=check,
        )
        return proc.returncode == 0

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``"fast"`` (roll back open transactions, checkpoint),
        ``"immediate"`` (a crash: no checkpoint, recovery on next start) or
        ``"smart"`` (wait for clients). No-op when it is not running."""
        if self.run_dir is not None and self.is_running():
            self._run("pg_ctl", "stop", "-w", "-t", "60", "-D", str(self.data_dir), "-m", mode)

    def restart(self, mode: str = "fast") -> None:
        """:meth:`stop` with ``mode``, then :meth:`start` on the same port and data."""
        self.stop(mode)
        self.start()

    def is_running(self) -> bool:
        """``True`` while the postmaster of this cluster is alive."""
        pid = None if self.run_dir is None else _postmaster_pid(self.data_dir)
        return pid is not None and _process_start(pid) is not None

    def close(self) -> None:
        """Stop the server (immediate) and delete its directory. Safe to call twice."""
        if self.run_dir is None:
            return
        try:
            self.stop("immediate")
        except RuntimeError:
            pid = _postmaster_pid(self.data_dir)
            if pid is not None:
                os.kill(pid, signal.SIGQUIT)
                _wait_gone(pid, timeout=10)
        finally:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None

    # -- connecting and databases

    def dsn(self, dbname: str = "postgres") -> str:
        """libpq connection string for ``dbname`` over TCP on 127.0.0.1."""
        if self.port is None:
            raise RuntimeError("the server was never started")
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname} connect_timeout=10"

    def execute(self, sql: str, dbname: str = "postgres") -> None:
        """Run ``sql`` (trusted text, e.g. ``CREATE DATABASE``) in autocommit mode."""
        import psycopg

        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            conn.execute(sql)

    def create_database(self, template: str = "template1") -> str:
        """A new database copied from ``template``; returns its name."""
        name = f"test_{os.getpid()}_{next(self._db_names)}"
        self.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name

    def drop_database(self, name: str) -> None:
        """Drop ``name``, disconnecting whoever is still connected to it."""
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- fixtures ------------------------------------------------------------------------------

#: Name of the template database that already holds the schema.
SCHEMA_TEMPLATE = "durable_template"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the Postgres tests (install postgresql)", pytrace=False)
    pytest.skip(reason)


def require_bin_dir() -> Path:
    """:func:`find_bin_dir` for a test that starts a server of its own; without binaries the test is
    skipped (failed under ``CI``) instead of failing on ``initdb``."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        _unavailable(f"Postgres binaries not found (set ${BIN_ENV}, put initdb on PATH, or install postgresql)")
    return bin_dir


@pytest.fixture(scope="session")
def pg_server():
    """The session's running :class:`PostgresServer` (skipped locally, failed in CI, without binaries)."""
    server = PostgresServer(require_bin_dir())
    atexit.register(server.close)
    try:
        server.start()
        _create_schema_template(server)
        yield server
    finally:
        server.close()
        atexit.unregister(server.close)


def _create_schema_template(server: PostgresServer) -> None:
    import psycopg
    import trio

    from storage.postgres import create_schema

    server.execute(f'CREATE DATABASE "{SCHEMA_TEMPLATE}"')
    with psycopg.connect(server.dsn(SCHEMA_TEMPLATE), autocommit=True) as conn:
        trio.run(create_schema, conn)


@pytest.fixture
def pg_dsn(pg_server):
    """Connection string of a fresh database holding the schema; dropped after the test."""
    name = pg_server.create_database(SCHEMA_TEMPLATE)
    yield pg_server.dsn(name)
    if pg_server.is_running():
        pg_server.drop_database(name)


@pytest.fixture
def pg_empty_dsn(pg_server):
    """Connection string of a fresh database without the schema; dropped after the test."""
    name = pg_server.create_database("template0")
    yield pg_server.dsn(name)
    if pg_server.is_running():
        pg_server.drop_database(name)


@pytest.fixture
def pg_conn(pg_dsn):
    """An autocommit ``psycopg.Connection`` to ``pg_dsn``, closed after the test."""
    import psycopg

    conn = psycopg.connect(pg_dsn, autocommit=True)
    yield conn
    conn.close()
