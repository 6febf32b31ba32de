"""Layering (docs/architecture.md): imports point one way, runtime -> actors -> storage -> common;
SQL text and apsw live only in storage.

Every rule reads the source with :mod:`ast` (nothing is imported) and names
each offence as ``path:line``. The rules:

* ``common`` (the shared vocabulary: errors, shapes, the wire format, the
  SDK adapters) imports nothing of ``storage``, ``actors`` or ``runtime``,
  nor apsw, psycopg, trio, quart or hypercorn; every layer may import it;
* ``storage`` imports neither ``actors`` nor ``runtime`` nor ``trio``;
  ``actors`` does not import ``runtime``;
* ``storage`` no longer holds the vocabulary: its old modules
  (``storage/errors.py``, ``shapes.py``, ``openai_items.py``,
  ``openai_session.py``, ``transcript_summary.py``, and ``runtime/wire.py``)
  only re-export :mod:`common`;
* only ``storage`` imports ``apsw``;
* ``common``, ``actors`` and ``runtime`` hold no SQL text (a string constant that reads
  as a SQL statement; docstrings and other bare string statements are
  documentation and are skipped);
* ``common``, ``actors`` and ``runtime`` never reach a storage's apsw connection
  (``storage.connection``, apsw connection methods such as
  ``set_commit_hook``) and run no query on a storage (``storage.sql``,
  ``.exec``, ``.scalar``) -- except :meth:`actors.Agent.sql`, the public
  pass-through of a user's own SQL (a Durable Object's ``ctx.storage.sql``);
* inside ``runtime``, each room imports only the rooms below it
  (docs/architecture.md): the client neither the host nor the server nor
  ``storage``, the host not the server, and ``runtime.api``/``runtime.manager_api``
  none of them;
* the message-tree engine (``storage.tree``) is dialect-free and loads no
  database driver, and ``storage.postgres`` loads no apsw: neither imports
  apsw nor a SQLite module of ``storage``, and importing them in a fresh
  interpreter leaves apsw (and, for the engine, psycopg) unloaded.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "common": {"storage", "actors", "runtime", "apsw", "psycopg", "psycopg_pool", "trio", "quart", "quart_trio",
               "hypercorn"},
    "storage": {"actors", "runtime", "trio"},
    "actors": {"runtime"},
}
#: Packages that reach SQLite only through storage's functions and classes.
SQL_FREE = ("common", "actors", "runtime")
#: The vocabulary's old homes: each only re-exports the module of ``common`` it moved to.
MOVED_TO_COMMON = {
    "storage/errors.py": "common.errors",
    "storage/shapes.py": "common.shapes",
    "storage/openai_items.py": "common.openai_items",
    "storage/openai_session.py": "common.openai_session",
    "storage/transcript_summary.py": "common.transcript_summary",
    "runtime/wire.py": "common.wire",
}

#: apsw ``Connection`` methods no other project code has a reason to call.
APSW_CONNECTION_METHODS = frozenset({
    "backup", "executemany", "get_autocommit", "last_insert_rowid", "set_busy_handler", "set_busy_timeout",
    "set_commit_hook", "set_progress_handler", "set_rollback_hook", "set_update_hook", "set_wal_hook",
    "total_changes", "wal_checkpoint",
})
#: Query methods of storage.sqlite.SqlStorage.
QUERY_METHODS = frozenset({"sql", "exec", "scalar"})
#: ``(file, function)`` allowed to run a query: the Agent's public pass-through of user SQL.
QUERY_ALLOWED = {("actors/agent.py", "Agent.sql")}

_K = r"[\s(]*"  # a statement may open with whitespace or parentheses
#: Statement shapes, keywords upper case (the project's style). Each opens the
#: string; a one-word statement (``ROLLBACK``) must be the whole string, so an
#: HTTP verb such as ``"DELETE"`` or prose does not match.
_SQL_STATEMENT = re.compile(
    _K + r"(?:"
    r"SELECT\s+\S"
    r"|WITH\s+(?:RECURSIVE\s+)?\w+[\s\S]*?\bAS\s*\("
    r"|(?:INSERT|REPLACE)\s+(?:OR\s+[A-Z]+\s+)?INTO\s"
    r"|UPDATE\s+(?:OR\s+[A-Z]+\s+)?\S+(?:\s+INDEXED\s+BY\s+\S+)?\s+SET\s"
    r"|DELETE\s+FROM\s"
    r"|CREATE\s+(?:(?:UNIQUE|VIRTUAL|TEMP|TEMPORARY)\s+)?(?:TABLE|INDEX|TRIGGER|VIEW)\s"
    r"|DROP\s+(?:TABLE|INDEX|TRIGGER|VIEW)\s"
    r"|ALTER\s+TABLE\s"
    r"|PRAGMA\s+\w"
    r"|(?:BEGIN(?:\s+(?:DEFERRED|IMMEDIATE|EXCLUSIVE))?(?:\s+TRANSACTION)?|COMMIT|ROLLBACK"
    r"|ROLLBACK\s+TO\s+(?:SAVEPOINT\s+)?\w+|SAVEPOINT\s+\w+|RELEASE\s+(?:SAVEPOINT\s+)?\w+|VACUUM)\s*;?\s*$"
    r")"
)
#: A subquery inside a fragment of a statement (``"+rowid IN (SELECT rowid FROM ...)"``).
_SQL_SUBQUERY = re.compile(r"\(\s*SELECT\s[\s\S]+?\sFROM\s")
#: The same statements in lower case, only in shapes prose never takes.
_SQL_STATEMENT_ANY_CASE = re.compile(
    _K + r"(?:"
    r"select\s+[\s\S]+?\s+from\s+\w+(?:\s+as\s+\w+)?\s+(?:where|order\s+by|group\s+by|join|limit)\s"
    r"|(?:insert|replace)\s+(?:or\s+\w+\s+)?into\s+\w+\s*\("
    r"|update\s+\w+\s+set\s+\w+\s*="
    r"|delete\s+from\s+\w+\s+where\s+\w+\s*(?:=|in\b|<|>)"
    r"|create\s+(?:virtual\s+)?table\s+(?:if\s+not\s+exists\s+)?\w+\s*(?:\(|using\b)"
    r")",
    re.IGNORECASE,
)
#: What stands in for a replacement field of an f-string.
_HOLE = "x"


def looks_like_sql(text: str) -> bool:
    """``True`` when ``text`` reads as a SQL statement."""
    return bool(
        _SQL_STATEMENT.match(text) or _SQL_STATEMENT_ANY_CASE.match(text) or _SQL_SUBQUERY.search(text)
    )


def python_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT).as_posix()}:{node.lineno}"


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imported_packages(path: Path) -> set[str]:
    return {name for name, _ in imports(parse(path))}


def imports(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """``(top-level package, node)`` of every absolute import in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node


def string_constants(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """``(text, node)`` of every string a program can run, f-strings whole (holes as ``x``).

    Bare string statements (docstrings, attribute docs) are skipped.
    """
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            skip.update(id(n) for n in ast.walk(node.value))
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in node.values)
            if id(node) not in skip:
                yield "".join(
                    part.value if isinstance(part, ast.Constant) else _HOLE for part in node.values
                ), node
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.value, node


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names and attributes ('' for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    if isinstance(node, ast.Call):
        return dotted(node.func)
    return ""


def is_storage(node: ast.AST) -> bool:
    """``True`` for an expression naming a storage (``storage``, ``slot.storage``, ``self._storage``...)."""
    return "storage" in dotted(node).lower()


class _ConnectionUse(ast.NodeVisitor):
    """Collects ``(node, what, function)`` of storage connection use and storage queries."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.AST, str, str]] = []
        self._scope: list[str] = []

    def _enter(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._scope.append(node.name)
        self.generic_visit(node)
        self._scope.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _enter

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr == "connection" and is_storage(node.value):
            self.found.append((node, f"{dotted(node)} (an apsw connection)", ".".join(self._scope)))
        elif node.attr in APSW_CONNECTION_METHODS:
            self.found.append((node, f".{node.attr} (an apsw connection method)", ".".join(self._scope)))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in QUERY_METHODS and is_storage(func.value):
            self.found.append((node, f"{dotted(func)}(...) (a query)", ".".join(self._scope)))
        self.generic_visit(node)


# -- the rules -------------------------------------------------------------------------


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_point_one_way(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in python_files(package)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


#: Inside runtime, the rooms of docs/architecture.md: module prefix -> prefixes it must not import.
RUNTIME_ROOMS = {
    "runtime.api": ("runtime.host", "runtime.server", "runtime.client", "runtime.cli", "actors", "storage"),
    "runtime.manager_api": ("runtime.host", "runtime.server", "runtime.client", "runtime.cli", "actors", "storage"),
    "runtime.wsclient": ("runtime.host", "runtime.server", "runtime.client", "runtime.cli", "runtime.api", "actors",
                         "storage"),
    "runtime.client": ("runtime.host", "runtime.server", "runtime.cli", "actors", "storage", "quart", "hypercorn",
                       "apsw"),
    "runtime.host": ("runtime.server", "runtime.client", "runtime.cli"),
    "runtime.server": ("runtime.client", "runtime.cli"),
}


def module_imports(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """``(dotted module, node)`` of every absolute import in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node


@pytest.mark.parametrize("room", sorted(RUNTIME_ROOMS))
def test_runtime_rooms_import_down_only(room):
    folder = ROOT / Path(*room.split("."))
    paths = sorted(folder.rglob("*.py")) if folder.is_dir() else [folder.with_suffix(".py")]
    offenders = [
        f"{where(path, node)}: import {name}"
        for path in paths
        for name, node in module_imports(parse(path))
        if any(name == banned or name.startswith(banned + ".") for banned in RUNTIME_ROOMS[room])
    ]
    assert not offenders, f"{room} imports a room it must not:\n" + "\n".join(offenders)


@pytest.mark.parametrize("path", sorted(MOVED_TO_COMMON))
def test_the_vocabulary_old_homes_only_re_export_common(path):
    """An old module holds a docstring, ``from common.<module> import ...`` and ``__all__``; nothing else."""
    tree = parse(ROOT / path)
    kept = []
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom) and node.module in ("__future__", MOVED_TO_COMMON[path]):
            continue
        if isinstance(node, ast.Assign) and [dotted(target) for target in node.targets] == ["__all__"]:
            continue
        kept.append(f"{where(ROOT / path, node)}: {type(node).__name__}")
    assert kept == [], f"{path} must only re-export {MOVED_TO_COMMON[path]}:\n" + "\n".join(kept)


def test_storage_holds_no_module_of_common():
    """No module of ``common`` is also a module of ``storage`` or ``runtime`` except the old homes above."""
    names = {path.name for path in python_files("common")} - {"__init__.py"}
    twins = sorted(
        path.relative_to(ROOT).as_posix()
        for package in ("storage", "runtime")
        for path in python_files(package)
        if path.name in names
    )
    assert twins == sorted(MOVED_TO_COMMON)


@pytest.mark.parametrize("package", SQL_FREE)
def test_only_storage_imports_apsw(package):
    offenders = [
        f"{where(path, node)}: import {name}"
        for path in python_files(package)
        for name, node in imports(parse(path))
        if name == "apsw"
    ]
    assert not offenders, "apsw imported outside storage:\n" + "\n".join(offenders)


@pytest.mark.parametrize("package", SQL_FREE)
def test_no_sql_text_outside_storage(package):
    offenders = [
        f"{where(path, node)}: {text.strip()[:70]!r}"
        for path in python_files(package)
        for text, node in sorted(string_constants(parse(path)), key=lambda found: found[1].lineno)
        if looks_like_sql(text)
    ]
    assert not offenders, "SQL text outside storage (move it into a storage function):\n" + "\n".join(offenders)


@pytest.mark.parametrize("package", SQL_FREE)
def test_no_storage_connection_or_query_outside_storage(package):
    offenders = []
    for path in python_files(package):
        use = _ConnectionUse()
        use.visit(parse(path))
        relative = path.relative_to(ROOT).as_posix()
        offenders += [
            f"{where(path, node)}: {what}" for node, what, scope in use.found if (relative, scope) not in QUERY_ALLOWED
        ]
    assert not offenders, "storage connection or query outside storage:\n" + "\n".join(offenders)


#: The modules of ``storage`` that load apsw (SQLite), directly or through each other.
SQLITE_MODULES = ("storage.sqlite", "storage.schema", "storage.messages", "storage.context", "storage.registry",
                  "storage.kv", "storage.integrity", "storage.catalog", "storage.transcripts")


@pytest.mark.parametrize("package", ["storage/postgres", "storage/tree"])
def test_the_tree_engine_and_postgres_import_no_sqlite_module(package):
    offenders = [
        f"{where(path, node)}: import {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name, node in module_imports(parse(path))
        if name == "apsw" or name.startswith("apsw.") or name in SQLITE_MODULES
    ]
    offenders += [  # relative imports of a SQLite module (``from ..messages import``)
        f"{where(path, node)}: from {'.' * node.level}{node.module} import ..."
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(parse(path))
        if isinstance(node, ast.ImportFrom) and node.level > 1
        and f"storage.{node.module}".split(".")[:2] in [m.split(".") for m in SQLITE_MODULES]
    ]
    assert not offenders, f"{package} imports SQLite:\n" + "\n".join(offenders)


@pytest.mark.parametrize(("module", "unloaded"), [
    ("storage.postgres", ["apsw"]),
    ("storage.tree.reads, storage.tree.writes, storage.tree.sqlite, storage.tree.postgres", ["apsw", "psycopg"]),
])
def test_importing_leaves_drivers_unloaded(module, unloaded):
    from tests.support.processes import run_fresh_python

    code = f"import sys, {module}\nprint(sorted(m for m in {unloaded!r} if m in sys.modules))"
    assert run_fresh_python(code).strip() == "[]"


# -- the rules catch what they are for ---------------------------------------------------


@pytest.mark.parametrize("text", [
    "SELECT value FROM assistant_config WHERE session_id = ? AND key = ?",
    "INSERT INTO assistant_config (session_id, key, value) VALUES (?, ?, ?) ON CONFLICT (session_id, key) DO NOTHING",
    "INSERT OR REPLACE INTO alarms (namespace, actor_id, scheduled_ms) VALUES (?, ?, ?)",
    "DELETE FROM alarms WHERE namespace = ? AND actor_id = ?",
    "\nCREATE TABLE alarms (\n    namespace TEXT NOT NULL\n) WITHOUT ROWID;\n",
    "CREATE VIRTUAL TABLE t USING fts5(content)",
    "UPDATE assistant_sessions SET name = ? WHERE id = ?",
    "WITH RECURSIVE path(seq) AS (SELECT 1) SELECT * FROM path",
    "PRAGMA user_version",
    "ROLLBACK",
    "BEGIN IMMEDIATE",
    "COMMIT;",
    "SAVEPOINT gate",
    "(SELECT 1)",
    "+rowid IN (SELECT rowid FROM assistant_fts(?))",
    "UPDATE assistant_messages INDEXED BY idx_parent SET parent_id = ? WHERE seq = ?",
    "select value from assistant_config where key = ?",
    "insert into notes (body) values (?)",
    "delete from notes where id = ?",
])
def test_sql_statements_are_recognised(text):
    assert looks_like_sql(text)


@pytest.mark.parametrize("text", [
    "metadata must be a JSON object with string keys",
    "a call ended inside a storage transaction, which was rolled back",
    "Select the session to delete from the list.",
    "delete from memory the entry named key",
    "rollback",
    "begin",
    "update",
    "SELECT",
    "commit the transaction before the call returns",
    "INSERT",
    "",
])
def test_prose_is_not_sql(text):
    assert not looks_like_sql(text)


def test_docstrings_are_skipped_and_fstrings_read_whole():
    tree = ast.parse(
        '"""SELECT a FROM b WHERE c = 1."""\n'
        "def f(n):\n"
        '    """DELETE FROM t WHERE x = 1."""\n'
        '    "INSERT INTO t (a) VALUES (1)"\n'
        '    return f"SELECT a FROM t WHERE a IN ({n})", "plain"\n'
    )
    assert [(text, node.lineno) for text, node in string_constants(tree)] == [
        ("SELECT a FROM t WHERE a IN (x)", 5), ("plain", 5),
    ]


def test_imports_are_found_whatever_their_form():
    tree = ast.parse(
        "import apsw.bestpractice\n"
        "from apsw import Connection\n"
        "from .sqlite import SqlStorage\n"  # relative: inside its own package
        "def f():\n"
        "    import trio\n"
    )
    assert [(name, node.lineno) for name, node in imports(tree)] == [("apsw", 1), ("apsw", 2), ("trio", 5)]


def test_connection_use_and_queries_are_found_with_their_scope():
    tree = ast.parse(
        "class Slot:\n"
        "    def attach(self, storage):\n"
        "        storage.connection.set_commit_hook(self.on_commit)\n"
        "def remember(agent, q):\n"
        "    agent.storage.scalar(q)\n"
        "    agent.tool.execute(q)\n"
        "    agent.storage.transaction()\n"
    )
    use = _ConnectionUse()
    use.visit(tree)
    assert [(node.lineno, what, scope) for node, what, scope in use.found] == [
        (3, ".set_commit_hook (an apsw connection method)", "Slot.attach"),
        (3, "storage.connection (an apsw connection)", "Slot.attach"),
        (5, "agent.storage.scalar(...) (a query)", "remember"),
    ]


# -- no private reach into the host or the server ------------------------------------------------

#: Names an expression ends with when it stands for the actor host or the HTTP server
#: (``host``, ``self.host``, ``ns.host``, ``server``, ``self._server`` ...), and the one module that
#: may use their private attributes: the module defining the class.
PRIVATE_OWNERS = {
    "host": "runtime/host/actor_host.py", "actor_host": "runtime/host/actor_host.py",
    "server": "runtime/server/app.py", "sessions_server": "runtime/server/app.py",
}
#: Where the rule holds: the project's packages and everything that uses them.
PRIVATE_REACH_SCOPE = ("actors", "benchmarks", "examples", "runtime", "storage", "tests")


def private_reaches(tree: ast.Module) -> Iterator[tuple[str, ast.Attribute, str]]:
    """``(owner, node, text)`` of each private attribute (``_x``, not dunder) read or written on an
    expression that names the host or the server (``self`` and ``cls`` are their own business)."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        base = dotted(node.value)
        owner = base.rsplit(".", 1)[-1].lstrip("_")
        if base not in ("self", "cls") and owner in PRIVATE_OWNERS:
            yield owner, node, f"{base}.{node.attr}"


def test_no_private_reach_into_the_host_or_the_server():
    offenders = []
    for package in PRIVATE_REACH_SCOPE:
        for path in python_files(package):
            relative = path.relative_to(ROOT).as_posix()
            offenders += [
                f"{where(path, node)}: {text}" for owner, node, text in private_reaches(parse(path))
                if PRIVATE_OWNERS[owner] != relative
            ]
    assert not offenders, (
        "private attributes of the host or the server used from another module (add a public method, "
        "or a hook of runtime.host.placement / runtime.server.responder):\n" + "\n".join(offenders)
    )


def test_private_reaches_are_found_whatever_the_expression():
    tree = ast.parse(
        "def f(host, server, ns):\n"
        "    host._slots.clear()\n"
        "    self.host._nursery.start_soon(g)\n"
        "    server._respond(200, {})\n"
        "    ns.host._closed = True\n"
        "    self._host._guard\n"
        "    self._slots, host.slots, host.__class__, other._x\n"
    )
    assert sorted((node.lineno, owner, text) for owner, node, text in private_reaches(tree)) == [
        (2, "host", "host._slots"), (3, "host", "self.host._nursery"), (4, "server", "server._respond"),
        (5, "host", "ns.host._closed"), (6, "host", "self._host._guard"),
    ]
