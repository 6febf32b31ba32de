"""Adversarial use of the Agent base class: broadcast arguments, stub-callable names."""

import pytest

from actors import Agent
from actors.agent import callable_method
from storage.kv import ActorStorage


class Connection:
    def __init__(self, conn_id):
        self.id = conn_id
        self.sent = []

    def send(self, message):
        self.sent.append(message)


class UnhashableConnection(Connection):
    __hash__ = None

    def __eq__(self, other):
        return isinstance(other, Connection) and other.id == self.id


class Context:
    def __init__(self, storage, connections):
        self.id = None
        self.storage = storage
        self.connections = connections

    def get_connections(self):
        return tuple(self.connections)


@pytest.fixture
def storage(tmp_path):
    s = ActorStorage.open(tmp_path / "agent.sqlite3")
    yield s
    s.close()


@pytest.mark.parametrize("exclude, reached", [
    ("b", ["a", "c"]),
    (None, ["a", "b", "c"]),
    ((), ["a", "b", "c"]),
    (iter(["a", "c"]), ["b"]),
    ({"c"}, ["a", "b"]),
    ("nobody", ["a", "b", "c"]),
])
def test_broadcast_accepts_one_id_none_or_any_iterable_to_exclude(storage, exclude, reached):
    peers = [Connection("a"), Connection("b"), Connection("c")]
    Agent(Context(storage, peers)).broadcast("hi", exclude=exclude)
    assert [p.id for p in peers if p.sent == ["hi"]] == reached


def test_broadcast_excludes_unhashable_connections_by_object(storage):
    a, b = UnhashableConnection("a"), UnhashableConnection("b")
    Agent(Context(storage, [a, b])).broadcast(b"\x00", exclude=[a])
    assert (a.sent, b.sent) == ([], [b"\x00"])


@pytest.mark.parametrize("message", [None, 5, ["x"], bytearray(b"x")])
def test_broadcast_refuses_what_is_not_a_frame(storage, message):
    with pytest.raises(TypeError, match="broadcast sends str or bytes, not "):
        Agent(Context(storage, [Connection("a")])).broadcast(message)


class Counter(Agent):
    async def increment(self):
        return 1

    async def public(self):
        return "ok"


@pytest.mark.parametrize("name", [
    "ｐｕｂｌｉｃ",  # fullwidth: an identifier whose NFKC form is "public", but not the same name
    "ｏｎ_start", "public\x00", "public ", " public", "../public", "__class__", "mro", "increment.__call__",
    None, b"public", ["public"],
])
def test_names_that_only_look_callable_are_not(name):
    assert callable_method(Counter, name) is None


def test_the_plain_names_are_callable():
    assert callable_method(Counter, "public") is Counter.public
    assert callable_method(Counter, "increment") is Counter.increment
