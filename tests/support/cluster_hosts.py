"""A cluster for tests: real ``durable-sessions serve --cluster`` processes sharing one throwaway Postgres.

``with run_cluster(tmp_path, dsn, hosts=3, lease_s=1.0) as cluster:`` starts
the hosts on free loopback ports (started together, each waited for by its
ready file) and yields a :class:`Cluster`. Each :class:`ClusterHost` can be
killed (``kill -9``), paused (``SIGSTOP``/``SIGCONT``), stopped gracefully
(SIGTERM) and started again on the same port (so clients' URL lists stay
valid). On exit every host still running is stopped with SIGTERM (a host
that does not exit in time is killed, and the test fails with its log).

The instrumented actor classes the cluster tests serve live in
:mod:`tests.cluster.apps`; they record activations and alarm deliveries in
files under ``$DS_TEST_EVENTS`` (one line per event, appended with
``O_APPEND`` by whichever process has the event), which
:meth:`Cluster.events` reads.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from common.wire import OWNER_HEADER, quote_segment
from tests.support.processes import cli_command, cli_env

#: Seconds a host may take to start (imports, Postgres, binding).
STARTUP_TIMEOUT_S = 30.0
#: Environment variable naming the folder of the event files of :mod:`tests.cluster.apps`.
EVENTS_ENV = "DS_TEST_EVENTS"


@dataclass
class ClusterHost:
    """One ``serve --cluster`` process (see the module docstring)."""

    name: str
    data_dir: Path
    argv: list[str]
    env: dict[str, str]
    port: int | None = None
    process: subprocess.Popen | None = None
    url: str | None = None
    log_path: Path = field(init=False)
    _log: object | None = None
    paused: bool = False

    def __post_init__(self) -> None:
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")

    @property
    def ready_file(self) -> Path:
        return self.data_dir.with_name(self.data_dir.name + "-ready.json")

    def launch(self) -> None:
        """Start the process (on the port it had, if it ran before); :meth:`wait_ready` waits for it."""
        self.ready_file.unlink(missing_ok=True)
        bind = f"127.0.0.1:{self.port or 0}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("a")
        self._log.write(f"--- start {time.strftime('%H:%M:%S')} ---\n")
        self._log.flush()
        self.process = subprocess.Popen(
            [*cli_command(), "--log-level", "WARNING", "serve", "--bind", bind, "--data", str(self.data_dir),
             "--ready-file", str(self.ready_file), *self.argv],
            env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
        )
        self.paused = False

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.ready_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"host {self.name} did not start:\n{self.log()}")
            time.sleep(0.02)
        self.url = json.loads(self.ready_file.read_text())["url"]
        self.port = int(self.url.rsplit(":", 1)[1])

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """``kill -9``: no goodbye, leases left to expire."""
        if self.running:
            if self.paused:
                self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()
        self._close_log()

    def pause(self) -> None:
        """``SIGSTOP``: the process keeps its sockets but runs nothing."""
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """``SIGCONT``."""
        self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; the exit status (a host that does not exit in time is killed: -9)."""
        if not self.running:
            self._close_log()
            return self.process.returncode if self.process is not None else 0
        if self.paused:
            self.resume()
        self.process.send_signal(signal.SIGTERM)
        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            status = -9
        self._close_log()
        return status

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""


class Cluster:
    """The hosts of one test and what they record."""

    def __init__(self, hosts: Sequence[ClusterHost], events_dir: Path, dsn: str | Sequence[str],
                 lease_s: float) -> None:
        self.hosts = list(hosts)
        self.events_dir = events_dir
        self.dsns = [dsn] if isinstance(dsn, str) else list(dsn)  # the cluster's databases, in map order
        self.dsn = self.dsns[0]
        self.lease_s = lease_s

    @property
    def urls(self) -> list[str]:
        return [host.url for host in self.hosts]

    def host_at(self, url: str) -> ClusterHost:
        """The host whose URL is ``url``."""
        url = url.rstrip("/")
        for host in self.hosts:
            if host.url == url:
                return host
        raise LookupError(f"no host at {url}")

    def owner_of(self, session_id: str, *, via: ClusterHost | None = None) -> ClusterHost:
        """The host that owns ``session_id`` now, asked through ``via`` (default: the first running host).

        Asks with a read, so an unowned session becomes owned by the host asked.
        """
        via = via or next(host for host in self.hosts if host.running and not host.paused)
        url = f"{via.url}/v1/sessions/{quote_segment(session_id)}/messages:count"
        for _ in range(50):  # a 429/503 refusal was not run: ask again, as a client does (a busy machine queues)
            response = httpx.get(url, timeout=30)
            if response.status_code not in (429, 503) or "Retry-After" not in response.headers:
                break
            time.sleep(min(float(response.headers["Retry-After"]), 1.0))
        response.raise_for_status()
        return self.host_at(response.headers[OWNER_HEADER])

    def events(self, kind: str) -> list[list[str]]:
        """The recorded lines of ``kind`` (``"activations"``, ``"alarms"``, ``"started"``), split on spaces."""
        path = self.events_dir / f"{kind}.txt"
        if not path.exists():
            return []
        return [line.split() for line in path.read_text().splitlines() if line.strip()]

    def logs(self) -> str:
        return "\n".join(f"===== host {host.name} ({host.url})\n{host.log()}" for host in self.hosts)


@contextmanager
def run_cluster(
    folder: Path, dsn: str | Sequence[str], *, hosts: int = 3, lease_s: float = 1.0, app: str | None = "tests.cluster.apps:Recorder",
    extra: Sequence[str] = (), token: str | None = None,
) -> Iterator[Cluster]:
    """Start ``hosts`` cluster hosts on ``dsn`` (or on several databases: a list, each given with
    ``--cluster``) under ``folder``; stop them on exit (see the module docstring)."""
    events = folder / "events"
    events.mkdir(parents=True, exist_ok=True)
    env = {**cli_env(token), EVENTS_ENV: str(events)}
    databases = [arg for one in ([dsn] if isinstance(dsn, str) else dsn) for arg in ("--cluster", one)]
    argv = [*databases, "--lease", str(lease_s), *(["--app", app] if app else []), *extra]
    # No --host-id: a host started again after kill -9 is a new member (ids are random per start).
    members = [ClusterHost(f"h{i + 1}", folder / f"h{i + 1}", list(argv), env) for i in range(hosts)]
    cluster = Cluster(members, events, dsn, lease_s)
    try:
        for host in members:
            host.launch()
        for host in members:
            host.wait_ready()
        yield cluster
    except BaseException:
        print(cluster.logs())  # shown by pytest with the failure
        raise
    finally:
        statuses = {host.name: host.stop() for host in members}
    unclean = {name: status for name, status in statuses.items() if status not in (0, -9, -signal.SIGKILL)}
    assert not unclean, f"hosts did not stop cleanly: {unclean}\n{cluster.logs()}"


def wait_until(condition, timeout: float, message: str = "condition", interval: float = 0.02):
    """Poll ``condition()`` until it returns a true value (returned) or ``timeout`` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


async def await_until(condition, timeout: float, message: str = "condition", interval: float = 0.02):
    """:func:`wait_until` for trio tests: ``condition`` may be a coroutine function; waits with ``trio.sleep``."""
    import inspect

    import trio

    deadline = trio.current_time() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if trio.current_time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        await trio.sleep(interval)
