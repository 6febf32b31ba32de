"""The actor host: activation, mailboxes, gates, hibernation, eviction and alarms.

Durable Objects in one trio process: :func:`open_host` gives an
:class:`ActorHost`; ``host.bind(name, AgentClass)`` makes a
:class:`Namespace` whose stubs route calls to one live actor per id.
Nothing here knows HTTP (see :mod:`runtime.server`).
"""

from runtime.host.actor_host import ActorHost, HostStatistics, open_host
from runtime.host.alarms import HostClock
from runtime.host.ids import ActorId
from runtime.host.namespace import ActorStub, Namespace

__all__ = ["ActorHost", "ActorId", "ActorStub", "HostClock", "HostStatistics", "Namespace", "open_host"]
