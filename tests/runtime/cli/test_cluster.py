"""``durable-sessions serve --cluster`` (runtime.cli.cluster): flags, start-up errors, host ids.

The cluster itself runs in tests/cluster/ (real Postgres, three real hosts).
"""

import re

import pytest

from runtime.cli.cluster import describe_database, new_host_id
from runtime.cli.main import build_parser, main
from runtime.server.config import ConfigError


def test_the_cluster_flags_parse():
    args = build_parser().parse_args(["serve", "--cluster", "postgresql://db/s", "--host-id", "n1", "--advertise",
                                      "http://10.0.0.5:8801", "--lease", "2.5"])
    assert (args.cluster, args.host_id, args.advertise, args.lease_s) == (
        ["postgresql://db/s"], "n1", "http://10.0.0.5:8801", 2.5)


def test_the_database_is_named_without_its_password():
    assert describe_database("postgresql://me:s3cret@db.internal:6543/sessions") == "db.internal:6543/sessions"
    assert describe_database("host=127.0.0.1 port=5 user=u password=s3cret dbname=d") == "127.0.0.1:5/d"
    assert describe_database("dbname=d") == "localhost:5432/d"
    with pytest.raises(ConfigError, match="does not parse"):
        describe_database("host=x = = broken")


def test_host_ids_are_new_at_every_start():
    first, second = new_host_id(), new_host_id()
    assert first != second
    assert re.fullmatch(r"[A-Za-z0-9._-]{1,57}-[0-9a-f]{6}", first)


@pytest.mark.parametrize(("argv", "message"), [
    (["--host-id", "n1"], "--host-id needs --cluster (or a [cluster] section)"),
    (["--lease", "3"], "--lease needs --cluster"),
    (["--cluster", "host=x = = broken"], "cluster.postgres does not parse as a Postgres connection string"),
    (["--cluster", "dbname=s", "--lease", "0"], "cluster.lease_s must be a positive number of seconds, not 0.0"),
    (["--cluster", "dbname=s", "--bind", "0.0.0.0:0", "--token", "t"], "set cluster.advertise (--advertise)"),
    (["--cluster", "dbname=s", "--postgres", "dbname=s"], "--cluster and --postgres do not go together"),
])
def test_bad_cluster_settings_exit_2_with_one_line(capsys, tmp_path, argv, message):
    assert main(["serve", "--data", str(tmp_path / "d"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("durable-sessions serve: ") and message in err
    assert err.count("\n") == 1
    assert not (tmp_path / "d").exists()
