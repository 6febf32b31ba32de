"""Three real ``serve --cluster`` hosts on one Postgres: any host answers any session, as one host would.

What is checked here, over HTTP and WebSockets from outside the processes:

* a session written through one host reads the same through the others,
  errors included, and the owner's URL comes back in ``X-Durable-Sessions-Owner``;
* 1,000 concurrent first calls for one new session, spread over the three
  hosts, activate it exactly once cluster-wide (counted by the actor class
  itself, :mod:`tests.cluster.apps`) and all land;
* a request that was already forwarded once is answered 503 by a host that
  is not the owner, never forwarded again;
* WebSockets opened on any host reach the owner: RPC over a relayed socket,
  and broadcasts reach the sockets of every host;
* a client of several URLs sends a session's calls straight to its owner.
"""

from __future__ import annotations

import httpx
import pytest
import trio

from common.errors import InvalidMessageError, MessageNotFoundError, NotOwnerError
from common.wire import HOP_HEADER, OWNER_HEADER
from runtime.client import SessionsClient
from tests.support.cluster_hosts import await_until, run_cluster

pytestmark = pytest.mark.slow


def msg(message_id, text="hello", role="user"):
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}


@pytest.fixture
def cluster(tmp_path, pg_empty_dsn):
    with run_cluster(tmp_path, pg_empty_dsn, hosts=3, lease_s=2.0) as cluster:
        yield cluster


async def test_any_host_answers_any_session_as_one_host_would(cluster):
    h1, h2, h3 = cluster.hosts
    async with SessionsClient(h1.url) as c1, SessionsClient(h2.url) as c2, SessionsClient(h3.url) as c3:
        assert await c1.session("chat").append_messages([msg("m1"), msg("m2", "hi", "assistant")]) == [True, True]
        assert await c3.session("chat").append_message(msg("m3", "booking ZFA04Y")) is True
        assert await c2.session("chat").append_message(msg("m3", "again")) is False  # the id is stored: not again
        for client in (c1, c2, c3):
            s = client.session("chat")
            assert [m["id"] for m in await s.get_history()] == ["m1", "m2", "m3"]
            assert [h["id"] for h in await s.search("zfa04y")] == ["m3"]
            assert await s.get_message("nope") is None
            with pytest.raises(MessageNotFoundError):
                await s.update_message(msg("nope"))
            with pytest.raises(InvalidMessageError):
                await s.append_message({"id": "x"})
        await c2.session("chat").replace_context_block("memory", "likes tea")
        assert (await c3.session("chat").get_context_block("memory"))["content"] == "likes tea"
    async with httpx.AsyncClient(timeout=60) as http:
        for host in cluster.hosts:
            response = await http.get(f"{host.url}/v1/sessions/chat/messages:count")
            assert (response.status_code, response.json(), response.headers[OWNER_HEADER]) == (
                200, {"count": 3}, h1.url)
    chat = [line for line in cluster.events("activations")]
    assert len(chat) == 1, chat  # one activation, at h1: the others forwarded


async def test_a_thousand_concurrent_first_calls_activate_the_session_once(cluster):
    """1,000 first calls at once, a third through each host: one activation, and every call ran in that one
    process (each tenth call appends, the others ask the actor for its process id)."""
    answers = []
    limits = httpx.Limits(max_connections=24)  # the 1,000 calls queue in the client; the hosts see 8 connections each
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:

        async def call(i):
            host = cluster.hosts[i % 3]
            if i % 10 == 0:
                body = {"method": "append_message", "params": [msg(f"m{i:04d}")]}
            else:
                body = {"method": "pid"}
            for _ in range(100):  # 429/503 refusals were not run: call again, as a client does (a busy machine queues)
                response = await http.post(f"{host.url}/v1/sessions/crowd/rpc", json=body)
                if response.status_code not in (429, 503) or "Retry-After" not in response.headers:
                    break
                await trio.sleep(min(float(response.headers["Retry-After"]), 1.0))
            answers.append((i, response.status_code, response.json()))

        async with trio.open_nursery() as nursery:
            for i in range(1000):
                nursery.start_soon(call, i)
    assert [a for a in answers if a[1] != 200] == []
    assert all(body["result"] is True for i, _, body in answers if i % 10 == 0)
    pids = {body["result"] for i, _, body in answers if i % 10}
    owner = cluster.owner_of("crowd")
    assert pids == {owner.process.pid}  # every call ran at the owner; the others forwarded
    activations = cluster.events("activations")
    assert len(activations) == 1, activations
    assert int(activations[0][0]) == owner.process.pid
    async with SessionsClient(cluster.urls) as client:
        history = await client.session("crowd").get_history()
    assert sorted(m["id"] for m in history) == [f"m{i:04d}" for i in range(0, 1000, 10)]


async def test_managers_answer_on_any_host_too(cluster):
    h1, h2, h3 = cluster.hosts
    async with SessionsClient(h1.url) as c1, SessionsClient(h2.url) as c2, SessionsClient(h3.url) as c3:
        created = await c1.manager("user-7").create("trip")
        session_id = created["id"]
        await c2.manager("user-7").append(session_id, msg("m1", "booking ZFA04Y"))
        for client in (c1, c2, c3):
            manager = client.manager("user-7")
            assert [row["id"] for row in await manager.list()] == [session_id]
            assert [m["id"] for m in await manager.get_history(session_id)] == ["m1"]
            assert [hit["id"] for hit in await manager.search("zfa04y")] == ["m1"]
    async with httpx.AsyncClient(timeout=60) as http:
        answers = [await http.get(f"{host.url}/v1/managers/user-7/sessions") for host in cluster.hosts]
    assert {a.headers[OWNER_HEADER] for a in answers} == {h1.url}
    forwarded = await _forwarded(h1, h2, h3)
    assert forwarded[0] == 0 and forwarded[1] > 0 and forwarded[2] > 0
    async with SessionsClient([h2.url, h3.url, h1.url]) as client:  # learns where the manager lives
        await client.manager("user-7").list()
        assert client.endpoints.owner_of("m/user-7") == h1.url
        await client.manager("user-7").get_history(session_id)
    assert await _forwarded(h1, h2, h3) == [forwarded[0], forwarded[1] + 1, forwarded[2]]


async def test_reads_of_a_session_never_written_activate_nothing(cluster):
    async with httpx.AsyncClient(timeout=60) as http:
        for host in cluster.hosts:
            for path, body in (("messages", {"messages": []}), ("messages:count", {"count": 0}),
                               ("search?q=tea", {"results": []}), ("messages:leaf", {"message": None})):
                response = await http.get(f"{host.url}/v1/sessions/ghost/{path}")
                assert (response.status_code, response.json()) == (200, body)
                assert OWNER_HEADER not in response.headers
    assert cluster.events("activations") == []
    async with SessionsClient(cluster.urls) as client:
        assert await client.session("ghost").append_message(msg("m1")) is True
        assert await client.session("ghost").get_path_length() == 1
    assert len(cluster.events("activations")) == 1


async def test_a_forwarded_request_is_never_forwarded_again(cluster):
    h1, h2, _ = cluster.hosts
    async with SessionsClient(h1.url) as client:
        await client.session("hop").append_message(msg("m1"))
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.get(f"{h2.url}/v1/sessions/hop/messages", headers={HOP_HEADER: "test"})
        assert response.status_code == 503
        assert response.json()["error"]["type"] == NotOwnerError.__name__
        assert int(response.headers["Retry-After"]) >= 1
        direct = await http.get(f"{h1.url}/v1/sessions/hop/messages", headers={HOP_HEADER: "test"})
        assert direct.status_code == 200 and [m["id"] for m in direct.json()["messages"]] == ["m1"]


async def test_a_client_of_several_hosts_goes_straight_to_the_owner(cluster):
    h1, h2, h3 = cluster.hosts
    async with SessionsClient(h3.url) as first:
        await first.session("direct").append_message(msg("m1"))  # h3 owns it
    async with SessionsClient([h1.url, h2.url, h3.url]) as client:
        s = client.session("direct")
        await s.get_history()  # via h1, forwarded; the answer names h3
        assert client.endpoints.owner_of("direct") == h3.url
        forwarded_before = await _forwarded(h1, h2)
        for i in range(20):
            await s.append_message(msg(f"n{i}"))
        assert await _forwarded(h1, h2) == forwarded_before  # nothing went through h1 or h2
        assert await s.get_path_length() == 21


async def _forwarded(*hosts):
    """How many requests and sockets each host sent on to an owner (``GET /v1/actors``)."""
    async with httpx.AsyncClient(timeout=60) as http:
        return [(await http.get(f"{h.url}/v1/actors")).json()["cluster"]["forwarded"] for h in hosts]


async def test_sockets_on_every_host_reach_the_owner_and_get_its_broadcasts(cluster):
    h1, h2, h3 = cluster.hosts
    async with SessionsClient(h1.url) as c1, SessionsClient(h2.url) as c2, SessionsClient(h3.url) as c3:
        await c1.session("room").append_message(msg("m1"))  # h1 owns it
        async with c1.session("room").events() as e1, c2.session("room").events() as e2, \
                c3.session("room").websocket() as e3:
            assert await e3.call("get_path_length") == 1  # RPC over the relay h3 -> h1
            assert await e3.call("shout", "from h3") == "from h3"
            await c2.session("room").call("shout", "from h2 over http")
            for events in (e1, e2, e3):
                got = []
                with trio.fail_after(10):
                    async for event in events:
                        if event.get("type") == "shout":
                            got.append(event["text"])
                        if len(got) == 2:
                            break
                assert got == ["from h3", "from h2 over http"]
            await c3.session("room").append_message(msg("m2"))
            for events in (e1, e2, e3):  # the Session's own broadcast of the append
                with trio.fail_after(10):
                    async for event in events:
                        if event.get("type") == "cf_agent_session":
                            break


async def test_a_relayed_socket_is_moved_when_the_owner_dies(cluster):
    h1, h2, h3 = cluster.hosts
    async with SessionsClient(h1.url) as c1:
        await c1.session("moving").append_message(msg("m1"))  # h1 owns it
    async with SessionsClient([h2.url, h3.url], timeout=20) as client:
        s = client.session("moving")
        async with s.events() as events:
            await s.call("shout", "before")
            with trio.fail_after(10):
                assert (await events.__anext__())["text"] == "before"
            h1.kill()
            # The relay sees its owner go and closes the socket with 1012; the socket connects again and
            # is held by h2 or h3 once h1's lease ran out.
            await await_until(lambda: events.reconnects >= 1, 20, "the socket to connect again")
            assert await s.call("shout", "after") == "after"
            with trio.fail_after(10):
                assert (await events.__anext__())["text"] == "after"
            assert [m["id"] for m in await s.get_history()] == ["m1"]
    assert cluster.owner_of("moving", via=h2) in (h2, h3)


async def test_a_host_that_knows_the_owner_still_checks_the_token_and_the_body_limit(tmp_path, pg_empty_dsn):
    config = tmp_path / "sessions.toml"
    config.write_text("[server]\nmax_body_bytes = 4096\n")
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=2.0, token="t0ken",
                     extra=["--config", str(config)]) as cluster:
        h1, h2 = cluster.hosts
        good = {"Authorization": "Bearer t0ken"}
        async with httpx.AsyncClient(timeout=30) as http:
            first = await http.post(f"{h1.url}/v1/sessions/guarded/messages", json={"message": msg("m1")},
                                    headers=good)
            assert first.status_code == 201
            for _ in range(2):  # the first through h2 learns the owner; the second uses what it learned
                read = await http.get(f"{h2.url}/v1/sessions/guarded/messages", headers=good)
                assert (read.status_code, read.headers[OWNER_HEADER]) == (200, h1.url)
            wrong = await http.get(f"{h2.url}/v1/sessions/guarded/messages", headers={"Authorization": "Bearer no"})
            assert (wrong.status_code, wrong.json()["error"]["type"]) == (401, "UnauthorizedError")
            big = await http.post(f"{h2.url}/v1/sessions/guarded/messages", headers=good,
                                  json={"message": msg("m2", "x" * 5000)})
            assert (big.status_code, big.json()["error"]["type"]) == (413, "PayloadTooLargeError")
            packed = await http.get(f"{h2.url}/v1/sessions/guarded/messages/nope",
                                    headers={**good, "Accept": "application/msgpack"})
            assert (packed.status_code, packed.headers["content-type"]) == (404, "application/msgpack")
            metrics = (await http.get(f"{h2.url}/metrics", headers=good)).text
            assert 'route="GET /v1/sessions/{id}/messages",status="200"} 2.0' in metrics
            stats = (await http.get(f"{h2.url}/v1/actors", headers=good)).json()["cluster"]
            assert stats["forwarded"] == 3  # the two reads and the 404; 401 and 413 were answered at h2


async def test_idle_sockets_stay_open_while_their_session_sleeps_and_get_its_broadcasts(tmp_path, pg_empty_dsn):
    """The session hibernates again and again (idle timeout 0.2 s) but its owner keeps it while it holds
    sockets: they are not closed (no reconnects), and the next call, on any host, wakes it at that owner and
    its broadcast reaches them. Once the sockets are gone, the owner gives the session up."""
    with run_cluster(tmp_path, pg_empty_dsn, hosts=2, lease_s=1.0, extra=["--idle-timeout", "0.2"]) as cluster:
        h1, h2 = cluster.hosts
        async with SessionsClient(h1.url) as c1, SessionsClient(h2.url) as c2:
            await c1.session("idle").append_message(msg("m1"))  # h1 owns it
            async with c1.session("idle").events() as direct, c2.session("idle").events() as relayed:
                await await_until(lambda: _hibernations(h1), 10, "the session to hibernate at h1")
                slept_from = trio.current_time()
                while trio.current_time() - slept_from < 3 * cluster.lease_s:  # many idle timeouts, 3 leases
                    await trio.sleep(0.2)
                assert await c2.session("idle").call("shout", "awake") == "awake"  # via h2, run at h1
                for events in (direct, relayed):
                    with trio.fail_after(10):
                        async for event in events:
                            if event.get("type") == "shout":
                                assert event["text"] == "awake"
                                break
                    assert events.reconnects == 0
            assert {int(pid) for pid, _hex in cluster.events("activations")} == {h1.process.pid}
        # the sockets closed: the next hibernation at h1 gives the session up, and h2 takes it when asked
        async with httpx.AsyncClient(timeout=30) as http:

            async def owned_by_h2():
                response = await http.get(f"{h2.url}/v1/sessions/idle/messages:count")
                return response.status_code == 200 and response.headers.get(OWNER_HEADER) == h2.url

            await await_until(owned_by_h2, 15, "h1 to give the session up", interval=0.2)


async def _hibernations(host):
    async with httpx.AsyncClient(timeout=60) as http:
        return (await http.get(f"{host.url}/v1/actors")).json()["hibernations"] > 0


async def test_a_transcript_call_runs_at_the_pairs_owner_from_any_host(cluster):
    """A key-addressed transcript call is forwarded like a session call (more in test_http_catalog.py)."""
    h1, h2, h3 = cluster.hosts
    key = {"project_key": "p", "session_id": "s"}
    async with httpx.AsyncClient(timeout=60) as http:
        stored = await http.post(f"{h1.url}/v1/transcripts/entries", json={"key": key, "entries": [{"uuid": "u"}]})
        owner = stored.headers[OWNER_HEADER]
        loads = [await http.get(f"{host.url}/v1/transcripts/entries", params=key) for host in (h2, h3)]
        bad = await http.post(f"{h2.url}/v1/transcripts/entries", json={"entries": []})
    assert stored.json() == {"stored": 1}
    assert [(r.json(), r.headers[OWNER_HEADER]) for r in loads] == [({"entries": [{"uuid": "u"}]}, owner)] * 2
    assert (bad.status_code, bad.json()["error"]["field"]) == (400, "key")


async def test_a_log_that_cannot_rebuild_a_session_is_named_not_an_anonymous_500(cluster):
    """Damage in Postgres (here a log entry gone) is reported as what it is, naming the session's actor."""
    import psycopg

    h1, h2, _ = cluster.hosts
    async with SessionsClient(h1.url) as c1:
        await c1.session("damaged").append_messages([msg("m1")])
        await c1.session("damaged").append_messages([msg("m2")])
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await http.post(f"{h1.url}/v1/actors:hibernate", json={})).json() == {"hibernated": 1}
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            actor = conn.execute("SELECT actor_id FROM ds_actors").fetchone()[0]
            await await_until(lambda: conn.execute("SELECT owner IS NULL FROM ds_actors").fetchone()[0], 10,
                              "h1 to give the session up")
            conn.execute("DELETE FROM ds_log WHERE seq = 1")
        answer = await http.get(f"{h2.url}/v1/sessions/damaged/messages")  # h2 rebuilds the file from the log
    assert (answer.status_code, answer.json()["error"]["type"]) == (500, "RestoreError")
    assert answer.json()["error"]["message"].startswith(f"actor {actor}: the cluster log has a gap")
