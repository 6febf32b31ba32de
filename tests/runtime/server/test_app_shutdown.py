"""Graceful shutdown of ``serve``: running calls finish, sockets close with 1001, then it returns."""

import pytest
import trio

from actors.session_agent import SessionAgent
from common.errors import ServerUnreachableError
from runtime import open_host
from runtime.client import SessionsClient
from runtime.server.app import bind_sessions, serve
from runtime.server.config import ServerSettings


class Slow(SessionAgent):
    async def slow(self, seconds):
        await trio.sleep(seconds)
        await self.append_message({"id": f"after-{seconds}", "role": "user", "parts": []})
        return "finished"


async def test_shutdown_lets_running_calls_finish_and_closes_sockets(tmp_path):
    stop = trio.Event()
    outcome = {}
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host, agent_class=Slow)
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(lambda task_status: serve(
                host, ServerSettings(bind="127.0.0.1:0", graceful_timeout_s=5), shutdown_trigger=stop.wait,
                task_status=task_status))
            async with SessionsClient(urls[0]) as client:
                s = client.session("busy")

                async def running_call():
                    outcome["call"] = await s.call("slow", 0.5)

                async def listener():
                    async with s.events() as events:
                        outcome["listening"] = True
                        outcome["events"] = [event async for event in events]
                        outcome["closed"] = events._closed.code

                nursery.start_soon(listener)
                nursery.start_soon(running_call)
                await trio.sleep(0.2)
                assert outcome.get("listening") is True and "call" not in outcome
                stop.set()
                with trio.fail_after(5):
                    while "closed" not in outcome or "call" not in outcome:
                        await trio.sleep(0.01)
                assert outcome["call"] == "finished"
                assert outcome["closed"] == 1001
            async with SessionsClient(urls[0]) as late:
                with pytest.raises(ServerUnreachableError):
                    await late.session("late").get_history()  # no longer listening
        # serve returned: the nursery closed without cancelling it
        stub = host.namespace("sessions").get_by_name("busy")
        assert [m["id"] for m in await stub.get_history()] == ["after-0.5"]
