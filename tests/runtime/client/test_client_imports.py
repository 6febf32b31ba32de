"""The client imports without the server: ``import runtime.client`` in a fresh interpreter.

A program that only talks to a host needs httpx, wsproto, msgpack, anyio and
the shared vocabulary (``common``); it must not pay for (or depend on) the
web framework, the ASGI server, SQLite, trio, the actor code or ``storage``. Each check runs in a new interpreter because
this test process has long since imported all of them.
"""

import json

from tests.support.processes import run_fresh_python

#: Top-level packages and project sub-packages that only the server side uses.
SERVER_ONLY = ["quart", "hypercorn", "werkzeug", "apsw", "psycopg", "trio", "actors", "storage", "runtime.server",
               "runtime.host"]


def loaded_after(statement: str) -> list[str]:
    """The names of ``sys.modules`` after running ``statement`` in a fresh interpreter."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    return json.loads(run_fresh_python(code))


def loaded_of(modules: list[str], packages: list[str]) -> list[str]:
    """The ``packages`` that ``modules`` holds (the package itself or any module inside it)."""
    return [p for p in packages if any(m == p or m.startswith(p + ".") for m in modules)]


def test_import_runtime_client_loads_no_server_module():
    modules = loaded_after("import runtime.client")
    assert {"runtime.client", "common.errors", "common.wire"} <= set(modules)
    assert loaded_of(modules, SERVER_ONLY) == []


def test_the_client_classes_import_by_name_without_the_server():
    modules = loaded_after("from runtime.client import SessionsClient, DurableSessionStore")
    assert {"runtime.client.http", "runtime.client.transcripts"} <= set(modules)
    assert loaded_of(modules, SERVER_ONLY) == []


def test_the_client_names_of_runtime_load_no_server_module():
    modules = loaded_after("from runtime import SessionsClient, DurableSessionStore")
    assert "runtime.client" in modules
    assert loaded_of(modules, SERVER_ONLY) == []


def test_open_host_and_serve_still_import_from_runtime():
    code = ("from runtime import open_host, serve\n"
            "import runtime.host, runtime.server\n"
            "print(open_host is runtime.host.open_host, serve is runtime.server.serve)")
    assert run_fresh_python(code) == "True True\n"
