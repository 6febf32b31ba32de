"""A client of several hosts: the URLs it takes, where it sends a call, and which calls move.

Real servers on loopback: in-process ones (a host and its app under
hypercorn) where the test must steer the server, and ``durable-sessions
serve`` processes where one is killed with ``kill -9`` during a call. Each
test's hosts are independent (no cluster): what is tested is the client.
"""

import functools
import json
from pathlib import Path

import httpx
import pytest
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from actors.session_agent import SessionAgent
from common.errors import ServerUnreachableError, ServiceUnavailableError, StorageUnavailableError
from common.wire import CLOSE_RECONNECT
from runtime import open_host
from runtime.api import METHODS
from runtime.client import SessionsClient
from runtime.client.failover import NOT_RETRY_SAFE, RETRY_SAFE, Endpoints, parse_retry_after, parse_urls
from runtime.server.app import bind_sessions, create_app
from tests.support.postgres import free_port
from tests.support.processes import kill_hard, server_process


def msg(message_id, text="hi"):
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


class Flaky(SessionAgent):
    """Answers 503 StorageUnavailableError (with Retry-After) while ``failing`` is set on the class."""

    failing = False
    appended_blocks = 0

    async def append_context_block(self, label, content):
        if Flaky.failing:
            raise StorageUnavailableError("the database cannot be reached")
        Flaky.appended_blocks += 1
        return await super().append_context_block(label, content)

    async def shout(self, text):
        self.broadcast(json.dumps({"type": "shout", "text": text}))
        return text


async def start_host(nursery, folder):
    """An in-process host and server on a free port: ``(url, host, SessionsServer)``."""
    host = await nursery.start(_run_host, folder)
    app = create_app(host)
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    urls = await nursery.start(functools.partial(hypercorn_serve, app, config))
    return urls[0], host, app.extensions["durable_sessions"]


async def _run_host(folder, task_status=trio.TASK_STATUS_IGNORED):
    async with open_host(folder) as host:
        bind_sessions(host, agent_class=Flaky)
        task_status.started(host)
        await trio.sleep_forever()


@pytest.fixture(autouse=True)
def not_failing():
    Flaky.failing, Flaky.appended_blocks = False, 0
    yield
    Flaky.failing = False


def dead_url():
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


# -- URLs and hints ------------------------------------------------------------------------------------


def test_urls_come_as_a_list_a_comma_separated_string_or_the_environment(monkeypatch):
    assert parse_urls("http://a:1, http://b:2/ ,http://a:1") == ("http://a:1", "http://b:2")
    assert parse_urls(["http://a:1", "https://b"]) == ("http://a:1", "https://b")
    monkeypatch.setenv("DURABLE_SESSIONS_URL", "http://x:1,http://y:2")
    assert SessionsClient().urls == ("http://x:1", "http://y:2")
    assert SessionsClient().url == "http://x:1"
    assert SessionsClient().retries == 6
    assert SessionsClient("http://x:1").retries == 0  # one URL: every failure is raised as before
    for bad in ("", " , ", "ftp://a", "a:1", ["http://a", 3]):
        with pytest.raises(ValueError):
            parse_urls(bad)
    with pytest.raises(ValueError, match="retries"):
        SessionsClient("http://a:1", retries=-1)


def test_retry_after_is_read_as_seconds():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-2") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after("nan") is None


def test_every_session_method_is_classified_for_retries():
    assert RETRY_SAFE.isdisjoint(NOT_RETRY_SAFE)
    assert RETRY_SAFE | NOT_RETRY_SAFE == set(METHODS)


def test_owner_hints_only_name_listed_urls_and_fall_away_with_a_failed_host():
    endpoints = Endpoints(["http://a:1", "http://b:2", "http://c:3"])
    assert endpoints.pick("s1") == "http://a:1"
    endpoints.learn_owner("s1", "http://b:2/")
    endpoints.learn_owner("s2", "http://elsewhere:9")  # not listed: the token never goes there
    assert endpoints.pick("s1") == "http://b:2"
    assert endpoints.pick("s2") == "http://a:1"
    assert endpoints.pick("s1", avoid="http://b:2") == "http://a:1"
    endpoints.failed("http://a:1")
    assert endpoints.pick("s2") == "http://b:2"  # a is cooling down
    endpoints.failed("http://b:2")
    assert endpoints.owner_of("s1") is None
    assert endpoints.pick("s1") == "http://c:3"
    endpoints.failed("http://c:3")
    assert endpoints.all_failed()
    assert endpoints.pick(None) == "http://a:1"  # all failed: the one that failed longest ago
    endpoints.answered("http://b:2")
    assert endpoints.pick(None) == "http://b:2"


# -- moving between hosts ------------------------------------------------------------------------------


async def test_a_host_that_refuses_connections_is_passed_over(nursery, tmp_path):
    url, host, _ = await start_host(nursery, tmp_path / "a")
    dead = dead_url()
    async with SessionsClient([dead, url]) as client:
        s = client.session("s")
        assert await s.append_message(msg("m1")) is True
        assert await s.append_context_block("memory", "tea") is not None  # not retry-safe; never sent to dead
        assert client.endpoints.pick(None) == url
        assert [m["id"] for m in await s.get_history()] == ["m1"]
    assert Flaky.appended_blocks == 1


async def test_no_host_answering_raises_the_connect_error_within_bounds(tmp_path):
    async with SessionsClient([dead_url(), dead_url()], retries=4) as client:
        started = trio.current_time()
        with pytest.raises(ServerUnreachableError) as raised:
            await client.session("s").get_history()
        assert raised.value.urls == client.urls and isinstance(raised.value.__context__, httpx.ConnectError)
        assert trio.current_time() - started < 5


async def test_a_host_shutting_down_sends_every_call_elsewhere(nursery, tmp_path):
    url_a, host_a, server_a = await start_host(nursery, tmp_path / "a")
    url_b, host_b, _ = await start_host(nursery, tmp_path / "b")
    server_a.closing.set()  # 503 ServiceUnavailableError, Retry-After: the call did not run
    async with SessionsClient([url_a, url_b], retries=2) as client:
        s = client.session("s")
        block = await s.append_context_block("memory", "tea")  # not retry-safe, yet it moves: it never ran
        assert block["content"] == "tea"
    async with SessionsClient([url_a]) as lone:  # one URL: raised at once, as before
        with pytest.raises(ServiceUnavailableError):
            await lone.session("s").get_history()
    assert Flaky.appended_blocks == 1
    assert host_a.statistics().calls == 0 and host_b.statistics().calls >= 1


async def test_a_503_whose_call_may_have_run_repeats_only_retry_safe_calls(nursery, tmp_path):
    url_a, _, _ = await start_host(nursery, tmp_path / "a")
    url_b, _, _ = await start_host(nursery, tmp_path / "b")
    Flaky.failing = True
    async with SessionsClient([url_a, url_b], retries=3, failover_s=10) as client:
        s = client.session("s")
        with pytest.raises(StorageUnavailableError):
            await s.append_context_block("memory", "tea")
        started = trio.current_time()
        assert await s.append_message(msg("m1")) is True  # safe: it goes on (and is stored)
        assert trio.current_time() - started < 1  # no 503 on the way, nothing waited
        assert await s.call("shout", "x") == "x"
    assert Flaky.appended_blocks == 0


async def test_a_killed_host_moves_retry_safe_calls_and_raises_the_rest(tmp_path):
    app = ["--app", "tests.runtime.client.test_failover:Slow"]
    with server_process(tmp_path / "a", extra=app) as a, server_process(tmp_path / "b", extra=app) as b:
        async with SessionsClient([a.url, b.url]) as client:
            s = client.session("s")
            results = {}

            async def slow_append():
                results["append"] = await s.append_message(msg("m1"))

            async def slow_call():
                try:
                    await s.call("slow", 5)
                except httpx.TransportError as exc:
                    results["slow"] = exc

            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow_append)
                nursery.start_soon(slow_call)
                await wait_for_file(a.data_dir, 2)  # both calls are inside host a
                kill_hard(a)
        assert results["append"] is True  # repeated at b: stored there
        assert isinstance(results["slow"], httpx.TransportError)  # may have run: raised, not repeated
        async with SessionsClient(b.url) as only_b:
            assert [m["id"] for m in await only_b.session("s").get_history()] == ["m1"]


class Slow(SessionAgent):
    """Marks each call it starts in ``<data>/started-*``; an append takes 3 s."""

    def _mark(self, what):
        folder = Path(self.ctx.storage.path).parent.parent.parent
        (folder / f"started-{what}").write_text("1")

    async def append_message(self, message, parent_id=None):
        self._mark("append")
        await trio.sleep(3)
        return await super().append_message(message)

    async def slow(self, seconds):
        self._mark("slow")
        await trio.sleep(seconds)
        return seconds


async def wait_for_file(folder, count):
    with trio.fail_after(10):
        while len(list(folder.glob("started-*"))) < count:
            await trio.sleep(0.02)


# -- WebSockets ----------------------------------------------------------------------------------------


async def test_a_socket_closed_with_1012_connects_again_and_keeps_receiving(nursery, tmp_path):
    url, host, _ = await start_host(nursery, tmp_path / "a")
    namespace = host.namespace("sessions")
    async with SessionsClient(url) as client:
        s = client.session("live")
        async with s.events() as events:
            await s.call("shout", "one")
            assert (await events.__anext__())["text"] == "one"
            (peer,) = host.connections_of(namespace.id_from_name("live"))
            peer.close(CLOSE_RECONNECT, "the owner moved")
            with trio.fail_after(5):
                while events.reconnects == 0 or len(host.connections_of(namespace.id_from_name("live"))) != 1:
                    await trio.sleep(0.01)
            await s.call("shout", "two")
            assert (await events.__anext__())["text"] == "two"
            assert events.reconnects == 1
        async with s.events(reconnect=False) as events:
            (peer,) = host.connections_of(namespace.id_from_name("live"))
            peer.close(CLOSE_RECONNECT, "the owner moved")
            with trio.fail_after(5):
                assert [e async for e in events] == []
            assert events.reconnects == 0
