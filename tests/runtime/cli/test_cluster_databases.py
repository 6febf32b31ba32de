"""``serve --cluster`` on several databases and its start-up errors: the config key ``[cluster] databases``,
``--cluster`` repeated, and one line (exit status 2, no retrying) for a database that refuses the host --
a wrong password or role, a missing database, a newer cluster schema, a partition map that differs."""

from __future__ import annotations

import re
import secrets
import subprocess

import psycopg
import pytest
import trio

from runtime.cli.main import build_parser
from runtime.host.cluster import ClusterOptions
from runtime.host.partitions import cluster_placement
from runtime.server.config import ClusterSettings, ConfigError, HostConfig, load_config
from storage.cluster.driver import describe_dsn
from storage.cluster.schema import CLUSTER_SCHEMA_VERSION
from tests.support.processes import cli_command, cli_env

# -- the configuration --------------------------------------------------------------------------------


def write(tmp_path, text):
    path = tmp_path / "sessions.toml"
    path.write_text(text)
    return path


def test_databases_in_the_config_file_are_the_cluster_in_map_order(tmp_path):
    config = load_config(write(tmp_path, '[cluster]\ndatabases = ["dbname=a", "dbname=b"]\nlease_s = 3\n'))
    assert config.cluster == ClusterSettings(databases=("dbname=a", "dbname=b"), lease_s=3.0)
    assert config.cluster.dsns == ("dbname=a", "dbname=b") and config.cluster.postgres is None
    one = load_config(write(tmp_path, "[cluster]\npostgres = 'dbname=a'\n")).cluster
    assert one.dsns == ("dbname=a",) and one.databases == ()  # postgres = "..." stays a one-database list


@pytest.mark.parametrize(("text", "message"), [
    ('[cluster]\npostgres = "dbname=a"\ndatabases = ["dbname=b"]\n',
     "give cluster.postgres (one database) or cluster.databases (several), not both"),
    ('[cluster]\ndatabases = "dbname=a"\n', "cluster.databases must be a list of Postgres connection strings"),
    ("[cluster]\ndatabases = []\n", "cluster.databases must name at least one database"),
    ('[cluster]\ndatabases = ["dbname=a", ""]\n', "cluster.databases: '' is not a Postgres connection string"),
    ('[cluster]\ndatabases = ["dbname=a", 3]\n', "cluster.databases: 3 is not a Postgres connection string"),
    ('[cluster]\ndatabases = ["dbname=a", "dbname=a"]\n', "cluster.databases names a database twice"),
    ("[cluster]\nlease_s = 3\n", "cluster.postgres is missing"),
])
def test_bad_databases_settings_name_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(write(tmp_path, text))


def test_cluster_flags_repeated_replace_the_files_databases(tmp_path):
    args = build_parser().parse_args(["serve", "--cluster", "dbname=x", "--cluster", "dbname=y"])
    assert args.cluster == ["dbname=x", "dbname=y"]
    from_file = load_config(write(tmp_path, '[cluster]\ndatabases = ["dbname=a", "dbname=b"]\nhost_id = "n1"\n'))
    assert from_file.with_cluster(args.cluster).cluster == ClusterSettings(databases=("dbname=x", "dbname=y"),
                                                                           host_id="n1")
    assert from_file.with_cluster(["dbname=x"]).cluster == ClusterSettings("dbname=x", host_id="n1")
    assert from_file.with_cluster(None, lease_s=2).cluster.dsns == ("dbname=a", "dbname=b")
    assert HostConfig().with_cluster(["dbname=x", "dbname=y"]).cluster.dsns == ("dbname=x", "dbname=y")


# -- start-up errors against the fixture's Postgres ------------------------------------------------------


def serve(tmp_path, *dsns, timeout_s=600):
    """Start a host on ``dsns`` that would keep trying for ``timeout_s``; its exit status and stderr."""
    config = write(tmp_path, f"[cluster]\npostgres = 'unused'\nconnect_timeout_s = {timeout_s}\n")
    argv = [arg for dsn in dsns for arg in ("--cluster", dsn)]
    result = subprocess.run(
        [*cli_command(), "serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "d"), "--config", str(config),
         *argv], env=cli_env(None), capture_output=True, text=True, timeout=120)  # far below the 600 s of retrying
    return result.returncode, result.stderr


def only_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def database(pg_server):
    name = pg_server.create_database("template0")
    yield name
    if pg_server.is_running():
        pg_server.drop_database(name)


def test_a_wrong_password_is_named_at_once(tmp_path, pg_server, database):
    role, password = f"pw_{secrets.token_hex(4)}", secrets.token_hex(8)
    pg_server.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    hba = pg_server.data_dir / "pg_hba.conf"
    hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    pg_server.execute("SELECT pg_reload_conf()")
    dsn = f"postgresql://{role}:wrong-{password}@127.0.0.1:{pg_server.port}/{database}"
    status, stderr = serve(tmp_path, dsn)
    assert status == 2, stderr
    assert only_line(stderr) == (f"durable-sessions serve: Postgres at 127.0.0.1:{pg_server.port}/{database} "
                                 f'refused this host: password authentication failed for user "{role}"')
    assert password not in stderr


def test_a_wrong_role_and_a_missing_database_are_named_at_once(tmp_path, pg_server, database):
    status, stderr = serve(tmp_path, f"postgresql://ghost@127.0.0.1:{pg_server.port}/{database}")
    assert status == 2, stderr
    assert only_line(stderr) == (f"durable-sessions serve: Postgres at 127.0.0.1:{pg_server.port}/{database} "
                                 'refused this host: role "ghost" does not exist')
    missing = pg_server.dsn("no_such_db")
    status, stderr = serve(tmp_path, pg_server.dsn(database), missing)  # the second of two databases
    assert status == 2, stderr
    assert only_line(stderr) == (f"durable-sessions serve: Postgres at 127.0.0.1:{pg_server.port}/no_such_db "
                                 'refused this host: database "no_such_db" does not exist')


def test_a_database_of_a_newer_cluster_schema_is_named(tmp_path, pg_server, database):
    dsn = pg_server.dsn(database)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ds_cluster_meta (key text PRIMARY KEY, value text NOT NULL)")
        conn.execute("INSERT INTO ds_cluster_meta VALUES ('schema_version', %s), ('cluster_id', 'x')",
                     (str(CLUSTER_SCHEMA_VERSION + 1),))
    status, stderr = serve(tmp_path, dsn)
    assert status == 2, stderr
    assert only_line(stderr) == (f"durable-sessions serve: Postgres at 127.0.0.1:{pg_server.port}/{database} "
                                 f"holds cluster tables of schema version {CLUSTER_SCHEMA_VERSION + 1}, newer than "
                                 f"this release's {CLUSTER_SCHEMA_VERSION}: upgrade durable-sessions on this host")


def test_a_host_with_another_list_of_databases_is_refused_with_one_line(tmp_path, pg_server, database):
    other = pg_server.create_database("template0")
    try:
        a, b = pg_server.dsn(database), pg_server.dsn(other)

        async def record() -> None:  # a host on [a, b] records the map, then leaves
            placement = cluster_placement(ClusterOptions("unused", "http://h0", host_id="h0"), [a, b])
            await placement.join()
            await placement.aclose()

        trio.run(record)
        status, stderr = serve(tmp_path, b, a)
        assert status == 2, stderr
        assert only_line(stderr) == (
            f"durable-sessions serve: the cluster's databases refuse this host: the databases are given in another "
            f"order ({describe_dsn(b)}, {describe_dsn(a)}) than the cluster's partition map records "
            f"({describe_dsn(a)}, {describe_dsn(b)}, in {describe_dsn(a) if _first_checked(a, b) else describe_dsn(b)})"
            ": give them in the map's order")
        with psycopg.connect(a, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM ds_hosts").fetchone() == (0,)  # never registered
    finally:
        pg_server.drop_database(other)


def _first_checked(a: str, b: str) -> bool:
    """Whether ``a`` is visited first (databases are checked in the order of their cluster ids)."""
    ids = []
    for dsn in (a, b):
        with psycopg.connect(dsn, autocommit=True) as conn:
            ids.append(conn.execute("SELECT value FROM ds_cluster_meta WHERE key = 'cluster_id'").fetchone()[0])
    return ids[0] < ids[1]
