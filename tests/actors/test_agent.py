"""The Agent base class: what stubs may call, broadcast, hooks, context use."""

import pytest

from actors import Agent, AlarmInfo
from actors.agent import RESERVED_NAMES, ConnectionLike, callable_method
from storage.kv import ActorStorage
from tests.support.agents import FakeContext, RecordingConnection


class Base(Agent):
    async def inherited(self):
        return "base"


class Sample(Base):
    label = "not a method"

    async def public(self):
        return "ok"

    def sync_public(self):
        return "sync"

    async def _private(self):
        pass

    async def on_custom(self):
        pass

    def sql(self, query, *params):  # an override stays reserved
        return super().sql(query, *params)

    @property
    def prop(self):
        return 1

    @staticmethod
    def static():
        pass

    @classmethod
    def klass(cls):
        pass


def test_public_methods_of_subclasses_are_callable():
    assert callable_method(Sample, "public") is Sample.public
    assert callable_method(Sample, "sync_public") is Sample.sync_public
    assert callable_method(Sample, "inherited") is Base.inherited


@pytest.mark.parametrize(
    "name",
    ["_private", "on_custom", "on_start", "on_message", "alarm", "sql", "broadcast", "storage", "ctx", "env",
     "__init__", "__class__", "prop", "static", "klass", "label", "missing", "", "not-an-identifier", 3],
)
def test_everything_else_is_not_callable(name):
    assert callable_method(Sample, name) is None


def test_reserved_names_cover_the_whole_base_class():
    assert {"sql", "broadcast", "storage", "on_start", "alarm", "on_connect", "on_message", "on_close",
            "ctx", "env"} <= RESERVED_NAMES


@pytest.fixture
def storage(tmp_path):
    s = ActorStorage.open(tmp_path / "a.sqlite3")
    yield s
    s.close()


def test_fake_connection_satisfies_the_protocol():
    assert isinstance(RecordingConnection("c"), ConnectionLike)


def test_broadcast_reaches_every_peer_except_excluded(storage):
    a, b, c = RecordingConnection("a"), RecordingConnection("b"), RecordingConnection("c")
    agent = Agent(FakeContext(storage, [a, b, c]))
    agent.broadcast('{"type":"x"}', exclude=[b])
    agent.broadcast(b"\x01", exclude={"c"})
    assert (a.sent, b.sent, c.sent) == (['{"type":"x"}', b"\x01"], [b"\x01"], ['{"type":"x"}'])


def test_broadcast_skips_a_failing_peer(storage, caplog):
    bad, good = RecordingConnection("bad", fail=True), RecordingConnection("good")
    Agent(FakeContext(storage, [bad, good])).broadcast("hi")
    assert good.sent == ["hi"]
    assert "broadcast to connection bad failed" in caplog.text


def test_broadcast_refuses_other_types(storage):
    with pytest.raises(TypeError, match="broadcast sends str or bytes, not dict"):
        Agent(FakeContext(storage, [])).broadcast({"type": "x"})


def test_sql_and_storage_use_the_context_storage(storage):
    agent = Agent(FakeContext(storage, []), env={"k": 1})
    agent.storage.put("a", 0)  # _cf_KV is made by its first write (storage.schema.ON_FIRST_USE)
    agent.sql("INSERT OR REPLACE INTO _cf_KV (key, value) VALUES (?, ?)", "a", b"\xc0")
    assert agent.storage is storage
    assert agent.storage.get("a") is None
    assert agent.sql("SELECT key FROM _cf_KV") == [{"key": "a"}]
    assert agent.env == {"k": 1}


async def test_default_hooks_do_nothing(storage):
    agent = Agent(FakeContext(storage, []))
    conn = RecordingConnection("c")
    assert await agent.on_start() is None
    assert await agent.alarm(AlarmInfo(retry_count=0, scheduled_ms=1)) is None
    assert await agent.on_connect(conn) is None
    assert await agent.on_message(conn, "m") is None
    assert await agent.on_close(conn, 1000, "") is None


def test_alarm_info_reports_retries():
    assert AlarmInfo(retry_count=0, scheduled_ms=5).is_retry is False
    assert AlarmInfo(retry_count=2, scheduled_ms=5).is_retry is True
