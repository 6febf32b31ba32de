"""``GET /search?q=`` answers like every other blank query: 200 and no results."""

import pytest

from runtime import open_host
from runtime.server import bind_sessions, create_app

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
S = "/v1/sessions/chat-42"


@pytest.fixture
async def client(tmp_path):
    async with open_host(tmp_path / "data") as host:
        bind_sessions(host)
        yield create_app(host, token=TOKEN).test_client()


async def get(client, path):
    response = await client.get(path, headers=AUTH)
    return response.status_code, await response.get_json()


async def append(client, text):
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": text}]}
    response = await client.post(f"{S}/messages", json={"message": message}, headers=AUTH)
    assert response.status_code == 201


@pytest.mark.parametrize("query", ["", "%20%20", "%22%22", "%23"])
async def test_a_blank_search_query_answers_200_with_no_results(client, query):
    await append(client, "Booking ZFA04Y confirmed")
    assert await get(client, f"{S}/search?q={query}") == (200, {"results": []})
    status, body = await get(client, f"{S}/search?q=zfa04y")
    assert (status, [hit["id"] for hit in body["results"]]) == (200, ["m1"])


async def test_a_blank_search_of_a_session_never_written_answers_200(client):
    assert await get(client, "/v1/sessions/never-written/search?q=") == (200, {"results": []})


async def test_a_search_without_q_is_still_refused(client):
    status, body = await get(client, f"{S}/search")
    assert status == 400
    assert body["error"]["message"] == "query parameter 'q' is required"
