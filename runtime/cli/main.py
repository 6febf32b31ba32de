"""The ``durable-sessions`` command.

::

    durable-sessions [--version] [--log-level LEVEL] [--log-format text|json] COMMAND ...
    durable-sessions serve   [--bind HOST:PORT] [--data DIR] [--config FILE] [--token T]
                             [--idle-timeout S] [--durability normal|full] [--app module:Class]
                             [--ready-file FILE] [--postgres URL] [--access-log]
                             [--certfile FILE --keyfile FILE] [--insecure-no-token]
                             [--cluster POSTGRES_URL ... [--host-id ID] [--advertise URL] [--lease S]]
    durable-sessions import  FILE [--format auto|openai-chat|claude-code] [--prefix P]
                             [--url URL | --data DIR] [--concurrency N] [--no-progress]
                             [--as sessions|transcripts]
    durable-sessions history SESSION_ID [--leaf ID] [--limit N] [--before ID] [--raw] [--json]
    durable-sessions list    [--prefix P] [--limit N] [--json]
    durable-sessions search  SESSION_ID QUERY [--limit N] [--mode text|semantic|hybrid] [--json]
    durable-sessions reembed SESSION_ID ... [--wait]
    durable-sessions stats
    durable-sessions hibernate [SESSION_ID ...]
    durable-sessions doctor  [--data DIR] [--quarantine] [--release ID ...] [--json] [--time-budget S]
    durable-sessions mcp     --session ID [--url URL] [--token T | --data DIR [--config FILE]]
    durable-sessions delete  SESSION_ID
    durable-sessions export  SESSION_ID [-o FILE]
    durable-sessions gc      [--dry-run]
    durable-sessions backup  --to DIR
    durable-sessions restore --from DIR --data DIR

``delete``, ``export``, ``import`` of an archive, ``gc``, ``backup`` and
``restore`` are the data lifecycle (:mod:`runtime.cli.lifecycle`).

``--log-level`` and ``--log-format`` may also follow the subcommand
(:mod:`runtime.cli.logs`). ``serve`` checks its data folder (created if
missing, then written once) and binds its address before anything else: a
read-only or unwritable folder, an address in use or a bad port is one line
naming it, and exit status 2. So is an unusable encryption key: with
``[storage] encryption_key_file`` or ``$DURABLE_SESSIONS_ENCRYPTION_KEY_FILE``
(the only source for ``doctor``, ``restore`` and ``import --data``) every
SQLite file is encrypted (:mod:`storage.cipher`), and a plain apsw build, a
key file others may read, another key or no key on an encrypted folder, or a
key on a folder of unencrypted files is refused before anything is written.

Client commands talk to ``--url`` (default ``$DURABLE_SESSIONS_URL`` or
``http://127.0.0.1:8787``) with ``--token`` (default
``$DURABLE_SESSIONS_TOKEN``) through :mod:`runtime.client`, on asyncio: they
(and ``--version``, ``--help``) load no server module (trio, quart,
hypercorn, apsw), so they start at once. No server answering is one line
naming the URL and one with a hint. ``serve`` prints the address it listens on
(also written as JSON to ``--ready-file``) and stops gracefully on SIGINT or
SIGTERM: it stops accepting, lets running requests finish, closes
WebSockets and every actor file, and exits 0.

``serve --cluster postgresql://...`` joins a cluster of hosts sharing that
database (docs/cluster.md): any host answers any session, forwarding to the
session's owner. ``--cluster`` repeated names a cluster on several
databases (the same list, in the same order, on every host). At start the host keeps trying to reach Postgres for
``connect_timeout_s`` (default 30 s, ``[cluster]`` in the configuration
file), logging each failure, and only then listens; if Postgres stays
unreachable it exits with status 1 and one line saying so; a database that
refuses for good (password, role, missing database, newer schema, another
partition map) exits 2 at once with one line naming it.

``mcp`` serves one session's memory as a Model Context Protocol server
over stdin/stdout, for desktop MCP clients (:mod:`runtime.mcp`; extra
``mcp``): a client of the host at ``--url``, or with ``--data`` a host of
its own on that folder (no server may be using it; ``--config`` gives its
``[session]`` blocks).

``doctor`` checks a data folder no host is running on (see
:mod:`runtime.cli.doctor`).

Exit status: 0 success, 1 a failure at run time (server error, failed
import, damage found by ``doctor``, an unknown session, no server
answering), 2 bad usage or configuration (a data folder another process
holds included), 130 interrupted (Ctrl-C). When the reader of stdout goes
away (``history ... | head``) the command stops quietly with 0: nothing
more is written, no traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import importlib
import importlib.metadata
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from common.errors import (
    DataFolderLockedError,
    MessageNotFoundError,
    NotSupportedError,
    ServerUnreachableError,
    UnauthorizedError,
)
from runtime.cli import lifecycle
from runtime.cli.claude_import import TARGETS, ImportUsageError, run_import_command
from runtime.cli.formats import FormatError
from runtime.cli.importer import FORMATS, detect_format, import_sessions, read_conversations
from runtime.cli.logs import LEVELS, LOG_FORMATS, configure_logging

if TYPE_CHECKING:  # imported where used: client commands load no server module (trio, quart, hypercorn, apsw)
    from actors.agent import Agent
    from runtime.client import SessionsClient
    from runtime.server.config import HostConfig

logger = logging.getLogger("durable_sessions")


class UsageError(Exception):
    """Bad arguments or configuration (exit status 2)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="durable-sessions", description="Durable per-session memory for LLM agents.")
    parser.add_argument("--version", action="version", version=f"durable-sessions {_version()}")
    _log_options(parser, defaults=True)
    commands = _Commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))

    run = commands.add_parser("serve", help="run the actor host with its HTTP/WebSocket server")
    run.add_argument("--bind", help="HOST:PORT to listen on (default 127.0.0.1:8787; port 0 picks a free one)")
    run.add_argument("--data", type=Path, help="folder of the actor files (default ./data)")
    run.add_argument("--config", type=Path, help="TOML configuration file")
    run.add_argument("--token", help="bearer token (default $DURABLE_SESSIONS_TOKEN)")
    run.add_argument("--idle-timeout", type=float, dest="idle_timeout", help="seconds before an idle actor hibernates")
    run.add_argument("--durability", choices=("normal", "full"), help="normal (default) or full (power-loss safe)")
    run.add_argument("--app", help="your own actor class as module:Class (an actors.Agent subclass)")
    run.add_argument("--ready-file", type=Path, dest="ready_file",
                     help="write {url, urls, pid} as JSON here once listening")
    run.add_argument("--postgres", metavar="URL",
                     help="keep every session in this Postgres database (postgresql://...) instead of the actor files")
    run.add_argument("--cluster", metavar="POSTGRES_URL", action="append",
                     help="join the cluster of hosts sharing this Postgres database; repeat it for a cluster on "
                          "several databases, in the same order on every host (see docs/cluster.md)")
    run.add_argument("--host-id", dest="host_id", help="this host's id in the cluster (default: random per start)")
    run.add_argument("--advertise", metavar="URL",
                     help="the URL other hosts reach this one at (default: http://<bound address>)")
    run.add_argument("--lease", type=float, dest="lease_s",
                     help="lease seconds: how long a dead host's sessions wait before moving (default 10)")
    run.add_argument("--access-log", action="store_true", default=None, dest="access_log",
                     help="log one line per request (logger durable_sessions.access)")
    run.add_argument("--certfile", type=Path, help="TLS: serve https:// with this certificate chain (PEM)")
    run.add_argument("--keyfile", type=Path, help="TLS: the certificate's private key (PEM)")
    run.add_argument("--insecure-no-token", action="store_true", dest="insecure_no_token",
                     help="serve a non-loopback address without a token (anyone who reaches it may use it)")

    load = commands.add_parser("import", help="load conversations from a file into sessions")
    load.add_argument("file", type=Path, help="OpenAI chat / tau-bench JSON(L), or Claude Code transcripts")
    load.add_argument("--format", default="auto", choices=("auto", *FORMATS))
    load.add_argument("--prefix", default="", help="prefix added to every session id")
    load.add_argument("--data", type=Path, help="import straight into this data folder (no server may be using it)")
    load.add_argument("--concurrency", type=int, default=8, help="sessions imported at once (default 8)")
    load.add_argument("--no-progress", action="store_true", dest="no_progress", help="no progress bar")
    load.add_argument("--as", dest="target", choices=TARGETS, default="sessions",
                      help="Claude Code files: as sessions (default) or raw entries in the transcript store")
    _client_options(load)

    history = commands.add_parser("history", help="print a session's history")
    history.add_argument("session_id")
    history.add_argument("--leaf", help="print the path to this message instead of the latest leaf")
    history.add_argument("--limit", type=_positive, help="only the newest N entries (a page)")
    history.add_argument("--before", metavar="ID", help="only entries older than this one (page back with the "
                                                        "first id of the page before); an id not in this "
                                                        "history is an error (exit status 1)")
    history.add_argument("--raw", action="store_true", help="the stored messages, without compaction overlays")
    history.add_argument("--json", action="store_true", help="print the messages as JSON")
    _client_options(history)

    listing = commands.add_parser("list", help="list the sessions the server holds, most recently written first")
    listing.add_argument("--prefix", help="only session ids starting with this")
    listing.add_argument("--limit", type=_positive, help="at most N sessions (default: all)")
    listing.add_argument("--json", action="store_true", help="print the sessions as JSON")
    _client_options(listing)

    find = commands.add_parser("search", help="search a session's messages (full text, by meaning, or both)")
    find.add_argument("session_id")
    find.add_argument("query")
    find.add_argument("--limit", type=int, default=20)
    find.add_argument("--mode", choices=("text", "semantic", "hybrid"), default="text",
                      help="text (default): every word; semantic: by meaning; hybrid: both, fused "
                           "(semantic and hybrid need [search] embedder in the server's config)")
    find.add_argument("--json", action="store_true", help="print the hits as JSON")
    _client_options(find)

    again = commands.add_parser("reembed", help="drop sessions' vectors and embed every message again "
                                                "with the server's [search] embedder")
    again.add_argument("session_ids", nargs="+")
    again.add_argument("--wait", action="store_true", help="wait until nothing is pending")
    _client_options(again)

    stats = commands.add_parser("stats", help="print the host's statistics")
    _client_options(stats)

    sleep = commands.add_parser("hibernate", help="hibernate sessions' actors now (default: all)")
    sleep.add_argument("session_ids", nargs="*")
    _client_options(sleep)

    server = commands.add_parser("mcp", help="serve a session's memory over MCP on stdin/stdout (extra: mcp)")
    server.add_argument("--session", required=True, help="the session whose tools and blocks are served")
    server.add_argument("--data", type=Path, help="embedded: open this data folder here (no server may be using it)")
    server.add_argument("--config", type=Path, help="with --data: TOML configuration file (its [session] blocks)")
    _client_options(server)

    check = commands.add_parser("doctor", help="check every actor file of a data folder (no host may be using it)")
    check.add_argument("--data", type=Path, default=Path("data"), help="the data folder (default ./data)")
    check.add_argument("--quarantine", action="store_true", help="move damaged actors' files to _quarantine")
    check.add_argument("--release", action="append", default=[], metavar="ID",
                       help="forget a quarantined or vanished actor (session id, hex id or namespace/hex); "
                            "the id starts empty")
    check.add_argument("--json", action="store_true", help="print the findings as JSON")
    check.add_argument("--time-budget", type=float, default=60.0, dest="time_budget", metavar="S",
                       help="most seconds spent checking one actor file (default 60); a file that takes "
                            "longer is reported unchecked")
    lifecycle.add_parsers(commands, _client_options)
    return parser


class _Commands:
    """The subparsers, each made with the logging options too (so they may follow the subcommand)."""

    def __init__(self, actions: Any) -> None:
        self.actions = actions

    def add_parser(self, name: str, **options: Any) -> argparse.ArgumentParser:
        parser = self.actions.add_parser(name, **options)
        _log_options(parser, defaults=False)
        return parser


def _log_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """``--log-level`` and ``--log-format``; after the subcommand they override what came before it."""
    keep: dict[str, Any] = {} if defaults else {"default": argparse.SUPPRESS}
    parser.add_argument("--log-level", type=str.upper, choices=LEVELS, metavar="LEVEL",
                        help=f"logging level: {', '.join(LEVELS)} (default INFO)", **(keep or {"default": "INFO"}))
    parser.add_argument("--log-format", choices=LOG_FORMATS, help="text (default) or json: one object per line",
                        **(keep or {"default": "text"}))


def _version() -> str:
    try:
        return importlib.metadata.version("durable-sessions")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return value


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="server URL (default $DURABLE_SESSIONS_URL or http://127.0.0.1:8787)")
    parser.add_argument("--token", help="bearer token (default $DURABLE_SESSIONS_TOKEN)")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``durable-sessions`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    command = {"serve": _serve, "import": _import, "history": _history, "list": _list, "search": _search,
               "reembed": _reembed, "stats": _stats, "hibernate": _hibernate, "doctor": _doctor, "mcp": _mcp,
               "restore": _restore, **{name: _lifecycle for name in lifecycle.CLIENT_COMMANDS}}[args.command]
    try:
        status = _run(command, args)
        sys.stdout.flush()  # a reader that went away (``| head``) shows here, not at exit
        return status
    except BrokenPipeError:
        return _stdout_gone()
    except (UsageError, lifecycle.LifecycleUsageError) + _loaded("runtime.server.config", "ConfigError") as exc:
        print(f"durable-sessions {args.command}: {exc}", file=sys.stderr)
        return 2
    except _loaded("runtime.cli.cluster", "ClusterUnreachableError") as exc:
        print(f"durable-sessions {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _interrupted(args.command)
    except BaseExceptionGroup as group:  # trio gathers what its tasks raised
        interrupt, rest = group.split(KeyboardInterrupt)
        if interrupt is not None:
            return _interrupted(args.command)
        if rest is not None and len(rest.exceptions) == 1 and isinstance(rest.exceptions[0], Exception):
            return _failed(args.command, rest.exceptions[0], _server_url(args))
        raise
    except Exception as exc:  # noqa: BLE001 - one line for the user; details at debug level
        return _failed(args.command, exc, _server_url(args))


#: The commands that run an actor host in this process, on trio (``import`` only with ``--data``);
#: the others are clients of a server and run on asyncio, loading no server module.
HOST_COMMANDS = frozenset({"serve", "doctor", "restore"})


def _run(command: Any, args: argparse.Namespace) -> int:
    """Run ``command(args)``: on trio when it runs a host here, else on asyncio (client commands)."""
    if args.command in HOST_COMMANDS or (args.command in ("import", "mcp") and args.data is not None):
        import trio

        return trio.run(command, args)
    import asyncio

    # httpcore imports trio whenever it is installed (to support it); on asyncio none of it is used, so it
    # is marked absent while the command runs (a tenth of a second of start-up). A process that imported
    # trio before calling main() keeps it.
    hide_trio = "trio" not in sys.modules
    if hide_trio:
        sys.modules["trio"] = None  # type: ignore[assignment]
    try:
        return asyncio.run(command(args))
    finally:
        if hide_trio and "trio" in sys.modules and sys.modules["trio"] is None:
            del sys.modules["trio"]


def _loaded(module: str, name: str) -> tuple[type[BaseException], ...]:
    """``(module.name,)`` when ``module`` was imported, else ``()``: an error class of a module that was
    never loaded cannot have been raised (so ``except`` needs no import of the server's modules)."""
    found = sys.modules.get(module)
    return (getattr(found, name),) if found is not None else ()


def _failed(command: str, exc: Exception, url: str | Sequence[str] | None = None) -> int:
    """One line naming the failure (and one with a hint when there is one); exit status 1, or 2 for a data
    folder another process holds (it is in use: nothing was done)."""
    logger.debug("failure", exc_info=exc)
    if isinstance(exc, ServerUnreachableError):  # its own hint is the Python client's; the command's follows
        reason = f" ({exc.reason})" if exc.reason else ""
        print(f"durable-sessions {command}: {type(exc).__name__}: no server answered at {', '.join(exc.urls)}"
              f"{reason}", file=sys.stderr)
    else:
        print(f"durable-sessions {command}: {type(exc).__name__}: {exc}", file=sys.stderr)
    hint = _hint(exc, url)
    if hint:
        print(f"  {hint}", file=sys.stderr)
    return 2 if isinstance(exc, DataFolderLockedError) else 1


def _hint(exc: Exception, url: str | Sequence[str] | None) -> str | None:
    """What to try next after a client command's failure, when the failure says it (else ``None``)."""
    if isinstance(exc, UnauthorizedError):
        return "this server wants its token: pass --token or set DURABLE_SESSIONS_TOKEN"
    if isinstance(exc, ServerUnreachableError) and url is not None:
        return (f"no server answers at {url}: start one (durable-sessions serve), or name another "
                "with --url or DURABLE_SESSIONS_URL")
    return None


def _interrupted(command: str) -> int:
    """Ctrl-C: one line, no traceback, status 130 (128 + SIGINT). What was done before it stays done."""
    print(f"durable-sessions {command}: interrupted", file=sys.stderr)
    return 130


#: Exit status when the reader of stdout went away (``history ... | head``): a reader that has
#: enough is no failure (as ripgrep does; ``set -o pipefail`` scripts keep working).
EXIT_PIPE_CLOSED = 0


def _stdout_gone() -> int:
    """The reader of stdout closed the pipe: stop quietly (no traceback, nothing more written)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_PIPE_CLOSED


# -- serve -----------------------------------------------------------------------------------


def load_agent_class(spec: str) -> type[Agent]:
    """The class named by ``module:Class``.

    Raises:
        UsageError: malformed, not importable, or not an :class:`actors.Agent` subclass.
    """
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise UsageError(f"--app must be module:Class, not {spec!r}")
    from actors.agent import Agent

    # Like `python -m` (and uvicorn's --app-dir), modules are found from the current folder too:
    # a console script's sys.path starts with its bin/ folder, not the working directory.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--app {spec}: {exc}") from None
    if not (isinstance(found, type) and issubclass(found, Agent)):
        raise UsageError(f"--app {spec} is not a subclass of actors.Agent")
    return found


def _serve_config(args: argparse.Namespace) -> tuple[HostConfig, str | None]:
    from runtime.server.app import require_token_for
    from runtime.server.config import load_config

    config = load_config(args.config).with_overrides(
        bind=args.bind, data=args.data, idle_timeout_s=args.idle_timeout, durability=args.durability,
        access_log=args.access_log, certfile=args.certfile, keyfile=args.keyfile,
    ).with_cluster(args.cluster, host_id=args.host_id, advertise=args.advertise, lease_s=args.lease_s)
    if args.postgres:
        config = dataclasses.replace(config, storage=dataclasses.replace(config.storage, postgres=args.postgres))
    if config.cluster is not None and config.storage.postgres is not None:
        raise UsageError("--cluster and --postgres do not go together: in a cluster each host keeps its sessions' "
                         "files and Postgres holds their durable log (docs/cluster.md)")
    token = args.token or os.environ.get("DURABLE_SESSIONS_TOKEN") or None
    try:
        require_token_for(config.server.bind, token, insecure_no_token=args.insecure_no_token)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _check_tls(config.server.certfile, config.server.keyfile)
    if config.cluster is not None and args.insecure_no_token and not token and \
            not os.environ.get("DURABLE_SESSIONS_CLUSTER_SECRET"):
        raise UsageError("a cluster without a token needs DURABLE_SESSIONS_CLUSTER_SECRET (the same on every "
                         "host) to sign the requests its hosts forward to each other")
    return config, token


def _check_tls(certfile: Path | None, keyfile: Path | None) -> None:
    """One line for a certificate or key that cannot be loaded (before anything listens)."""
    import ssl

    if certfile is None and keyfile is None:
        return
    if certfile is None or keyfile is None:
        raise UsageError("--certfile and --keyfile go together (TLS needs both)")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot load the TLS certificate {certfile} and key {keyfile}: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None


async def _serve(args: argparse.Namespace) -> int:
    import trio

    from actors.session_agent import SessionAgent
    from actors.session_agent_postgres import PostgresSessionAgent
    from runtime.cli.cluster import serve_cluster
    from runtime.host.actor_host import open_host
    from runtime.server.app import bind_sessions, serve
    from runtime.server.checkpoint_routes import bind_checkpoints
    from runtime.server.managers import bind_managers
    from runtime.server.transcripts import open_transcripts
    from storage.postgres import describe_dsn

    config, token = _serve_config(args)
    postgres = config.storage.postgres
    agent_class = load_agent_class(args.app) if args.app else (PostgresSessionAgent if postgres else SessionAgent)
    if postgres and not issubclass(agent_class, PostgresSessionAgent):
        raise UsageError("--postgres serves PostgresSessionAgent (or a subclass of it), not " + agent_class.__name__)
    check_data_folder(config.server.data)
    use_encryption(config.server.data, config.storage.encryption_key_file)
    if config.cluster is None:  # no silent shadowing between the two modes (runtime/cli/data_mode.py)
        from runtime.cli.data_mode import DataModeError, check_data_mode

        try:
            check_data_mode(config.server.data, postgres=bool(postgres))
        except DataModeError as exc:
            raise UsageError(str(exc)) from None
    if config.cluster is not None:
        return await serve_cluster(config, token, agent_class, args.ready_file, _announce,
                                   insecure_no_token=args.insecure_no_token)
    settings = config.server
    listen = listen_on(settings.bind)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def shutdown_trigger() -> None:
            async for signum in signals:
                logger.info("received %s: shutting down", signal.Signals(signum).name)
                return

        async with open_host(
            settings.data, idle_timeout_s=settings.idle_timeout_s, max_active=settings.max_active,
            durability=settings.durability, max_pending_calls=settings.max_pending_calls,
            max_queue_s=settings.max_queue_s,
        ) as host, open_transcripts(host), _session_storage(config) as env:
            bind_sessions(host, env, agent_class=agent_class)
            bind_managers(host, env)  # a PostgresSessionEnv with --postgres: managers in Postgres too
            bind_checkpoints(host)
            async with trio.open_nursery() as nursery:
                urls = await nursery.start(
                    partial(serve, host, settings, token=token, shutdown_trigger=shutdown_trigger,
                            listen_socket=listen, insecure_no_token=args.insecure_no_token,
                            retention_days=config.retention.delete_idle_after_days))
                _announce(urls, settings.data, args.ready_file)
                if postgres:
                    print(f"durable-sessions: sessions in Postgres {describe_dsn(postgres)}", flush=True)
    print("durable-sessions: stopped", flush=True)
    return 0


def check_data_folder(folder: Path) -> None:
    """Make sure ``folder`` is, or can become, a folder this process can write (nothing is created here).

    Raises:
        UsageError: it, or the nearest part of its path that exists, is not a folder, is on a read-only
            file system, or may not be written; the message names both paths.
    """
    existing = folder.absolute()
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    problem = None
    if not existing.is_dir():
        problem = os.strerror(errno.ENOTDIR)
    elif not os.access(existing, os.W_OK | os.X_OK):
        read_only = os.statvfs(existing).f_flag & os.ST_RDONLY
        problem = os.strerror(errno.EROFS if read_only else errno.EACCES)
    if problem is not None:
        where = existing if existing != folder.absolute() else folder
        raise UsageError(f"cannot use the data folder {folder}: {problem} ({where})")


def use_encryption(data: Path, key_file: Path | None, *, mark: bool = True) -> bytes | None:
    """Encrypt the SQLite files this process opens with the key in ``key_file`` (else the file
    ``$DURABLE_SESSIONS_ENCRYPTION_KEY_FILE`` names; neither: no encryption), and check that ``data``
    matches it (:func:`storage.cipher.check_folder`; ``mark``: write the mark of a folder a key starts
    using); returns the key.

    Raises:
        UsageError: the key file is unusable, apsw has no cipher (the line names the extra to install),
            or the folder is encrypted with another key, needs one, or holds unencrypted files.
    """
    from storage.cipher import KEY_FILE_ENV, EncryptionError, check_folder, read_key_file, use_key

    if key_file is None and os.environ.get(KEY_FILE_ENV):
        key_file = Path(os.environ[KEY_FILE_ENV])
    try:
        key = None if key_file is None else read_key_file(key_file)
        use_key(key)
        check_folder(data, key, write_mark=mark)
    except EncryptionError as exc:
        raise UsageError(str(exc)) from None
    return key


def listen_on(bind: str) -> Any:
    """A socket bound to ``bind`` (``host:port``) for :func:`serve`, so a bad address is one clear line.

    Raises:
        UsageError: the address cannot be bound (in use, not local, unknown host, no permission).
    """
    from runtime.server.app import bind_socket

    try:
        return bind_socket(bind)[0]
    except OSError as exc:
        raise UsageError(f"cannot listen on {bind}: {exc.strerror or exc}") from None


@asynccontextmanager
async def _session_storage(config: HostConfig) -> AsyncIterator[Any]:
    """The env of the session namespace: the SessionConfig, or a PostgresSessionEnv on one pool."""
    settings = config.storage
    if settings.postgres is None:
        yield config.session
        return
    from actors.session_agent_postgres import PostgresSessionEnv
    from storage.postgres import open_postgres_storage

    async with open_postgres_storage(
        settings.postgres, pool_size=settings.pool_size, timeout_s=settings.timeout_s
    ) as storage:
        yield PostgresSessionEnv(storage, config.session)


def _announce(urls: list[str], data: Path, ready_file: Path | None, extra: str = "") -> None:
    print(f"durable-sessions: serving {urls[0]} (data: {data}{extra})", flush=True)
    if ready_file is not None:
        partial_file = ready_file.with_name(ready_file.name + ".tmp")
        partial_file.write_text(json.dumps({"url": urls[0], "urls": urls, "pid": os.getpid()}), encoding="utf-8")
        partial_file.replace(ready_file)


# -- import --------------------------------------------------------------------------------------


async def _import(args: argparse.Namespace) -> int:
    if args.file.is_symlink():  # a link could make the import read any file this user may read
        raise UsageError(f"{args.file} is a symbolic link; import follows no links (give the file itself)")
    if lifecycle.is_archive(args.file):  # an archive of ``export`` (docs/export-format.md)
        if args.data is not None:
            raise UsageError("an archive is imported through a server (--url), not straight into --data")
        return await lifecycle.import_archive(args.file, args.prefix, _client(args))
    if _is_claude_code(args):
        try:
            return await run_import_command(args)
        except ImportUsageError as exc:
            raise UsageError(str(exc)) from None
    try:
        sessions = read_conversations(args.file, format=args.format, prefix=args.prefix)
    except (FormatError, OSError) as exc:
        raise UsageError(str(exc)) from None
    total = sum(len(s.messages) for s in sessions)
    if args.data is not None:
        check_data_folder(args.data)
        use_encryption(args.data, None)
    else:  # no server: one line and a hint, rather than one failure per conversation
        async with _client(args) as client:
            await client.health()
    with tqdm(total=total, unit="msg", desc="import", disable=args.no_progress or None, file=sys.stderr) as bar:
        if args.data is not None:
            from runtime.host.actor_host import open_host
            from runtime.server.app import bind_sessions

            async with open_host(args.data) as host:
                namespace = bind_sessions(host)
                report = await import_sessions(sessions, namespace.get_by_name, concurrency=args.concurrency,
                                               on_progress=bar.update)
        else:
            async with _client(args) as client:
                report = await import_sessions(sessions, client.session, concurrency=args.concurrency,
                                               on_progress=bar.update)
    print(f"imported {report.sessions} of {len(sessions)} sessions: "
          f"{report.inserted} messages stored, {report.messages - report.inserted} already there")
    for session_id, error in report.failures:
        print(f"failed: {session_id}: {error}", file=sys.stderr)
    return 1 if report.failures else 0


def _is_claude_code(args: argparse.Namespace) -> bool:
    """Claude Code files go to :mod:`runtime.cli.claude_import` (sessions, or ``--as transcripts``)."""
    try:
        kind = detect_format(args.file) if args.format == "auto" else args.format
    except OSError as exc:
        raise UsageError(str(exc)) from None
    if args.target == "transcripts" and kind != "claude-code":
        raise UsageError("--as transcripts takes Claude Code transcripts (--format claude-code)")
    return kind == "claude-code"


async def _lifecycle(args: argparse.Namespace) -> int:
    return await lifecycle.run(args.command, args, _client(args))


async def _restore(args: argparse.Namespace) -> int:
    from storage.catalog import CATALOG_FILE
    from storage.cipher import is_plaintext_database

    key = use_encryption(args.data, None, mark=False)
    catalog = args.source / CATALOG_FILE
    if catalog.is_file() and is_plaintext_database(catalog) == (key is not None):
        raise UsageError(f"{args.source} is an unencrypted backup; restore it without an encryption key" if key
                         else f"{args.source} is an encrypted backup; give its key file "
                              "($DURABLE_SESSIONS_ENCRYPTION_KEY_FILE)")
    status = lifecycle.restore(args.source, args.data)
    use_encryption(args.data, None)  # the restored folder gets its mark
    return status


# -- doctor --------------------------------------------------------------------------------------


async def _doctor(args: argparse.Namespace) -> int:
    from runtime.cli.doctor import run_doctor

    use_encryption(args.data, None, mark=False)
    try:
        return run_doctor(args.data, quarantine=args.quarantine, release=tuple(args.release), as_json=args.json,
                          budget_s=args.time_budget)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None


# -- client commands -------------------------------------------------------------------------------


#: The commands that talk to a server (``--url``, ``--token``).
CLIENT_COMMANDS = frozenset({"import", "history", "list", "search", "reembed", "stats", "hibernate", "mcp",
                             *lifecycle.CLIENT_COMMANDS})


def _server_url(args: argparse.Namespace) -> str | Sequence[str] | None:
    """The server a client command talks to, as the client resolves it (``None`` for ``serve``, ``doctor``)."""
    if args.command not in CLIENT_COMMANDS:
        return None
    from runtime.client.http import server_url

    return server_url(getattr(args, "url", None))


def _client(args: argparse.Namespace) -> SessionsClient:
    from runtime.client import SessionsClient

    return SessionsClient(args.url, token=args.token)


async def _history(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        try:
            messages = await client.session(args.session_id).get_history(
                args.leaf, limit=args.limit, before=args.before, overlays=not args.raw)
        except MessageNotFoundError:  # --before names no message: an unknown session says so first
            await _known(client, args.session_id)
            raise
        if not messages and args.leaf is None and args.before is None:
            await _known(client, args.session_id)
    if args.json:
        print(json.dumps(messages, ensure_ascii=False, indent=2))
    else:
        for message in messages:
            print(format_message(message))
    return 0


async def _known(client: SessionsClient, session_id: str) -> None:
    """Raise ``SessionNotFoundError`` when the server has no session ``session_id`` (an empty history
    alone cannot tell); a server that cannot list (a cluster) is taken at its word."""
    try:
        await client.describe_session(session_id)
    except NotSupportedError:
        pass


async def _list(args: argparse.Namespace) -> int:
    found = []
    async with _client(args) as client:
        async for entry in client.iter_sessions(prefix=args.prefix, page_size=min(args.limit or 500, 500)):
            found.append(entry)
            if not args.json:
                print(format_session(entry), flush=False)
            if args.limit is not None and len(found) >= args.limit:
                break
    if args.json:
        print(json.dumps(found, ensure_ascii=False, indent=2))
    return 0


def format_session(entry: dict[str, Any]) -> str:
    """One listed session as ``<updatedAt>  <messages> msgs  <compactions> compactions  [flags]  <id>``."""
    flags = [flag for flag, on in (("active", entry["active"]), (entry["state"], entry["state"] != "ok")) if on]
    return (f"{entry['updatedAt']}  {entry['messages']:>7} msgs  {entry['compactions']:>3} compactions  "
            f"{(' '.join(flags) or '-'):<11}  {entry['id']}")


async def _search(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        session = client.session(args.session_id)
        hits = await session.search(args.query, limit=args.limit, mode=args.mode)
        pending = 0 if args.mode == "text" else (await session.search_status())["pending"]
    if pending:
        print(f"durable-sessions: {pending} message(s) not yet embedded (not found by {args.mode} search yet)",
              file=sys.stderr)
    if args.json:
        print(json.dumps(hits, ensure_ascii=False, indent=2))
    else:
        for hit in hits:
            print(f"{hit['id']} [{hit['role']}] {_one_line(hit['content'])}")
    return 0


async def _reembed(args: argparse.Namespace) -> int:
    """Re-embed each session; with ``--wait`` poll until nothing is pending. Exit 1 when the
    server has no embedder configured."""
    import asyncio

    async with _client(args) as client:
        for session_id in args.session_ids:
            session = client.session(session_id)
            status = await session.reembed()
            if status["embedder"] is None:
                print("durable-sessions reembed: the server has no embedder: set embedder in the [search] "
                      "section of its config file", file=sys.stderr)
                return 1
            while args.wait and status["pending"]:
                await asyncio.sleep(0.2)
                status = await session.search_status()
            print(f"{session_id}: {status['pending']} pending, {status['embedded']} embedded "
                  f"({status['embedder']})")
    return 0


async def _mcp(args: argparse.Namespace) -> int:
    from runtime.mcp import require_mcp, serve_stdio

    try:
        require_mcp()
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    if args.data is None:
        if args.config is not None:
            raise UsageError("--config goes with --data (a host's configuration; the host at --url has its own)")
        async with _client(args) as client:
            await serve_stdio(client.session(args.session))
        return 0
    from runtime.host.actor_host import open_host
    from runtime.server.app import bind_sessions
    from runtime.server.config import load_config

    config = load_config(args.config)
    check_data_folder(args.data)
    use_encryption(args.data, config.storage.encryption_key_file)
    async with open_host(args.data) as host:
        await serve_stdio(bind_sessions(host, config.session).get_by_name(args.session))
    return 0


async def _stats(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        print(json.dumps(await client.statistics(), indent=2, sort_keys=True))
    return 0


async def _hibernate(args: argparse.Namespace) -> int:
    async with _client(args) as client:
        print(f"hibernated {await client.hibernate(*args.session_ids)} actors")
    return 0


def format_message(message: dict[str, Any]) -> str:
    """One message as ``<id> [<role>] <text>``, tool calls as ``<name>(<input>) -> <output>``."""
    pieces = []
    for part in message.get("parts", []):
        kind = part.get("type", "")
        if kind in ("text", "reasoning"):
            pieces.append(part.get("text", ""))
        elif kind.startswith("tool-") or kind == "dynamic-tool":
            name = part.get("toolName") or kind[5:]
            call = f"{name}({json.dumps(part.get('input'), ensure_ascii=False)})"
            if "output" in part:
                output = part["output"]
                call += f" -> {output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)}"
            pieces.append(call)
    return f"{message.get('id')} [{message.get('role')}] {_one_line(' | '.join(pieces))}"


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
