"""A failing skill-restore walk, on a real host: the call that needed it fails with a
clear error (503, ``SkillRestoreError``), the session's other routes keep working,
and the next call -- or the alarm's retry -- walks again and succeeds.

The failure is SQLite's own: an exec tracer on the actor's connection aborts the
walk's statement once (``apsw.ExecTraceAbort``), as an I/O error would.
"""

import json

import pytest
import trio

from actors.session_agent import BlockConfig, SessionAgent, SessionConfig
from actors.skills import DirectorySkillProvider, SkillTracker
from common.errors import SkillRestoreError
from runtime import open_host
from runtime.server.app import bind_sessions, create_app
from runtime.testing import run_alarm, run_in_actor
from storage.context import delete_config

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
S = "/v1/sessions/chat-1"


class SkillAlarmAgent(SessionAgent):
    """A session actor whose alarm reads the loaded skills, as an app's periodic job might."""

    async def alarm(self, info):
        self.storage.put("alarm_saw", [info.retry_count, list(await self.session.get_loaded_skill_keys())])


def load_part(key, tool="load_context"):
    return {"type": f"tool-{tool}", "toolName": tool, "toolCallId": f"{tool}-{key}", "state": "output-available",
            "input": {"label": "skills", "key": key}, "output": f"How to {key}."}


def assistant(mid, *parts):
    return {"id": mid, "role": "assistant", "parts": list(parts)}


def fail_walks(times):
    """In the actor: abort the next ``times`` statements of the restore walk (one per walk)."""

    def install(agent):
        left = [times]

        def tracer(cursor, sql, bindings):
            if "w.n < ?3 AND w.used" in sql and left[0] > 0:  # MessageStore.path_chunks
                left[0] -= 1
                return False
            return True

        agent.storage.connection.exec_trace = tracer

    return install


async def forget_saved_set(host, ns, stub):
    """Drop the loaded-skill row and hibernate: the next wake finds a session like an import."""
    await run_in_actor(stub, lambda agent: delete_config(agent.storage, "", SkillTracker.CONFIG_KEY))
    assert await host.hibernate(ns, stub.id) is True


@pytest.fixture
async def skills_config(tmp_path):
    provider = DirectorySkillProvider(tmp_path / "skills")
    for key in ("deploy", "review", "pirate"):
        await provider.set(key, f"How to {key}.", f"The {key} skill")
    return SessionConfig(blocks=(BlockConfig("skills", "skills", path=tmp_path / "skills"),), compaction=None)


async def request(client, method, path, body=None):
    response = await client.open(path, method=method, headers=AUTH, data=None if body is None else json.dumps(body),
                                 scope_base={"raw_path": path.encode("ascii")})
    return response.status_code, json.loads(await response.get_data())


async def test_a_failed_walk_fails_that_call_only_and_the_next_call_walks_again(tmp_path, skills_config):
    async with open_host(tmp_path / "data") as host:
        ns = bind_sessions(host, skills_config, agent_class=SkillAlarmAgent)
        client = create_app(host, token=TOKEN).test_client()
        history = [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "ship it"}]},
                   assistant("a1", load_part("deploy")), assistant("a2", load_part("review")),
                   assistant("a3", load_part("review", "unload_context"))]
        assert (await request(client, "POST", f"{S}/messages:batch", {"messages": history}))[0] == 201
        stub = ns.get_by_name("chat-1")
        await forget_saved_set(host, ns, stub)
        await run_in_actor(stub, fail_walks(1))

        status, body = await request(client, "GET", f"{S}/skills")
        assert status == 503
        assert body["error"]["type"] == "SkillRestoreError"
        assert body["error"]["message"].startswith(
            "restoring the loaded skills of session '' from its history failed (ExecTraceAbort: "
        )
        assert body["error"]["message"].endswith("nothing was written, the next call tries again")
        # Every other route of the session works meanwhile.
        status, body = await request(client, "GET", f"{S}/messages")
        assert (status, [m["id"] for m in body["messages"]]) == (200, ["u1", "a1", "a2", "a3"])
        status, _ = await request(client, "POST", f"{S}/messages",
                                  {"message": {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "ok"}]}})
        assert status == 201
        # The next call walks again.
        assert await request(client, "GET", f"{S}/skills") == (200, {"loaded": ["skills:deploy"]})

        # A write whose skill note meets a failing walk still succeeds; the walk that
        # later restores the set reads that write from the file.
        await forget_saved_set(host, ns, stub)
        await run_in_actor(stub, fail_walks(1))
        status, _ = await request(client, "POST", f"{S}/messages", {"message": assistant("a4", load_part("pirate"))})
        assert status == 201
        assert await request(client, "GET", f"{S}/skills") == (200, {"loaded": ["skills:deploy", "skills:pirate"]})

        stats = host.statistics()
        assert (stats.failed_activations, stats.activations) == (0, 3)


async def test_an_alarm_whose_walk_fails_succeeds_on_its_retry(tmp_path, skills_config, autojump_clock):
    async with open_host(tmp_path / "data") as host:
        ns = bind_sessions(host, skills_config, agent_class=SkillAlarmAgent)
        stub = ns.get_by_name("chat-1")
        await stub.append_messages([assistant("a1", load_part("deploy")), assistant("a2", load_part("review"))])
        await forget_saved_set(host, ns, stub)
        await run_in_actor(stub, fail_walks(1))
        await run_in_actor(stub, lambda agent: agent.storage.set_alarm(agent.ctx.now_ms() + 3_600_000))

        with pytest.raises(SkillRestoreError):
            await run_alarm(stub)  # the first run fails; its retry is scheduled 2 s later
        await trio.sleep(10)
        assert await run_in_actor(stub, lambda agent: agent.storage.get("alarm_saw")) == [
            1, ["skills:deploy", "skills:review"]
        ]
        assert await run_in_actor(stub, lambda agent: agent.storage.get_alarm()) is None
