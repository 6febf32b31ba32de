"""LangGraph threads as actors (issue 30, part 2): ``EmbeddedCheckpointer`` and ``DurableCheckpointer``.

* LangGraph's own conformance suite (``langgraph-checkpoint-conformance``,
  run unmodified through its ``validate``) against a host in this process and
  against a real ``durable-sessions serve``. Every capability it knows passes
  except ``delete_for_runs``, which neither saver offers (a run's checkpoints
  are spread over thread actors and no index spans them): the suite reports
  it "not implemented", and the test checks exactly that.
* A real ``StateGraph`` interrupted before a node, the server killed with
  ``kill -9``, a new server on the same data folder, and the run resumed.
* Sync methods (``graph.invoke``) over HTTP and on a threaded host, async
  ones (``graph.ainvoke``) under asyncio, hibernation between calls, and the
  errors a caller gets.
"""

from __future__ import annotations

import operator
import subprocess
import sys
from typing import Annotated, TypedDict

import httpx
import msgpack
import pytest

from tests.support.data import REPO_ROOT
from tests.support.processes import kill_hard, run_fresh_python, server_process

pytest.importorskip("langgraph.checkpoint.conformance", reason="the langgraph extra is not installed")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from common.errors import InvalidInputError, UnauthorizedError  # noqa: E402
from runtime.checkpointer import CHECKPOINTS_NAMESPACE, EmbeddedCheckpointer  # noqa: E402
from runtime.client import DurableCheckpointer  # noqa: E402
from runtime.host.actor_host import open_host  # noqa: E402
from runtime.testing_asyncio import open_threaded_host, threaded_host  # noqa: E402

TOKEN = "langgraph-token"
PASSING = {"put", "put_writes", "get_tuple", "list", "delete_thread", "copy_thread", "prune"}


def check_report(report):
    failures = {cap: result.failures for cap, result in report.results.items() if result.failures}
    assert failures == {}
    assert {cap for cap, result in report.results.items() if result.passed} == PASSING
    left_out = report.results["delete_for_runs"]
    assert (left_out.detected, left_out.passed) == (False, None)
    assert sum(result.tests_passed for result in report.results.values()) > 60


async def test_conformance_suite_embedded(tmp_path):
    async with open_host(tmp_path / "actors") as host:
        @checkpointer_test(name="EmbeddedCheckpointer")
        async def embedded():
            yield EmbeddedCheckpointer(host)

        check_report(await validate(embedded))
        assert host.namespace(CHECKPOINTS_NAMESPACE).list_ids()  # one actor per thread the suite used


@pytest.fixture
def server(tmp_path):
    with server_process(tmp_path / "data", token=TOKEN) as running:
        yield running


async def test_conformance_suite_over_http(server):
    saver = DurableCheckpointer(server.url, token=TOKEN)

    @checkpointer_test(name="DurableCheckpointer")
    async def over_http():
        yield saver

    try:
        check_report(await validate(over_http))
    finally:
        await saver.aclose()


# -- a real graph -----------------------------------------------------------------------------------------


class Order(TypedDict):
    item: str
    steps: Annotated[list[str], operator.add]


def build_graph(saver):
    def plan(state: Order) -> dict:
        return {"steps": [f"plan {state['item']}"]}

    def approve(state: Order) -> dict:
        return {"steps": ["approved"]}

    def ship(state: Order) -> dict:
        return {"steps": [f"ship {state['item']}"]}

    builder = StateGraph(Order)
    builder.add_node("plan", plan)
    builder.add_node("approve", approve)
    builder.add_node("ship", ship)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "approve")
    builder.add_edge("approve", "ship")
    builder.add_edge("ship", END)
    return builder.compile(checkpointer=saver, interrupt_before=["approve"])


def test_state_graph_resumes_after_kill_9_of_the_server(tmp_path):
    config = {"configurable": {"thread_id": "order-42"}}
    with server_process(tmp_path / "data", token=TOKEN) as first:
        with DurableCheckpointer(first.url, token=TOKEN) as saver:
            graph = build_graph(saver)
            state = graph.invoke({"item": "tea", "steps": []}, config)
            assert state["steps"] == ["plan tea"]
            assert graph.get_state(config).next == ("approve",)
        kill_hard(first)
    with server_process(tmp_path / "data", token=TOKEN) as second:
        with DurableCheckpointer(second.url, token=TOKEN) as saver:
            graph = build_graph(saver)
            assert graph.get_state(config).next == ("approve",)  # the interrupted run, as it was
            state = graph.invoke(None, config)  # resume
            assert state["steps"] == ["plan tea", "approved", "ship tea"]
            assert graph.get_state(config).next == ()
            history = [snapshot.metadata["step"] for snapshot in graph.get_state_history(config)]
            assert history == sorted(history, reverse=True) and len(history) == 5


def test_sync_methods_on_a_threaded_host(tmp_path):
    config = {"configurable": {"thread_id": "threaded"}}
    with threaded_host(tmp_path / "actors") as host:
        graph = build_graph(EmbeddedCheckpointer(host))
        graph.invoke({"item": "cups", "steps": []}, config)
        assert graph.invoke(None, config)["steps"] == ["plan cups", "approved", "ship cups"]
    with threaded_host(tmp_path / "actors") as host:  # a restart: the thread's actor file has it all
        assert build_graph(EmbeddedCheckpointer(host)).get_state(config).values["steps"][-1] == "ship cups"


@pytest.mark.asyncio
async def test_async_graph_on_a_threaded_host_survives_hibernation(tmp_path):
    config = {"configurable": {"thread_id": "hibernating"}}
    async with open_threaded_host(tmp_path / "actors") as host:
        saver = EmbeddedCheckpointer(host)
        graph = build_graph(saver)
        await graph.ainvoke({"item": "pot", "steps": []}, config)
        namespace = host.namespace(CHECKPOINTS_NAMESPACE)
        actor = namespace.id_from_name("hibernating")
        assert host.is_active(namespace, actor)
        assert await host.hibernate(namespace, actor)
        assert not host.is_active(namespace, actor)
        assert (await graph.ainvoke(None, config))["steps"] == ["plan pot", "approved", "ship pot"]


async def test_sync_method_on_the_hosts_own_thread_is_refused(tmp_path):
    async with open_host(tmp_path / "actors") as host:
        saver = EmbeddedCheckpointer(host)
        with pytest.raises(RuntimeError, match="async methods"):
            saver.get_tuple({"configurable": {"thread_id": "t"}})


async def test_errors_a_caller_gets(server):
    async with DurableCheckpointer(server.url, token=TOKEN) as saver:
        with pytest.raises(ValueError, match="thread_id"):
            [t async for t in saver.alist(None)]
        with pytest.raises(InvalidInputError) as bad:
            await saver.aprune(["t"], strategy="everything")
        assert bad.value.field == "strategy"
    async with DurableCheckpointer(server.url, token="wrong") as saver:
        with pytest.raises(UnauthorizedError):
            await saver.aget_tuple({"configurable": {"thread_id": "t"}})
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        json_call = await http.get("/v1/checkpoints/t/checkpoint", params={"checkpoint_ns": ""})
        assert json_call.status_code == 400
        assert "msgpack" in json_call.json()["error"]["message"]
        actors = (await http.get("/v1/actors")).json()
        packed = {"Accept": "application/msgpack", "Content-Type": "application/msgpack"}
        not_msgpack = await http.put("/v1/checkpoints/t/checkpoints", content=b"\xc1", headers=packed)
        assert not_msgpack.status_code == 400  # answered below Quart (CheckpointShortcut), as the app would
        assert msgpack.unpackb(not_msgpack.content)["error"]["field"] == "body"
        wrong_verb = await http.post("/v1/checkpoints/t/checkpoint", headers=packed)
        assert wrong_verb.status_code == 400
        assert "use GET" in msgpack.unpackb(wrong_verb.content)["error"]["message"]
        no_thread = await http.get("/v1/checkpoints//checkpoint", params={"checkpoint_ns": ""}, headers=packed)
        assert no_thread.status_code == 400
        assert msgpack.unpackb(no_thread.content)["error"] == {
            "type": "InvalidInputError", "message": "thread_id must not be empty", "field": "thread_id"}
        bad_field = await http.put("/v1/checkpoints/t/checkpoints", headers=packed,
                                   content=msgpack.packb({"checkpoint_ns": "", "checkpoint_id": "c1", "checkpoint": "x",
                                                          "metadata": "{}"}))
        assert msgpack.unpackb(bad_field.content)["error"]["field"] == "checkpoint"
    assert CHECKPOINTS_NAMESPACE in actors["namespaces"], actors


def test_missing_langgraph_is_one_line_naming_the_extra():
    code = ("import sys; sys.modules['langgraph'] = None\n"
            "try:\n    from runtime.client import DurableCheckpointer\n"
            "except ImportError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.stdout.strip() == ("LangGraph checkpointers need the langgraph extra: "
                                   "pip install 'durable-sessions[langgraph]'")


def test_the_http_checkpointer_loads_no_server_module():
    loaded = run_fresh_python(
        "import sys\nfrom runtime.client import DurableCheckpointer\n"
        "print(sorted(m for m in ('quart', 'hypercorn', 'apsw', 'runtime.server', 'runtime.host', 'actors', 'storage')"
        " if m in sys.modules))")
    assert loaded.strip() == "[]"
