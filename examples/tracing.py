"""Trace a session's calls with OpenTelemetry: which spans one request makes, and how they nest.

With the ``otel`` extra (``pip install -e '.[otel]'``) a server exports spans
when the standard ``OTEL_*`` variables name an exporter (for instance
``OTEL_TRACES_EXPORTER=console durable-sessions serve``); without them it
creates none. Here the spans go to the SDK's in-memory exporter instead, so
the example can print them: an embedded host, the HTTP app on it (no
socket), one append, one read and a hibernation, then the span tree::

    .venv/bin/python examples/tracing.py

No message text, token or query string appears in any attribute
(docs/ecosystem.md lists the spans and their attributes).
"""

from __future__ import annotations

import tempfile

import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import open_host, telemetry
from runtime.server.app import bind_sessions, create_app

SHOWN = ("http.request.method", "http.route", "http.response.status_code")


def tree(spans: list) -> list[str]:
    """One line per span, indented under its parent: top-level spans in start order, children by name
    (a call's turn span and the activation it waits for start together)."""
    children: dict = {}
    for span in sorted(spans, key=lambda s: s.start_time):
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent, []).append(span)
    known = {span.context.span_id for span in spans}
    lines: list[str] = []

    def walk(span, depth: int) -> None:
        attributes = ", ".join(f"{key}={span.attributes[key]}" for key in SHOWN if key in (span.attributes or {}))
        lines.append("  " * depth + span.name + (f" ({attributes})" if attributes else ""))
        for child in sorted(children.get(span.context.span_id, []), key=lambda s: s.name):
            walk(child, depth + 1)

    for parent, roots in children.items():
        if parent is None or parent not in known:
            for root in roots:
                walk(root, 0)
    return lines


async def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(provider)  # what OTEL_* variables would do, with this provider
    with tempfile.TemporaryDirectory() as data:
        async with open_host(data) as host:
            bind_sessions(host)
            client = create_app(host, max_body_bytes=64 * 1024).test_client()
            message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "a private note"}]}
            path = "/v1/sessions/demo/messages"
            await client.post(path, json={"message": message}, scope_base={"raw_path": path.encode()})
            await client.get(path, scope_base={"raw_path": path.encode()})
            await host.hibernate("sessions", host.namespace("sessions").id_from_name("demo"))
    telemetry.configure(None)
    spans = exporter.get_finished_spans()
    print("\n".join(tree(list(spans))))
    print(f"{len(spans)} spans, {len({span.context.trace_id for span in spans})} traces")


if __name__ == "__main__":
    trio.run(main)
