"""Testing your own agent: hibernation, eviction, alarms and restarts, in milliseconds.

Run it from the repository root::

    .venv/bin/python -m pytest examples/test_hibernation_example.py -q

(The normal test run, ``.venv/bin/python -m pytest -q``, collects it too.)

The runtime ships pytest-trio fixtures and helpers in ``runtime.testing``.
With them a test runs a real actor host on a temporary folder -- real
SQLite files, real hibernation -- and trio's ``autojump_clock`` skips every
wait: an hour of idleness, or an alarm due in ten minutes, passes at once.

The agent under test is a user's own: :class:`SupportAgent` is the stock
``SessionAgent`` (the Session API as actor methods) with a soul, a memory
and the skills in ``examples/skills``, plus one method of its own that sets
an alarm. What must hold, whatever the runtime does between two calls: the
frozen system prompt and the loaded skills are the same as before.
"""

from pathlib import Path

import trio

from actors import AlarmInfo, BlockConfig, SessionAgent, SessionConfig
from runtime import open_host

### fixtures: Import the runtime's fixtures into your test module
# actor_host is a running host on actor_data_dir (a temp folder);
# run_alarm fires an actor's alarm now. (A conftest.py can instead say
# pytest_plugins = ["runtime.testing"].) Tests are async: the project sets
# trio_mode = true for pytest-trio.
from runtime.testing import actor_data_dir, actor_host, run_alarm  # noqa: F401 (fixtures)

SKILLS = Path(__file__).resolve().parent / "skills"

### agent: The agent under test
# A SessionConfig says which blocks every session of the namespace gets.
# cached_prompt=True stores the frozen prompt in the actor's file, so it
# comes back unchanged after hibernation (good for prefix caches).

CONFIG = SessionConfig(
    blocks=(
        BlockConfig("soul", "readonly", text="You are the support agent of Example Ltd."),
        BlockConfig("memory", "writable", description="Facts about this customer", max_tokens=500),
        BlockConfig("skills", "skills", description="Loadable skills", path=SKILLS),
    ),
    cached_prompt=True,
    compaction=None,
)


class SupportAgent(SessionAgent):
    """One customer conversation per actor, with a follow-up reminder."""

    async def remind_in(self, seconds: float) -> int:
        """Set the actor's alarm ``seconds`` from now; returns its time (epoch ms)."""
        due = self.ctx.now_ms() + round(seconds * 1000)
        self.storage.set_alarm(due)
        return due

    async def alarm(self, info: AlarmInfo) -> None:
        # Runs as a turn of its own, waking the actor if it sleeps.
        await self.session.append_message(
            {"id": f"reminder-{info.scheduled_ms}", "role": "assistant",
             "parts": [{"type": "text", "text": "Reminder: follow up with the customer."}]}
        )


async def load_skill(stub, key: str) -> None:
    """What an agent loop does when the model calls load_context: run the
    tool, then store the call and its output as a tool part (that record is
    what restores the skill after a wake)."""
    call = {"label": "skills", "key": key}
    output = await stub.execute_tool("load_context", call)
    await stub.append_message({
        "id": f"load-{key}", "role": "assistant",
        "parts": [{"type": "tool-load_context", "toolCallId": f"call-{key}", "toolName": "load_context",
                   "state": "output-available", "input": call, "output": output}],
    })


async def start_conversation(stub) -> str:
    """A conversation in a known state; returns its frozen prompt."""
    await stub.append_message({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "My export fails."}]})
    prompt = await stub.freeze_system_prompt()
    await load_skill(stub, "incident-report")
    # A memory write does not change the frozen prompt (until a refresh).
    await stub.replace_context_block("memory", "Prefers email over phone.")
    return prompt


### idle: Idle actors hibernate -- and nothing changes for the caller
# Sleeping past idle_timeout_s (30 s by default) lets the host drop the
# actor and close its file. With autojump_clock the sleep is instant.


async def test_prompt_and_skills_survive_idle_hibernation(autojump_clock, actor_host):
    support = actor_host.bind("support", SupportAgent, env=CONFIG)
    stub = support.get_by_name("customer-42")
    prompt = await start_conversation(stub)
    assert actor_host.is_active(support, stub.id)

    await trio.sleep(actor_host.idle_timeout_s + 1)
    assert not actor_host.is_active(support, stub.id)
    assert actor_host.statistics().hibernations == 1

    # The next call wakes it from its file.
    assert await stub.freeze_system_prompt() == prompt
    assert "Prefers email" not in prompt
    assert await stub.get_loaded_skill_keys() == ["skills:incident-report"]
    assert (await stub.get_context_block("memory"))["content"] == "Prefers email over phone."
    assert [m["id"] for m in await stub.get_history()] == ["u1", "load-incident-report"]
    assert actor_host.statistics().activations == 2


### forced: Hibernate on demand, between any two calls
# host.hibernate(namespace, id) waits for pending calls, then drops the
# actor; host.hibernate_all() does it to every active actor.


async def test_forced_hibernation_changes_no_answer(actor_host):
    support = actor_host.bind("support", SupportAgent, env=CONFIG)
    stub = support.get_by_name("customer-7")
    prompt = await start_conversation(stub)
    before = (await stub.get_history(), await stub.tools(), await stub.search("export"))

    assert await actor_host.hibernate(support, stub.id) is True
    assert not actor_host.is_active(support, stub.id)
    assert (await stub.get_history(), await stub.tools(), await stub.search("export")) == before

    await load_skill(stub, "code-review")
    assert await actor_host.hibernate_all() == 1
    assert await stub.freeze_system_prompt() == prompt
    assert await stub.get_loaded_skill_keys() == ["skills:incident-report", "skills:code-review"]


### eviction: More actors than open files
# With max_active=1, waking a second actor evicts the least recently idle
# one. Open your own host (open_host) to choose such settings.


async def test_evicted_actor_comes_back_with_prompt_and_skills(autojump_clock, actor_data_dir):
    async with open_host(actor_data_dir, max_active=1) as host:
        support = host.bind("support", SupportAgent, env=CONFIG)
        first, second = support.get_by_name("customer-1"), support.get_by_name("customer-2")
        prompt = await start_conversation(first)

        await start_conversation(second)
        assert host.statistics().evictions == 1
        assert not host.is_active(support, first.id)

        assert await first.freeze_system_prompt() == prompt
        assert await first.get_loaded_skill_keys() == ["skills:incident-report"]
        assert host.statistics().evictions == 2  # waking the first evicted the second


### restart: A new process on the same folder
# Closing the host and opening another on the same data folder is what a
# crash-and-restart looks like to the actors.


async def test_state_survives_a_host_restart(actor_data_dir):
    async with open_host(actor_data_dir) as host:
        stub = host.bind("support", SupportAgent, env=CONFIG).get_by_name("customer-9")
        prompt = await start_conversation(stub)

    async with open_host(actor_data_dir) as host:
        stub = host.bind("support", SupportAgent, env=CONFIG).get_by_name("customer-9")
        assert await stub.freeze_system_prompt() == prompt
        assert await stub.get_loaded_skill_keys() == ["skills:incident-report"]


### alarms: Fire an alarm now, or let the clock get there
# run_alarm(stub) delivers the actor's alarm at once, whatever its time;
# it returns False when no alarm is set. Under autojump_clock an alarm
# also fires on its own, waking a hibernated actor.


async def test_alarm_fired_now_appends_the_reminder(actor_host):
    stub = actor_host.bind("support", SupportAgent, env=CONFIG).get_by_name("customer-3")
    due = await stub.remind_in(3600)

    assert await run_alarm(stub) is True
    last = (await stub.get_history())[-1]
    assert (last["id"], last["parts"][0]["text"]) == (f"reminder-{due}", "Reminder: follow up with the customer.")
    assert await run_alarm(stub) is False  # delivered alarms are removed


async def test_alarm_wakes_a_hibernated_actor(autojump_clock, actor_host):
    support = actor_host.bind("support", SupportAgent, env=CONFIG)
    stub = support.get_by_name("customer-5")
    prompt = await start_conversation(stub)
    due = await stub.remind_in(600)
    await actor_host.hibernate(support, stub.id)

    await trio.sleep(601)
    assert actor_host.statistics().alarms_run == 1
    assert [m["id"] for m in await stub.get_history()][-1] == f"reminder-{due}"
    assert await stub.freeze_system_prompt() == prompt
