"""One cluster host in its own process, for kill -9 and SIGSTOP tests (no forwarding: a plain server).

``python -m tests.support.cluster_host --dsn DSN --data DIR --port PORT --host-id ID [--lease 1.5]``
runs ``open_host(DIR, cluster=ClusterOptions(DSN, "http://127.0.0.1:PORT", ...))``
with the default :class:`~actors.SessionAgent` bound as ``sessions`` and the
project's HTTP server on that port. A call for an actor another host owns is
answered 503 with ``NotOwnerError`` (the HTTP suite of cluster-edge covers
forwarding). It writes ``{"url": ...}`` to ``DIR-ready.json`` once serving.

:func:`cluster_host_process` starts one and yields it (killed, if still
running, when the block ends).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.data import REPO_ROOT

STARTUP_TIMEOUT_S = 30.0


@dataclass
class HostProcess:
    process: subprocess.Popen
    url: str
    log: Path


@contextmanager
def cluster_host_process(dsn: str, data_dir: Path, port: int, host_id: str, *, lease_s: float) -> Iterator[
        HostProcess]:
    """Start a cluster host process on ``127.0.0.1:port``; yield it once it serves."""
    ready = data_dir.with_name(data_dir.name + "-ready.json")
    ready.unlink(missing_ok=True)
    log_path = data_dir.with_name(data_dir.name + "-host.log")
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.cluster_host", "--dsn", dsn, "--data", str(data_dir),
             "--port", str(port), "--host-id", host_id, "--lease", str(lease_s)],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while not ready.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the cluster host did not start: {log_path.read_text()}")
                time.sleep(0.05)
            yield HostProcess(process, json.loads(ready.read_text())["url"], log_path)
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
            process.wait()


async def _main(args: argparse.Namespace) -> None:
    import trio

    from runtime.host import open_host
    from runtime.host.cluster import ClusterOptions
    from runtime.server.app import bind_sessions, serve
    from runtime.server.config import ServerSettings

    url = f"http://127.0.0.1:{args.port}"
    cluster = ClusterOptions(args.dsn, url, host_id=args.host_id, lease_s=args.lease)
    async with open_host(args.data, idle_timeout_s=None, cluster=cluster) as host:
        bind_sessions(host)
        async with trio.open_nursery() as nursery:
            settings = ServerSettings(bind=f"127.0.0.1:{args.port}", graceful_timeout_s=1.0)
            await nursery.start(serve, host, settings)
            Path(str(args.data) + "-ready.json").write_text(json.dumps({"url": url}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host-id", required=True)
    parser.add_argument("--lease", type=float, default=1.5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    import trio

    trio.run(_main, args)


if __name__ == "__main__":
    main()
