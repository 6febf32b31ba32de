"""A session holding one of each thing an archive carries, written over HTTP (for the export/import tests of
cluster and Postgres modes): two branches of messages, a compaction, metadata, a writable block, a searchable
block's entry and the frozen system prompt. Start the server with :data:`CONFIG` (``--config``)."""

from __future__ import annotations

import json

import httpx

CONFIG = """
[session]
compaction = false

[[session.blocks]]
label = "memory"
kind = "writable"

[[session.blocks]]
label = "kb"
kind = "searchable"
"""


def message(message_id: str, text: str) -> dict:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


async def write_rich_session(http: httpx.AsyncClient, url: str, session: str, marker: str) -> None:
    """Write the session ``session`` through the host at ``url``; every text holds ``marker``."""
    base = f"{url}/v1/sessions/{session}"
    steps = [
        ("POST", "/messages:batch", {"messages": [message(f"m{i}", f"{marker} #{i} ünï") for i in range(4)]}),
        ("POST", "/messages", {"message": message("b1", f"{marker} branch"), "parentId": "m1"}),
        ("POST", "/messages", {"message": message("m4", f"{marker} after the branch"), "parentId": "m3"}),
        ("PUT", "/context/memory", {"content": f"remember {marker}"}),
        ("POST", "/tools/set_context", {"label": "kb", "content": f"fact {marker}", "metadata": {"title": "a fact"}}),
        ("POST", "/rpc", {"method": "add_compaction", "params": [f"summary {marker}", "m0", "m1"]}),
        ("POST", "/rpc", {"method": "set_metadata", "params": [{"title": marker}]}),
    ]
    for method, path, body in steps:
        answer = await http.request(method, base + path, json=body)
        assert answer.status_code in (200, 201), (path, answer.text)
    prompt = await http.get(base + "/system-prompt")
    assert prompt.status_code == 200, prompt.text


def same_apart_from_header(first: str, second: str, session: str) -> None:
    """Assert that two archives are equal byte for byte apart from the header's ``sessionId`` (``session`` in
    ``second``) and ``exportedAt`` (the volatile field)."""
    one, two = first.split("\n"), second.split("\n")
    head_one, head_two = json.loads(one[0]), json.loads(two[0])
    assert head_two["sessionId"] == session
    assert {**head_one, "sessionId": session, "exportedAt": None} == {**head_two, "exportedAt": None}
    assert one[1:] == two[1:]
