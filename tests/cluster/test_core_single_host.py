"""Without ``cluster=`` the host is the single host it always was: nothing of the cluster loads or runs."""

from __future__ import annotations

import json

from tests.support.processes import run_fresh_python


def test_a_single_host_imports_nothing_of_the_cluster(tmp_path):
    out = run_fresh_python(f"""
import json, sys, trio
from actors import SessionAgent, SessionConfig
from runtime.host import open_host

async def main():
    async with open_host({str(tmp_path)!r}) as host:
        ns = host.bind("sessions", SessionAgent, env=SessionConfig())
        stub = ns.get_by_name("chat")
        await stub.append_message({{"id": "m1", "role": "user", "parts": [{{"type": "text", "text": "hi"}}]}})
        assert host.cluster is None and ns.exists(stub.id)
        print(json.dumps(sorted(m for m in sys.modules if m.startswith(("psycopg", "storage.cluster",
                                                                         "runtime.host.cluster")))))

trio.run(main)
""")
    assert json.loads(out) == []
