"""Hosting: actor routing, lifecycle, hibernation, alarms, the HTTP/WebSocket
server, the Python client, the CLI and test helpers. Wires ``actors`` and ``storage``.
"""

__all__: list[str] = []
