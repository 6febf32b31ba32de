"""The TOML configuration of the host, and the bind/token rule of the server."""

import re
from pathlib import Path

import pytest

from actors.session_agent import BlockConfig, CompactionConfig, SessionConfig
from runtime.server.app import require_token_for
from runtime.server.config import ClusterSettings, ConfigError, HostConfig, ServerSettings, load_config

FULL = """
[server]
bind = "127.0.0.1:9000"
data = "state"
idle_timeout_s = 5
durability = "full"
max_body_bytes = 1024
max_active = 64
max_pending_calls = 10
graceful_timeout_s = 2.5

[session]
cached_prompt = false

[[session.blocks]]
label = "soul"
kind = "readonly"
description = "Identity"
file = "soul.md"

[[session.blocks]]
label = "notes"
max_tokens = 500

[[session.blocks]]
label = "skills"
kind = "skills"
path = "skills"

[[session.blocks]]
label = "knowledge"
kind = "searchable"

[session.compaction]
threshold = 0
summarizer = "textwrap:dedent"
protect_head = 1
"""


def write(tmp_path, text, name="sessions.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_no_file_gives_the_defaults():
    config = load_config(None)
    assert config == HostConfig(ServerSettings(), SessionConfig())
    assert (config.server.bind, config.server.data, config.server.max_body_bytes) == (
        "127.0.0.1:8787", Path("data"), 8 * 1024 * 1024)


def test_every_key_is_read_and_paths_are_relative_to_the_file(tmp_path):
    (tmp_path / "soul.md").write_text("Be brief.", encoding="utf-8")
    (tmp_path / "skills").mkdir()
    config = load_config(write(tmp_path, FULL))
    assert config.server == ServerSettings(bind="127.0.0.1:9000", data=tmp_path / "state", idle_timeout_s=5,
                                           durability="full", max_body_bytes=1024, max_active=64,
                                           max_pending_calls=10, graceful_timeout_s=2.5)
    assert config.session == SessionConfig(
        blocks=(BlockConfig("soul", "readonly", description="Identity", file=tmp_path / "soul.md"),
                BlockConfig("notes", max_tokens=500),
                BlockConfig("skills", "skills", path=tmp_path / "skills"),
                BlockConfig("knowledge", "searchable")),
        cached_prompt=False,
        compaction=CompactionConfig(threshold=None, summarizer="textwrap:dedent", protect_head=1),
    )


def test_compaction_can_be_switched_off(tmp_path):
    assert load_config(write(tmp_path, "[session]\ncompaction = false\n")).session.compaction is None


@pytest.mark.parametrize(("text", "message"), [
    ("[server]\nbnd = 'x'\n", ("unknown key server.bnd (allowed: access_log, allowed_hosts, backlog, bind, "
                               "body_timeout_s, certfile, cors_origins, data, drain_s, durability, "
                               "graceful_timeout_s, head_timeout_s, idle_timeout_s, inspector, keep_alive_timeout_s, "
                               "keyfile, max_active, max_body_bytes, max_body_items, "
                               "max_connect_wait_s, max_connecting, max_connections_per_peer, max_pending_calls, "
                               "max_queue_s, max_requests)")),
    ("[server]\ncors_origins = 'https://a.example'\n", "server.cors_origins must be a list of origins"),
    ("[server]\ncors_origins = ['https://a.example/app']\n",
     "server.cors_origins: 'https://a.example/app' is not an origin (scheme://host[:port], no path)"),
    ("[server]\naccess_log = 'yes'\n", "server.access_log must be true or false, not 'yes'"),
    ("[server]\ndrain_s = -1\n", "server.drain_s must be a number of seconds >= 0, not -1"),
    ("[server]\nbind = '127.0.0.1:70000'\n", "server.bind: port 70000 is not a port (0-65535)"),
    ("[serve]\n", "unknown key serve (allowed: cluster, retention, search, server, session, storage)"),
    ("[server]\ndurability = 'fast'\n", "server.durability must be 'normal' or 'full', not 'fast'"),
    ("[server]\nbind = '127.0.0.1'\n", "server.bind must be 'host:port', not '127.0.0.1'"),
    ("[server]\nidle_timeout_s = 0\n", "server.idle_timeout_s must be a positive number of seconds, not 0"),
    ("[[session.blocks]]\nlabel = 'x'\nkind = 'magic'\n",
     "session.blocks[0].kind: block 'x': kind must be one of readonly, writable, skills, searchable, not 'magic'"),
    ("[[session.blocks]]\nlabel = 'x'\ncolour = 'red'\n", "unknown key session.blocks[0].colour"),
    ("[[session.blocks]]\nlabel = 'soul'\nkind = 'readonly'\nfile = 'missing.md'\n", "is not a file"),
    ("[[session.blocks]]\nlabel = 'k'\nkind = 'skills'\npath = 'nowhere'\n", "is not a folder"),
    ("[session.compaction]\nsummarizer = 'no_such_module_q:f'\n", "session.compaction.summarizer: summarizer"),
    ("[session]\ncached_prompt = 'yes'\n", "session.cached_prompt must be true or false"),
    ("not toml [", "not valid TOML: "),
])
def test_bad_files_name_the_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read .*nope.toml"):
        load_config(tmp_path / "nope.toml")


def test_command_line_overrides_replace_only_what_is_given():
    config = HostConfig().with_overrides(bind="127.0.0.1:0", data=None, idle_timeout_s=2)
    assert (config.server.bind, config.server.data, config.server.idle_timeout_s) == ("127.0.0.1:0", Path("data"), 2)
    with pytest.raises(ConfigError):
        HostConfig().with_overrides(durability="sometimes")


@pytest.mark.parametrize("bind", ["127.0.0.1:8787", "localhost:1", "[::1]:80", "127.5.0.1:0"])
def test_loopback_binds_need_no_token(bind):
    require_token_for(bind, None)


@pytest.mark.parametrize("bind", ["0.0.0.0:8787", "[::]:80", "192.168.1.4:80", "example.com:80"])
def test_other_binds_refuse_to_start_without_a_token(bind):
    with pytest.raises(ValueError, match=re.escape(f"refusing to serve {bind} without a token: set")):
        require_token_for(bind, None)
    require_token_for(bind, "secret")


# -- [cluster] ------------------------------------------------------------------------------------------


def test_the_cluster_section_turns_cluster_mode_on(tmp_path):
    assert load_config(None).cluster is None
    config = load_config(write(tmp_path, """
[cluster]
postgres = "postgresql://sessions@db.internal/sessions"
host_id = "n1"
advertise = "http://10.0.0.5:8801/"
lease_s = 4
connect_timeout_s = 2.5
snapshot_bytes = 4096
"""))
    assert config.cluster == ClusterSettings("postgresql://sessions@db.internal/sessions", host_id="n1",
                                             advertise="http://10.0.0.5:8801", lease_s=4.0, connect_timeout_s=2.5,
                                             snapshot_bytes=4096)
    assert config.cluster.advertise_url("127.0.0.1:8801") == "http://10.0.0.5:8801"
    defaults = load_config(write(tmp_path, "[cluster]\npostgres = 'dbname=s'\n")).cluster
    assert (defaults.host_id, defaults.advertise, defaults.lease_s) == (None, None, 10.0)
    assert defaults.advertise_url("127.0.0.1:8801") == "http://127.0.0.1:8801"
    assert defaults.advertise_url("[::1]:8801") == "http://[::1]:8801"


@pytest.mark.parametrize(("text", "message"), [
    ("[cluster]\nhost_id = 'n1'\n", "cluster.postgres is missing"),
    ("[cluster]\npostgres = ''\n", "cluster.postgres must be a Postgres connection string"),
    ("[cluster]\npostgres = 'dbname=s'\nlease_s = 0\n", "cluster.lease_s must be a positive number of seconds, not 0"),
    ("[cluster]\npostgres = 'dbname=s'\nhost_id = 'a b'\n", "cluster.host_id must be 1-64 letters"),
    ("[cluster]\npostgres = 'dbname=s'\nadvertise = '10.0.0.5:8801'\n", "cluster.advertise must be a base URL"),
    ("[cluster]\npostgres = 'dbname=s'\nadvertise = 'http://h:1/x'\n", "cluster.advertise must be a base URL"),
    ("[cluster]\npostgres = 'dbname=s'\nleases = 3\n",
     "unknown key cluster.leases (allowed: advertise, connect_timeout_s, databases, host_id, lease_s, pitr_days, postgres, "
     "snapshot_bytes)"),
    ("[cluster]\npostgres = 'dbname=s'\nsnapshot_bytes = 0\n", "cluster.snapshot_bytes must be a positive integer"),
    ("cluster = 3\n", "cluster must be a table"),
])
def test_bad_cluster_settings_name_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(write(tmp_path, text))


def test_cluster_flags_override_the_file_and_need_a_database():
    assert HostConfig().with_cluster(None) == HostConfig()
    config = HostConfig().with_cluster("dbname=s", host_id="n2", advertise=None, lease_s=3)
    assert config.cluster == ClusterSettings("dbname=s", host_id="n2", lease_s=3.0)
    assert config.with_cluster(None, lease_s=5).cluster.lease_s == 5.0
    assert config.with_overrides(bind="127.0.0.1:0").cluster == config.cluster
    with pytest.raises(ConfigError, match="--host-id needs --cluster"):
        HostConfig().with_cluster(None, host_id="n2")
    with pytest.raises(ConfigError, match="--lease needs --cluster"):
        HostConfig().with_cluster(None, lease_s=2)


@pytest.mark.parametrize("bind", ["0.0.0.0:8801", "[::]:8801"])
def test_a_wildcard_bind_needs_an_advertised_url(bind):
    with pytest.raises(ConfigError, match="set cluster.advertise"):
        ClusterSettings("dbname=s").advertise_url(bind)


# -- [storage] ----------------------------------------------------------------------------------


def test_the_storage_section_names_a_postgres_database(tmp_path):
    path = tmp_path / "sessions.toml"
    path.write_text('[storage]\npostgres = "postgresql://app@db/sessions"\npool_size = 4\ntimeout_s = 2.5\n')
    config = load_config(path)
    assert (config.storage.postgres, config.storage.pool_size, config.storage.timeout_s) == (
        "postgresql://app@db/sessions", 4, 2.5)
    assert load_config(None).storage.postgres is None
    assert config.with_overrides(bind="127.0.0.1:0").storage == config.storage


def test_the_encryption_key_file_is_relative_to_the_configuration_file(tmp_path):
    path = tmp_path / "conf" / "sessions.toml"
    path.parent.mkdir()
    path.write_text('[storage]\nencryption_key_file = "secrets/data.key"\n')
    assert load_config(path).storage.encryption_key_file == tmp_path / "conf" / "secrets" / "data.key"
    path.write_text('[storage]\nencryption_key_file = "/etc/durable-sessions/data.key"\n')
    assert load_config(path).storage.encryption_key_file == Path("/etc/durable-sessions/data.key")
    assert load_config(None).storage.encryption_key_file is None


@pytest.mark.parametrize("body, message", [
    ('[storage]\npostgres = ""\n', "storage.postgres must be a non-empty connection string"),
    ("[storage]\npool_size = 0\n", "storage.pool_size must be a positive integer, not 0"),
    ("[storage]\ntimeout_s = -1\n", "storage.timeout_s must be a positive number of seconds, not -1"),
    ('[storage]\nurl = "x"\n',
     "unknown key storage.url (allowed: encryption_key_file, pool_size, postgres, timeout_s)"),
    ("[storage]\nencryption_key_file = 3\n", "storage.encryption_key_file must be the path of a file"),
    ('[storage]\nencryption_key_file = " "\n', "storage.encryption_key_file must be the path of a file"),
])
def test_bad_storage_settings_name_the_key(tmp_path, body, message):
    path = tmp_path / "sessions.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)
