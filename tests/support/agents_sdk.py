"""The OpenAI Agents SDK in tests: every input item type, and a real run recorded with a scripted model.

* :data:`CATALOGUE` -- one sample (or a few variants) of every item type the
  Responses API accepts as input (``openai.types.responses.ResponseInputItemParam``);
  :func:`input_item_types` lists those types from the installed ``openai``
  package, so a test names any type a newer release adds.
* :func:`run_conversation` -- a real ``agents.Runner`` conversation with the
  SDK's own ``ScriptedModel`` (no network): reasoning, two parallel tool
  calls, a handoff to a second agent, a tool call there, a streamed turn.
  :class:`RecordingSession` wraps any session and keeps each ``add_items``
  batch, so a run on the SDK's ``SQLiteSession`` yields the items exactly as
  the SDK writes them.
* ``check_*`` -- what any of our SDK sessions must do, with the SDK's
  ``SQLiteSession`` as the reference: the recorded run round-trips, the
  model gets the same input, random operations give the same answers.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import typing
from typing import Any

from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_input_item_param import ResponseInputItemParam
from openai.types.responses.response_reasoning_item import Summary

set_tracing_disabled(True)  # no exporter thread, no "OPENAI_API_KEY is not set" at exit


def input_item_types() -> set[str]:
    """The ``type`` of every Responses input item the installed ``openai`` package knows."""
    return set().union(*(_literals(typing.get_type_hints(member)["type"])
                         for member in typing.get_args(ResponseInputItemParam)))


def _literals(hint: Any) -> set[Any]:
    if typing.get_origin(hint) is typing.Literal:
        return set(typing.get_args(hint))
    return set().union(*(_literals(arg) for arg in typing.get_args(hint)))


IMAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"

#: ``(name, item)``: samples of every input item type, with variants where the shape varies.
CATALOGUE: list[tuple[str, dict[str, Any]]] = [
    ("easy user message", {"role": "user", "content": "Which flights leave Oslo on Friday?"}),
    ("easy assistant message", {"role": "assistant", "content": "Two: 07:10 and 18:45.", "phase": "final_answer"}),
    ("easy system message", {"role": "system", "content": "You book flights."}),
    ("easy developer message", {"type": "message", "role": "developer", "content": "Answer in one line."}),
    ("input message with image and file", {
        "type": "message", "role": "user", "status": "completed", "content": [
            {"type": "input_text", "text": "What does the chart in this report show?"},
            {"type": "input_image", "image_url": IMAGE, "detail": "auto"},
            {"type": "input_file", "file_id": "file-7kF2", "filename": "q3-report.pdf"},
        ]}),
    ("output message with citation and refusal", {
        "id": "msg_07c1", "type": "message", "role": "assistant", "status": "completed", "phase": "final_answer",
        "content": [
            {"type": "output_text", "text": "Refunds take five days (see policy).", "logprobs": [],
             "annotations": [{"type": "url_citation", "url": "https://example.com/policy", "title": "Policy",
                              "start_index": 26, "end_index": 36}]},
            {"type": "refusal", "refusal": "I can't share other customers' bookings."},
        ]}),
    ("empty message", {"role": "user", "content": []}),
    ("file_search_call", {
        "id": "fs_1", "type": "file_search_call", "status": "completed", "queries": ["refund policy"],
        "results": [{"file_id": "file-1", "filename": "policy.md", "score": 0.93, "text": "Refunds in 5 days.",
                     "attributes": {"team": "billing"}}]}),
    ("computer_call", {
        "id": "cu_1", "type": "computer_call", "call_id": "call_cu1", "status": "completed",
        "pending_safety_checks": [], "action": {"type": "click", "button": "left", "x": 100, "y": 200}}),
    ("computer_call_output", {
        "type": "computer_call_output", "call_id": "call_cu1", "acknowledged_safety_checks": [],
        "output": {"type": "computer_screenshot", "image_url": IMAGE}}),
    ("web_search_call", {
        "id": "ws_1", "type": "web_search_call", "status": "completed",
        "action": {"type": "search", "query": "weather in Paris"}}),
    ("function_call", {
        "type": "function_call", "id": "fc_1", "call_id": "call_w1", "name": "get_weather",
        "arguments": '{"city":"Paris","units":["C"]}', "status": "completed"}),
    ("function_call_output", {"type": "function_call_output", "call_id": "call_w1", "output": "Sunny, 21 °C"}),
    ("function_call with spaced arguments", {
        "type": "function_call", "call_id": "call_w2", "name": "get_weather", "arguments": '{"city": "Oslo"}'}),
    ("function_call_output as content list", {
        "type": "function_call_output", "call_id": "call_w2", "id": "fco_2", "status": "completed",
        "output": [{"type": "input_text", "text": "Rain, 9 °C"}, {"type": "input_image", "image_url": IMAGE}]}),
    ("function_call with empty arguments", {
        "type": "function_call", "call_id": "call_n1", "name": "now", "arguments": "", "namespace": "clock"}),
    ("tool_search_call", {
        "type": "tool_search_call", "id": "ts_1", "call_id": "call_ts1", "execution": "server",
        "status": "completed", "arguments": {"query": "calendar tools"}}),
    ("tool_search_output", {
        "type": "tool_search_output", "id": "tso_1", "call_id": "call_ts1", "execution": "server",
        "status": "completed", "tools": [{"type": "function", "name": "add_event", "parameters": {"type": "object"},
                                          "strict": True}]}),
    ("additional_tools", {
        "type": "additional_tools", "role": "developer",
        "tools": [{"type": "function", "name": "cancel", "parameters": {"type": "object"}, "strict": False}]}),
    ("configuration_update", {"type": "configuration_update", "id": "cfg_1", "reasoning": {"effort": "low"},
                              "text": {"verbosity": "low"}}),
    ("reasoning with summary", {
        "type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Compare both forecasts."},
                                                       {"type": "summary_text", "text": "Paris is warmer."}],
        "encrypted_content": "gAAAAABo-encrypted", "status": "completed"}),
    ("reasoning with raw content", {
        "type": "reasoning", "id": "rs_2", "summary": [],
        "content": [{"type": "reasoning_text", "text": "The user wants the warmer city."}]}),
    ("reasoning without text", {"type": "reasoning", "id": "rs_3", "summary": [],
                                "encrypted_content": "gAAAAABo-only-encrypted"}),
    ("compaction", {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAABo-compacted"}),
    ("image_generation_call", {"type": "image_generation_call", "id": "ig_1", "status": "completed",
                               "result": "iVBORw0KGgo="}),
    ("code_interpreter_call", {
        "type": "code_interpreter_call", "id": "ci_1", "code": "print(6 * 7)", "container_id": "cntr_1",
        "status": "completed", "outputs": [{"type": "logs", "logs": "42"}]}),
    ("local_shell_call", {
        "type": "local_shell_call", "id": "ls_1", "call_id": "call_ls1", "status": "completed",
        "action": {"type": "exec", "command": ["ls", "-la"], "env": {}}}),
    ("local_shell_call_output", {"type": "local_shell_call_output", "id": "call_ls1", "output": "total 0"}),
    ("shell_call", {"type": "shell_call", "call_id": "call_sh1", "status": "completed",
                    "action": {"commands": ["ls docs"], "timeout_ms": 1000}}),
    ("shell_call_output", {
        "type": "shell_call_output", "call_id": "call_sh1", "max_output_length": 4096,
        "output": [{"stdout": "README.md\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}),
    ("apply_patch_call", {
        "type": "apply_patch_call", "call_id": "call_ap1", "status": "completed",
        "operation": {"type": "update_file", "path": "app.py", "diff": "@@ -1 +1 @@\n-a = 1\n+a = 2\n"}}),
    ("apply_patch_call_output", {"type": "apply_patch_call_output", "call_id": "call_ap1", "status": "completed",
                                 "output": "Patched app.py"}),
    ("mcp_list_tools", {"type": "mcp_list_tools", "id": "ml_1", "server_label": "docs",
                        "tools": [{"name": "search", "input_schema": {"type": "object"}}]}),
    ("mcp_approval_request", {"type": "mcp_approval_request", "id": "mr_1", "name": "search",
                              "arguments": '{"q":"refunds"}', "server_label": "docs"}),
    ("mcp_approval_response", {"type": "mcp_approval_response", "approval_request_id": "mr_1", "approve": True,
                               "reason": "fine"}),
    ("mcp_call", {"type": "mcp_call", "id": "mc_1", "name": "search", "arguments": '{"q":"refunds"}',
                  "server_label": "docs", "output": "Refunds take five days.", "status": "completed"}),
    ("custom_tool_call", {"type": "custom_tool_call", "call_id": "call_sql1", "name": "run_sql",
                          "input": "SELECT count(*) FROM bookings"}),
    ("custom_tool_call_output", {"type": "custom_tool_call_output", "call_id": "call_sql1", "output": "17"}),
    ("compaction_trigger", {"type": "compaction_trigger"}),
    ("item_reference", {"type": "item_reference", "id": "msg_07c1"}),
    ("program", {"type": "program", "id": "pg_1", "call_id": "call_pg1", "code": "return 1", "fingerprint": "fp1"}),
    ("program_output", {"type": "program_output", "id": "po_1", "call_id": "call_pg1", "result": "1",
                        "status": "completed"}),
    ("numbers JSON as JavaScript writes it would change", {
        "type": "function_call_output", "call_id": "call_num", "id": "fco_num",
        "output": [{"type": "input_text", "text": "scores"}], "scores": [1.0, -0.0, 2**60, 0.5]}),
]


def catalogue_items() -> list[dict[str, Any]]:
    """Every catalogue item, fresh copies."""
    return [copy.deepcopy(item) for _, item in CATALOGUE]


# -- a real run ------------------------------------------------------------------------------


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city now."""
    return {"Paris": "Sunny, 21 °C", "Oslo": "Rain, 9 °C"}[city]


@function_tool
def book_flight(city: str, day: str) -> str:
    """Book a flight to a city on a day; returns the booking code."""
    return f"Booked {city} on {day}: ZFA04Y"


class RecordingSession:
    """Any SDK session, with each ``add_items`` batch and ``pop_item`` kept (deep copies)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = inner.session_settings
        self.batches: list[list[dict[str, Any]]] = []
        self.popped: list[Any] = []

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        return await self.inner.get_items(limit)

    async def add_items(self, items: list[dict[str, Any]]) -> None:
        self.batches.append(copy.deepcopy(items))
        await self.inner.add_items(items)

    async def pop_item(self) -> Any:
        item = await self.inner.pop_item()
        self.popped.append(copy.deepcopy(item))
        return item

    async def clear_session(self) -> None:
        await self.inner.clear_session()


def scripted_model() -> ScriptedModel:
    """The model's side of :func:`run_conversation`, step by step."""
    reasoning = ResponseReasoningItem(
        id="rs_1", type="reasoning", encrypted_content="gAAAAABo-weather",
        summary=[Summary(text="Look up both cities, then compare.", type="summary_text")])
    return ScriptedModel([
        [reasoning, function_call("get_weather", {"city": "Paris"}, call_id="call_paris"),
         function_call("get_weather", {"city": "Oslo"}, call_id="call_oslo")],
        [assistant_message("Paris is sunny (21 °C); Oslo has rain (9 °C).", item_id="msg_weather")],
        [function_call("transfer_to_booking_agent", {}, call_id="call_handoff")],
        [function_call("book_flight", {"city": "Paris", "day": "Friday"}, call_id="call_book")],
        [assistant_message("Your Friday flight to Paris is booked: ZFA04Y.", item_id="msg_booked")],
        [assistant_message("You're welcome. Bon voyage!", item_id="msg_bye")],
    ])


def travel_agent(model: ScriptedModel) -> Agent:
    booking = Agent(name="booking_agent", model=model, tools=[book_flight], instructions="Book flights.")
    return Agent(name="travel_agent", model=model, tools=[get_weather], handoffs=[booking],
                 instructions="Help with travel.")


async def run_conversation(session: Any, *, model: ScriptedModel | None = None) -> ScriptedModel:
    """Three turns with ``session`` as memory (asyncio only: the SDK's runner); returns the model.

    Turn 1: reasoning and two parallel tool calls, then an answer. Turn 2:
    a handoff to ``booking_agent``, whose tool call books. Turn 3, streamed: a
    last answer. ``model.calls[i].input`` is what the model was sent.
    """
    model = model or scripted_model()
    travel = travel_agent(model)
    first = await Runner.run(travel, "What's the weather in Paris and Oslo?", session=session)
    assert first.final_output == "Paris is sunny (21 °C); Oslo has rain (9 °C)."
    second = await Runner.run(travel, "Book me a flight to the sunnier one on Friday.", session=session)
    assert second.final_output == "Your Friday flight to Paris is booked: ZFA04Y."
    third = Runner.run_streamed(second.last_agent, "Thanks!", session=session)
    async for _ in third.stream_events():
        pass
    assert third.final_output == "You're welcome. Bon voyage!"
    model.assert_complete()
    return model


# -- checks any SDK session must pass -------------------------------------------------------------


def same(left: Any, right: Any) -> bool:
    """Equal and written the same by Python's json (1.0 is not 1; key order counts)."""
    return json.dumps(left) == json.dumps(right)


async def reference_run() -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]], ScriptedModel]:
    """:func:`run_conversation` on the SDK's own ``SQLiteSession``: its batches, its items, the model."""
    reference = RecordingSession(SQLiteSession("reference"))
    model = await run_conversation(reference)
    items = await reference.get_items()
    assert same([item for batch in reference.batches for item in batch], items)
    return reference.batches, items, model


async def check_recorded_run_round_trips(session: Any) -> list[dict[str, Any]]:
    """The recorded run's batches added to ``session`` come back exactly: whole, by ``limit``, popped."""
    batches, reference, _ = await reference_run()
    for batch in batches:
        await session.add_items(copy.deepcopy(batch))
    assert same(await session.get_items(), reference)
    for limit in range(1, len(reference) + 2):
        assert same(await session.get_items(limit), reference[-limit:]), limit
    assert await session.get_items(0) == []
    popped = [await session.pop_item() for _ in reference]
    assert same(popped, reference[::-1])
    assert await session.pop_item() is None
    assert await session.get_items() == []
    return reference


async def check_model_input_matches_sqlite_session(session: Any) -> ScriptedModel:
    """The model is sent the same input, turn after turn, as with the SDK's ``SQLiteSession``."""
    _, _, expected = await reference_run()
    model = await run_conversation(session)
    assert same([call.input for call in model.calls], [call.input for call in expected.calls])
    return model


async def check_against_sqlite_session(session: Any, seed: int, steps: int = 60) -> None:
    """Random adds (the catalogue in order, cut into random batches), pops and reads, the same on
    ``session`` and on the SDK's ``SQLiteSession`` after every step."""
    rng = random.Random(seed)
    reference = SQLiteSession("reference")
    stream = itertools.cycle(catalogue_items())
    for _ in range(steps):
        action = rng.choices(["add", "pop", "limit", "clear"], weights=[6, 3, 2, 0.3])[0]
        if action == "add":
            batch = [copy.deepcopy(next(stream)) for _ in range(rng.randint(1, 6))]
            await reference.add_items(copy.deepcopy(batch))
            await session.add_items(batch)
        elif action == "pop":
            assert same(await session.pop_item(), await reference.pop_item())
        elif action == "limit":
            limit = rng.randint(1, 12)
            assert same(await session.get_items(limit), await reference.get_items(limit))
        else:
            await reference.clear_session()
            await session.clear_session()
        assert same(await session.get_items(), await reference.get_items()), action
    reference.close()
