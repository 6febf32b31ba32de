"""Adversarial use of the Agent base class: broadcast arguments, stub-callable names."""

import pytest

from actors import Agent
from actors.agent import callable_method
from storage.kv import ActorStorage
from tests.support.agents import FakeContext, RecordingConnection


class UnhashableConnection(RecordingConnection):
    """A peer that is equal by id and cannot be hashed (exclude must not put it in a set)."""

    __hash__ = None

    def __eq__(self, other):
        return isinstance(other, RecordingConnection) and other.id == self.id


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
    peers = [RecordingConnection("a"), RecordingConnection("b"), RecordingConnection("c")]
    Agent(FakeContext(storage, peers)).broadcast("hi", exclude=exclude)
    assert [p.id for p in peers if p.sent == ["hi"]] == reached


def test_broadcast_excludes_unhashable_connections_by_object(storage):
    a, b = UnhashableConnection("a"), UnhashableConnection("b")
    Agent(FakeContext(storage, [a, b])).broadcast(b"\x00", exclude=[a])
    assert (a.sent, b.sent) == ([], [b"\x00"])


@pytest.mark.parametrize("message", [None, 5, ["x"], bytearray(b"x")])
def test_broadcast_refuses_what_is_not_a_frame(storage, message):
    with pytest.raises(TypeError, match="broadcast sends str or bytes, not "):
        Agent(FakeContext(storage, [RecordingConnection("a")])).broadcast(message)


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
