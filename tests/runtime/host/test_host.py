"""The actor host: addressing, ids, calls, activation, the gates, mailboxes."""

import math
import random

import pytest
import trio

from actors import Agent
from common.errors import (
    ActorOverloadedError,
    HostClosedError,
    InvalidActorIdError,
    InvalidArgumentsError,
    InvalidNamespaceError,
    TransactionLeftOpenError,
    UnknownMethodError,
    UnknownNamespaceError,
)
from runtime.host.actor_host import open_host
from runtime.testing import actor_data_dir, actor_host, run_in_actor  # noqa: F401 (fixtures)


class Notes(Agent):
    """Stores notes; records activations in ``env`` (a list)."""

    async def on_start(self):
        if self.env is not None:
            self.env.append(self.ctx.id.hex)
            await trio.sleep(1)  # a slow start widens any activation race

    async def add(self, text, *, tag="none"):
        self.sql("INSERT INTO assistant_config VALUES ('notes', ?, ?)", text, tag)
        return self.count()

    def count(self):
        return self.storage.scalar("SELECT count(*) FROM assistant_config")

    async def fail(self, message):
        raise KeyError(message)


# -- addressing -----------------------------------------------------------------


async def test_id_from_name_is_deterministic_hex_and_namespace_specific(actor_host):
    a, b = actor_host.bind("a", Notes), actor_host.bind("b", Notes)
    first = a.id_from_name("alice")
    assert first == a.id_from_name("alice") and first.name == "alice"
    assert len(first.hex) == 64 and int(first.hex, 16) >= 0 and str(first) == first.hex
    assert first.hex != a.id_from_name("bob").hex
    assert first.hex != b.id_from_name("alice").hex


async def test_new_unique_ids_differ_and_parse_back(actor_host):
    ns = actor_host.bind("a", Notes)
    ids = {ns.new_unique_id() for _ in range(100)}
    assert len(ids) == 100
    for actor_id in ids:
        assert ns.id_from_string(actor_id.hex) == actor_id
        assert ns.id_from_string(actor_id.hex.upper()) == actor_id


@pytest.mark.parametrize("bad", ["", "abc", "g" * 64, "0" * 63, "0" * 65, " " + "0" * 63, None, 42])
async def test_malformed_ids_are_rejected(actor_host, bad):
    ns = actor_host.bind("a", Notes)
    with pytest.raises(InvalidActorIdError) as info:
        ns.id_from_string(bad)
    assert info.value.status == 400


async def test_ids_of_another_namespace_or_mistyped_are_rejected(actor_host):
    a, b = actor_host.bind("a", Notes), actor_host.bind("b", Notes)
    foreign = b.id_from_name("alice")
    with pytest.raises(InvalidActorIdError, match=f"actor id {foreign.hex} does not belong to namespace 'a'"):
        a.id_from_string(foreign.hex)
    with pytest.raises(InvalidActorIdError, match="belongs to namespace 'b', not 'a'"):
        a.get(foreign)
    good = a.id_from_name("alice").hex
    mistyped = good[:10] + ("0" if good[10] != "0" else "1") + good[11:]
    with pytest.raises(InvalidActorIdError):
        a.id_from_string(mistyped)


async def test_bind_validates_names_classes_and_duplicates(actor_host):
    for bad in ("", "_hidden", "-x", "a/b", "..", "x" * 65, "sp ace"):
        with pytest.raises(InvalidNamespaceError, match="namespace names are 1-64"):
            actor_host.bind(bad, Notes)
    with pytest.raises(InvalidNamespaceError, match="is not a subclass of actors.Agent"):
        actor_host.bind("x", object)
    actor_host.bind("x", Notes)
    with pytest.raises(InvalidNamespaceError, match="namespace 'x' is already bound"):
        actor_host.bind("x", Notes)
    with pytest.raises(UnknownNamespaceError, match="no actor namespace named 'y' is bound") as info:
        actor_host.namespace("y")
    assert info.value.status == 404
    assert actor_host.namespace("x").agent_class is Notes


async def test_stub_creates_nothing_until_called(actor_host, actor_data_dir):
    ns = actor_host.bind("notes", Notes)
    stub = ns.get(ns.id_from_name("alice"))
    assert not (actor_data_dir / "notes").exists()
    assert actor_host.statistics().active == 0
    assert await stub.add("x") == 1
    expected = actor_data_dir / "notes" / stub.id.hex[:2] / f"{stub.id.hex}.sqlite3"
    assert actor_host.path_for(stub.id) == expected and expected.exists()
    assert sorted(p.name for p in (actor_data_dir / "notes").rglob("*.sqlite3")) == [f"{stub.id.hex}.sqlite3"]


# -- calls ------------------------------------------------------------------------


async def test_calls_pass_args_and_kwargs_through_call_and_attribute_sugar(actor_host):
    ns = actor_host.bind("notes", Notes)
    stub = ns.get_by_name("alice")
    assert await stub.call("add", "one", tag="t") == 1
    assert await stub.add("two") == 2
    assert await stub.count() == 2  # a plain (sync) method
    rows = await run_in_actor(stub, lambda agent: agent.sql("SELECT key, value FROM assistant_config"))
    assert rows == [{"key": "one", "value": "t"}, {"key": "two", "value": "none"}]


@pytest.mark.parametrize("method", ["_private", "on_start", "alarm", "sql", "broadcast", "storage", "ctx", "nope"])
async def test_uncallable_methods_are_refused_before_waking(actor_host, actor_data_dir, method):
    ns = actor_host.bind("notes", Notes)
    with pytest.raises(UnknownMethodError, match=f"actor class Notes has no callable method '{method}'") as info:
        await ns.get_by_name("alice").call(method)
    assert info.value.status == 404
    assert actor_host.statistics().activations == 0 and not (actor_data_dir / "notes").exists()


async def test_bad_arguments_are_refused_before_waking(actor_host):
    ns = actor_host.bind("notes", Notes)
    stub = ns.get_by_name("alice")
    with pytest.raises(InvalidArgumentsError, match=r"Notes.add\(\): missing a required argument: 'text'") as info:
        await stub.add()
    assert info.value.status == 400
    with pytest.raises(InvalidArgumentsError, match="unexpected keyword argument 'colour'"):
        await stub.add("x", colour="red")
    assert actor_host.statistics().activations == 0


async def test_arguments_are_checked_by_shape_after_a_call_of_the_same_method_fitted(actor_host):
    # A fitting shape is remembered (binding is skipped for it); every other shape is still bound and refused.
    ns = actor_host.bind("notes", Notes)
    stub = ns.get_by_name("alice")
    assert await stub.add("x", tag="t") == 1
    assert await stub.add("y", tag="u") == 2
    with pytest.raises(InvalidArgumentsError, match="unexpected keyword argument 'colour'"):
        await stub.add("x", colour="red")
    with pytest.raises(InvalidArgumentsError, match=r"Notes.add\(\): missing a required argument: 'text'"):
        await stub.add(tag="t")
    with pytest.raises(InvalidArgumentsError, match="too many positional arguments"):
        await stub.add("x", "y")
    assert await stub.add("z") == 3
    assert await stub.count() == 3


async def test_errors_raised_by_methods_reach_the_caller_and_the_actor_stays(actor_host):
    ns = actor_host.bind("notes", Notes)
    stub = ns.get_by_name("alice")
    with pytest.raises(KeyError, match="boom"):
        await stub.fail("boom")
    assert await stub.add("x") == 1
    assert actor_host.statistics().activations == 1


# -- activation ----------------------------------------------------------------------


async def test_fifty_callers_waking_one_actor_see_one_activation(autojump_clock, actor_data_dir):
    started = []
    async with open_host(actor_data_dir) as host:
        ns = host.bind("notes", Notes, env=started)
        stub = ns.get_by_name("alice")
        await stub.add("seed")
        await host.hibernate(ns, stub.id)
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(stub.add, f"n{i}")
        assert started == [stub.id.hex, stub.id.hex]  # first activation + the one wake
        assert host.statistics().activations == 2
        assert await stub.count() == 51


class FlakyStart(Agent):
    async def on_start(self):
        self.env["starts"] += 1
        await trio.sleep(1)
        if self.env["starts"] == 1:
            raise RuntimeError("start failed")

    def ping(self):
        return "pong"


async def test_failed_on_start_fails_waiting_calls_and_next_call_retries(autojump_clock, actor_data_dir):
    env = {"starts": 0}
    async with open_host(actor_data_dir) as host:
        ns = host.bind("flaky", FlakyStart, env=env)
        stub = ns.get_by_name("a")
        errors = []

        async def call():
            try:
                await stub.ping()
            except RuntimeError as exc:
                errors.append(str(exc))

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(call)
        assert errors == ["start failed"] * 5
        stats = host.statistics()
        assert (stats.active, stats.activations, stats.failed_activations) == (0, 0, 1)
        assert not host.is_active(ns, stub.id)
        assert await stub.ping() == "pong"
        assert env["starts"] == 2 and host.is_active(ns, stub.id)


class Recorder(Agent):
    async def on_start(self):
        await trio.sleep(1)
        self.seen = []

    def record(self, item):
        self.seen.append(item)
        return list(self.seen)

    async def guard(self, seconds):
        await self.ctx.block_concurrency_while(lambda: trio.sleep(seconds))


@pytest.mark.parametrize("attempt", range(5))
async def test_queued_calls_start_in_admission_order(autojump_clock, actor_host, attempt):
    stub = actor_host.bind("rec", Recorder).get_by_name("r")
    async with trio.open_nursery() as nursery:
        for i in range(20):  # all queue while the actor starts
            nursery.start_soon(stub.record, i)
            await trio.sleep(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stub.guard, 5)
        await trio.sleep(1)
        for i in range(20, 40):  # all queue behind the closed gate
            nursery.start_soon(stub.record, i)
            await trio.sleep(0)
    assert await stub.record(40) == list(range(41))


class OpenTransactionAtStart(Agent):
    async def on_start(self):
        self.storage.exec("BEGIN")
        self.storage.put("half", 1)

    def ping(self):
        return "pong"


async def test_on_start_leaving_a_transaction_open_fails_the_activation(actor_host, actor_data_dir):
    ns = actor_host.bind("bad", OpenTransactionAtStart)
    stub = ns.get_by_name("a")
    with pytest.raises(TransactionLeftOpenError, match="ended inside a storage transaction"):
        await stub.ping()
    stats = actor_host.statistics()
    assert (stats.active, stats.failed_activations) == (0, 1)


async def test_stub_attributes(actor_host):
    ns = actor_host.bind("notes", Notes)
    stub = ns.get_by_name("alice")
    assert repr(stub) == f"<ActorStub notes/{stub.id.hex}>"
    assert stub.namespace is ns and stub.id == ns.id_from_name("alice")
    with pytest.raises(AttributeError):
        stub._private
    assert ns.get(stub.id.hex).id == stub.id


# -- the gates ---------------------------------------------------------------------------


class Ledger(Agent):
    async def slow_write(self, value, seconds):
        await trio.sleep(seconds)  # a model call
        self.storage.put("value", value)
        return value

    def read(self):
        return self.storage.get("value")

    async def increment_unguarded(self):
        current = self.storage.get("n", 0)
        await trio.sleep(random.random())
        self.storage.put("n", current + 1)

    async def increment_guarded(self):
        async def step():
            current = self.storage.get("n", 0)
            await trio.sleep(random.random())
            self.storage.put("n", current + 1)
            return current + 1

        return await self.ctx.block_concurrency_while(step)

    async def nested_guard(self):
        async def inner():
            return "inner"

        return await self.ctx.block_concurrency_while(lambda: self.ctx.block_concurrency_while(inner))

    async def guarded_failure(self):
        async def boom():
            await trio.sleep(1)
            raise ValueError("guarded boom")

        await self.ctx.block_concurrency_while(boom)

    async def transfer(self, call_no):
        for step in range(3):
            with self.storage.transaction():
                for part in range(3):
                    self.sql("INSERT INTO assistant_config VALUES (?, ?, ?)", str(call_no), f"{step}.{part}", "x")
            await trio.sleep(random.random())
        return call_no

    def leave_transaction_open(self):
        self.storage.exec("BEGIN")
        self.storage.put("half", True)

    async def await_inside_transaction(self):
        with self.storage.transaction():
            self.storage.put("slow", 1)
            await trio.sleep(5)
            self.storage.put("slow", 2)


@pytest.fixture
async def ledger(actor_host):
    return actor_host.bind("ledger", Ledger).get_by_name("l")


async def test_slow_model_call_does_not_block_a_read(autojump_clock, ledger):
    await ledger.slow_write("old", 0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ledger.slow_write, "new", 10)
        await trio.sleep(1)
        assert await ledger.read() == "old"
        assert trio.current_time() == pytest.approx(1)
    assert await ledger.read() == "new"


async def test_calls_interleave_only_at_awaits(autojump_clock, ledger):
    random.seed(7)
    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(ledger.increment_unguarded)
    lost = await run_in_actor(ledger, lambda agent: agent.storage.get("n"))
    assert lost == 1  # all twenty read 0 before any wrote: interleaving happens at the await


async def test_block_concurrency_while_closes_the_gate_across_awaits(autojump_clock, ledger):
    random.seed(7)
    results = []

    async def run():
        results.append(await ledger.increment_guarded())

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(run)
    assert sorted(results) == list(range(1, 21))
    assert await run_in_actor(ledger, lambda agent: agent.storage.get("n")) == 20
    assert await ledger.nested_guard() == "inner"


async def test_error_inside_block_concurrency_while_reopens_the_gate(autojump_clock, ledger):
    with pytest.raises(ValueError, match="guarded boom"):
        await ledger.guarded_failure()
    assert await ledger.read() is None


async def test_storage_work_of_concurrent_calls_never_overlaps(autojump_clock, ledger):
    random.seed(3)
    trace = []

    def install(agent):
        def tracer(cursor, sql, bindings):
            if sql.startswith("INSERT INTO assistant_config"):
                trace.append((trio.lowlevel.current_task(), bindings[0], bindings[1]))
            return True

        agent.storage.connection.exec_trace = tracer

    await run_in_actor(ledger, install)
    async with trio.open_nursery() as nursery:
        for call_no in range(10):
            nursery.start_soon(ledger.transfer, call_no)
    assert len(trace) == 90
    for start in range(0, 90, 3):  # each transaction's three statements are adjacent, from one task
        chunk = trace[start : start + 3]
        assert len({(task, call) for task, call, _ in chunk}) == 1
        assert [step for *_, step in chunk] == [f"{chunk[0][2][0]}.{part}" for part in range(3)]
    assert await run_in_actor(ledger, lambda a: a.storage.scalar("SELECT count(*) FROM assistant_config")) == 90


async def test_transaction_left_open_is_rolled_back_and_reported(ledger):
    with pytest.raises(TransactionLeftOpenError, match="ended inside a storage transaction") as info:
        await ledger.leave_transaction_open()
    assert info.value.status == 500
    assert await run_in_actor(ledger, lambda agent: (agent.storage.in_transaction, agent.storage.get("half"))) == (
        False,
        None,
    )


async def test_an_open_transaction_holds_new_calls_until_it_commits(autojump_clock, ledger):
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ledger.await_inside_transaction)
        await trio.sleep(1)
        assert await ledger.slow_write("quick", 0) == "quick"
        assert trio.current_time() == pytest.approx(5)
    assert await run_in_actor(ledger, lambda a: a.storage.list()) == {"slow": 2, "value": "quick"}


async def test_reply_waits_for_the_commit_of_a_transaction_it_wrote_into(autojump_clock, ledger):
    finished = {}

    async def early_caller():
        await ledger.slow_write("joined", 1)  # starts before the transaction, resumes inside it
        finished["early"] = trio.current_time()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(early_caller)
        await trio.sleep(0.5)
        nursery.start_soon(ledger.await_inside_transaction)
    assert finished == {"early": pytest.approx(5.5)}
    assert await ledger.read() == "joined"


async def test_reply_fails_when_the_transaction_it_wrote_into_rolls_back(autojump_clock, ledger):
    async def failing_transaction(agent):
        with agent.storage.transaction():
            agent.storage.put("doomed", 1)
            await trio.sleep(5)
            raise RuntimeError("abort")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ledger.slow_write, "early", 0.0)  # completes before the transaction
        await trio.sleep(0.1)

        async def early_then_joined():
            with pytest.raises(TransactionLeftOpenError, match="wrote inside another call's transaction"):
                await ledger.slow_write("joined", 1)

        nursery.start_soon(early_then_joined)
        await trio.sleep(0.5)
        with pytest.raises(RuntimeError, match="abort"):
            await run_in_actor(ledger, failing_transaction)
    assert await run_in_actor(ledger, lambda a: a.storage.list()) == {"value": "early"}


async def test_different_actors_run_concurrently(autojump_clock, actor_host):
    ns = actor_host.bind("ledger", Ledger)
    async with trio.open_nursery() as nursery:
        for name in "abc":
            nursery.start_soon(ns.get_by_name(name).slow_write, name, 10)
    assert trio.current_time() == pytest.approx(10)


async def test_caller_giving_up_does_not_cancel_the_actor_work(autojump_clock, ledger):
    with trio.move_on_after(1) as scope:
        await ledger.slow_write("late", 5)
    assert scope.cancelled_caught
    await trio.sleep(5)
    assert await ledger.read() == "late"


# -- mailbox ------------------------------------------------------------------------------


async def test_overloaded_actor_refuses_at_once(autojump_clock, actor_data_dir):
    async with open_host(actor_data_dir, max_pending_calls=3) as host:
        stub = host.bind("ledger", Ledger).get_by_name("l")
        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(stub.slow_write, i, 10 + i)
            await trio.sleep(1)
            with pytest.raises(ActorOverloadedError, match="calls are already pending") as info:
                await stub.read()
            assert info.value.status == 429 and trio.current_time() == pytest.approx(1)
            stats = host.statistics()
            assert (stats.overloads, stats.running, stats.queued) == (1, 3, 0)
        assert await stub.read() == 2
        assert host.statistics().overloads == 1


async def test_queued_calls_are_counted_while_the_gate_is_closed(autojump_clock, ledger, actor_host):
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ledger.increment_guarded)
        await trio.sleep(0.01)
        nursery.start_soon(ledger.read)
        nursery.start_soon(ledger.read)
        await trio.sleep(0.01)
        stats = actor_host.statistics()
        assert (stats.running, stats.queued) == (1, 2)


# -- closing ---------------------------------------------------------------------------------


async def test_calls_after_close_and_during_close_get_host_closed(autojump_clock, actor_data_dir):
    errors = []
    async with trio.open_nursery() as outer:
        async with open_host(actor_data_dir) as host:
            stub = host.bind("ledger", Ledger).get_by_name("l")

            async def caller():
                try:
                    await stub.slow_write("never", 10)
                except HostClosedError as exc:
                    errors.append(exc.status)

            outer.start_soon(caller)
            await trio.sleep(1)
    assert errors == [503]
    with pytest.raises(HostClosedError, match="the actor host is closed"):
        await stub.read()
    assert math.isclose(trio.current_time(), 1)


class _OtherClass(Agent):
    def hello(self):
        return "other"


async def test_binding_another_class_over_a_folders_actors_warns_once_naming_both(actor_data_dir, caplog):
    other = _OtherClass
    async with open_host(actor_data_dir) as host:
        await host.bind("ns", Notes).get_by_name("a").add("x")
        await host.bind("ns2", Notes).get_by_name("b").add("y")
    assert "written by" not in caplog.text  # a new folder: nothing to say
    async with open_host(actor_data_dir) as host:
        host.bind("ns", other)
        host.bind("ns2", Notes)  # the same class as before: silent
    warnings = [r.getMessage() for r in caplog.records if "written by" in r.getMessage()]
    assert warnings == [
        f"namespace 'ns' of {actor_data_dir} holds 1 actor written by {Notes.__module__}.Notes; "
        f"{other.__module__}._OtherClass serves them now (their files stay readable by either class)"]
    caplog.clear()
    async with open_host(actor_data_dir) as host:
        assert await host.bind("ns", other).get_by_name("a").hello() == "other"
    assert "written by" not in caplog.text  # recorded: the next start is quiet
