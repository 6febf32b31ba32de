"""The forwarder's own arithmetic: how long it waits for a dead owner's lease, what it remembers, Retry-After."""

from __future__ import annotations

import trio

from common.errors import NotOwnerError, StorageUnavailableError
from runtime.host.ids import ActorId
from runtime.server.app import SessionsServer
from runtime.server.forwarding import LEASE_MARGIN_S, Forwarder

ACTOR = ActorId("sessions", "ab" * 32)


def not_owner(lease_left_s: float) -> NotOwnerError:
    return NotOwnerError(f"sessions/{ACTOR.hex}", "http://owner:1", owner_host="h9", lease_left_s=lease_left_s)


async def test_a_dead_owner_is_waited_for_only_as_long_as_its_lease_has_left():
    forwarder = Forwarder(host_id="h1", advertise_url="http://me:1", lease_s=10.0)
    assert forwarder.lease_left(ACTOR, not_owner(0.2)) == 0.2 + LEASE_MARGIN_S  # not the 1 s of Retry-After
    assert forwarder.lease_left(ACTOR, not_owner(30.0)) == 10.0 + LEASE_MARGIN_S  # never past a whole lease
    assert forwarder.remember(ACTOR, not_owner(0.5)) == "http://owner:1"
    assert forwarder.owner_of(ACTOR) == "http://owner:1"
    await trio.sleep(0.6)
    assert forwarder.owner_of(ACTOR) is None  # forgotten when that owner's lease would have run out


def test_retry_after_is_the_lease_left_in_whole_seconds_for_not_owner_and_1_otherwise():
    assert SessionsServer.error_headers(not_owner(4.2), 503) == {"Retry-After": "5"}
    assert SessionsServer.error_headers(not_owner(0.2), 503) == {"Retry-After": "1"}
    assert SessionsServer.error_headers(StorageUnavailableError("down"), 503) == {"Retry-After": "1"}
