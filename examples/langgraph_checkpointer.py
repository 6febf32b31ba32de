#!/usr/bin/env python3
"""A LangGraph graph whose threads are actors of the host: stop before a human approves, resume anywhere.

Needs the ``langgraph`` extra (``pip install -e '.[langgraph]'``).
Start a host in one terminal, then run this from the repository root in another::

    .venv/bin/durable-sessions serve
    .venv/bin/python examples/langgraph_checkpointer.py [--thread ID]

or, with no server, on a data folder of its own (a host in this process)::

    .venv/bin/python examples/langgraph_checkpointer.py --data ./graph-data

The graph plans a refund, stops before the ``approve`` node (LangGraph's
``interrupt_before``), and a second process -- here, a fresh checkpointer and
graph -- finds the run where it stopped and finishes it. Over HTTP the
checkpointer is ``runtime.client.DurableCheckpointer(url, token=...)``
(``$DURABLE_SESSIONS_URL``, ``$DURABLE_SESSIONS_TOKEN``); each thread id is one
actor, so it hibernates when idle and survives restarts of the host.
"""

from __future__ import annotations

import argparse
import operator
import secrets
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Iterator, TypedDict

try:
    from langgraph.graph import END, START, StateGraph
except ImportError:
    sys.exit("this example needs the langgraph extra: pip install -e '.[langgraph]'")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class Refund(TypedDict):
    order: str
    amount: int
    log: Annotated[list[str], operator.add]


def build(checkpointer: Any) -> Any:
    def plan(state: Refund) -> dict:
        return {"log": [f"planned a refund of {state['amount']} EUR for {state['order']}"]}

    def approve(state: Refund) -> dict:
        return {"log": ["approved by a human"]}

    def pay(state: Refund) -> dict:
        return {"log": [f"paid {state['amount']} EUR"]}

    graph = StateGraph(Refund)
    graph.add_node("plan", plan)
    graph.add_node("approve", approve)
    graph.add_node("pay", pay)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "approve")
    graph.add_edge("approve", "pay")
    graph.add_edge("pay", END)
    return graph.compile(checkpointer=checkpointer, interrupt_before=["approve"])


@contextmanager
def checkpointer(data: Path | None) -> Iterator[Any]:
    """Over HTTP to the running host, or (``--data``) a host of this process on that folder."""
    if data is None:
        from runtime.client import DurableCheckpointer

        with DurableCheckpointer() as saver:
            yield saver
        return
    from runtime.checkpointer import EmbeddedCheckpointer
    from runtime.testing_asyncio import threaded_host

    with threaded_host(data) as host:
        yield EmbeddedCheckpointer(host)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--thread", default=f"refund-{secrets.token_hex(4)}")
    parser.add_argument("--data", type=Path, help="no server: a host in this process on this data folder")
    args = parser.parse_args()
    config = {"configurable": {"thread_id": args.thread}}

    print("== first process: run until the approval")
    with checkpointer(args.data) as saver:
        state = build(saver).invoke({"order": "A-1001", "amount": 42, "log": []}, config)
        for line in state["log"]:
            print(" ", line)
        print("  waiting before:", ", ".join(build(saver).get_state(config).next))

    print("== second process: resume the same thread")
    with checkpointer(args.data) as saver:
        graph = build(saver)
        print("  found it waiting before:", ", ".join(graph.get_state(config).next))
        state = graph.invoke(None, config)
        for line in state["log"]:
            print(" ", line)
        steps = [snapshot.metadata["step"] for snapshot in graph.get_state_history(config)]
        print(f"  checkpoints in the thread: {len(steps)}")


if __name__ == "__main__":
    main()
