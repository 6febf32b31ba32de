"""runtime.testing_asyncio: the test helpers from asyncio (and trio) test suites, the host in its own thread.

``@pytest.mark.anyio`` tests run once under asyncio and once under trio;
one test uses pytest-asyncio with the synchronous fixture.
"""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest
import trio
import trio.lowlevel

from actors import AlarmInfo, BlockConfig, SessionAgent, SessionConfig
from common.errors import UnknownMethodError
from runtime.testing_asyncio import (
    ThreadedHost,
    list_actor_ids,
    open_threaded_host,
    run_alarm,
    run_in_actor,
    threaded_actor_host,  # noqa: F401 (fixture)
    threaded_host,
)

SKILLS = Path(__file__).resolve().parents[2] / "examples" / "skills"
CONFIG = SessionConfig(
    blocks=(
        BlockConfig("soul", "readonly", text="You are the support agent."),
        BlockConfig("memory", "writable", description="Facts", max_tokens=500),
        BlockConfig("skills", "skills", description="Loadable skills", path=SKILLS),
    ),
    cached_prompt=True,
    compaction=None,
)


class Support(SessionAgent):
    async def remind_in(self, seconds: float) -> int:
        due = self.ctx.now_ms() + round(seconds * 1000)
        self.storage.set_alarm(due)
        return due

    async def alarm(self, info: AlarmInfo) -> None:
        await self.session.append_message({"id": f"reminder-{info.scheduled_ms}", "role": "assistant",
                                           "parts": [{"type": "text", "text": "Follow up."}]})

    async def wait(self, seconds: float) -> float:
        await trio.sleep(seconds)  # actor code runs in the host's trio thread
        return seconds


async def start(stub) -> str:
    """A conversation with a loaded skill and a memory write; its frozen prompt."""
    await stub.append_message({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "My export fails."}]})
    prompt = await stub.freeze_system_prompt()
    call = {"label": "skills", "key": "incident-report"}
    output = await stub.execute_tool("load_context", call)
    await stub.append_message({"id": "a1", "role": "assistant", "parts": [
        {"type": "tool-load_context", "toolCallId": "c1", "toolName": "load_context", "state": "output-available",
         "input": call, "output": output}]})
    await stub.replace_context_block("memory", "Prefers email.")
    return prompt


pytestmark = pytest.mark.anyio


async def test_forced_hibernation_changes_no_answer(anyio_backend, tmp_path):
    async with open_threaded_host(tmp_path / "actors") as host:
        support = host.bind("support", Support, env=CONFIG)
        stub = support.get_by_name("customer-1")
        prompt = await start(stub)
        before = (await stub.get_history(), await stub.tools(), await stub.search("export"))
        assert host.is_active(support, stub.id) and host.is_active("support", stub.id.hex)

        assert await host.hibernate(support, stub.id) is True
        assert not host.is_active(support, stub.id)
        assert (await stub.get_history(), await stub.tools(), await stub.search("export")) == before
        assert await stub.freeze_system_prompt() == prompt
        assert await stub.get_loaded_skill_keys() == ["skills:incident-report"]
        assert await host.hibernate_all() == 1
        stats = host.statistics()
        assert (stats.activations, stats.hibernations, stats.active) == (2, 2, 0)
        assert list_actor_ids(support) == [stub.id]


async def test_eviction_and_restart(anyio_backend, tmp_path):
    data = tmp_path / "actors"
    async with open_threaded_host(data, max_active=1) as host:
        support = host.bind("support", Support, env=CONFIG)
        first, second = support.get_by_name("customer-1"), support.get_by_name("customer-2")
        prompt = await start(first)
        await start(second)
        assert host.statistics().evictions == 1
        assert not host.is_active(support, first.id)
        assert await first.freeze_system_prompt() == prompt
        assert host.statistics().evictions == 2

    async with open_threaded_host(data) as host:  # a new process on the same folder
        stub = host.bind("support", Support, env=CONFIG).get_by_name("customer-1")
        assert await stub.freeze_system_prompt() == prompt
        assert await stub.get_loaded_skill_keys() == ["skills:incident-report"]
        assert (await stub.get_context_block("memory"))["content"] == "Prefers email."


async def test_alarms_fire_now_or_when_the_mock_clock_gets_there(anyio_backend, tmp_path):
    async with open_threaded_host(tmp_path / "actors", mock_clock=True) as host:
        support = host.bind("support", Support, env=CONFIG)
        stub = support.get_by_name("customer-3")
        due = await stub.remind_in(3600)
        assert await run_alarm(stub) is True
        assert [m["id"] for m in await stub.get_history()] == [f"reminder-{due}"]
        assert await run_alarm(stub) is False

        due = await stub.remind_in(600)
        await host.hibernate(support, stub.id)
        await host.advance(599)
        assert host.statistics().alarms_run == 1
        await host.advance(2)
        assert host.statistics().alarms_run == 2
        assert [m["id"] for m in await stub.get_history()][-1] == f"reminder-{due}"


async def test_idle_hibernation_follows_the_mock_clock(anyio_backend, tmp_path):
    async with open_threaded_host(tmp_path / "actors", mock_clock=True, idle_timeout_s=30) as host:
        support = host.bind("support", Support, env=CONFIG)
        stub = support.get_by_name("customer-4")
        prompt = await start(stub)
        await host.advance(29)
        assert host.is_active(support, stub.id)
        await host.advance(2)
        assert not host.is_active(support, stub.id)
        assert host.statistics().hibernations == 1
        assert await stub.freeze_system_prompt() == prompt


async def test_run_in_actor_errors_and_cancellation(anyio_backend, tmp_path):
    async with open_threaded_host(tmp_path / "actors") as host:
        stub = host.bind("support", Support, env=CONFIG).get_by_name("customer-5")
        await stub.append_message({"id": "m1", "role": "user", "parts": []})
        assert await run_in_actor(stub, lambda agent: Path(agent.storage.path).name) == f"{stub.id.hex}.sqlite3"

        async def in_trio(agent):
            await trio.lowlevel.checkpoint()
            return await agent.session.get_path_length()

        assert await run_in_actor(stub, in_trio) == 1
        with pytest.raises(UnknownMethodError, match="actor class Support has no callable method 'nope'"):
            await stub.nope()
        with anyio.fail_after(5), anyio.move_on_after(0.2) as scope:  # the caller stops waiting at once...
            await stub.wait(30)
        assert scope.cancelled_caught
        assert host.statistics().running == 1  # ...while the turn goes on, as with a caller of the host itself
        assert await stub.wait(0) == 0  # and other calls still run (they interleave where the turn awaits)
        with pytest.raises(RuntimeError, match="advance\\(\\) needs a host started with mock_clock=True"):
            await host.advance(1)


def test_the_host_serves_plain_threads_too(tmp_path):
    with threaded_host(tmp_path / "actors") as host:
        stub = host.bind("support", Support, env=CONFIG).get_by_name("customer-6")
        answers = []

        def caller(number: int) -> None:
            answers.append(anyio.run(stub.append_message, {"id": f"m{number}", "role": "user", "parts": []}))

        threads = [threading.Thread(target=caller, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert answers == [True] * 4
        assert sorted(m["id"] for m in anyio.run(stub.get_history)) == ["m0", "m1", "m2", "m3"]
        assert host.statistics().calls == 5


@pytest.mark.asyncio
async def test_the_fixture_serves_pytest_asyncio(threaded_actor_host: ThreadedHost):  # noqa: F811 (the fixture)
    stub = threaded_actor_host.bind("support", Support, env=CONFIG).get_by_name("customer-7")
    prompt = await start(stub)
    await threaded_actor_host.hibernate("support", stub.id)
    assert await stub.freeze_system_prompt() == prompt
    assert threaded_actor_host.data_dir.name == "actors"
