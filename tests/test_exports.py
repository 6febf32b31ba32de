"""The public surface of each package, pinned (as trio's ``test_exports.py`` and httpx's ``test_exported_members.py``).

What users import is what a package's ``__init__.py`` lists in ``__all__``
(docs/architecture.md, "The public surface"). Adding or removing a name is an API change:
it must show up here as a one-line diff. ``runtime`` and ``storage`` resolve
their names on first use (PEP 562 ``__getattr__``), so resolution is also
checked in a fresh interpreter where nothing was imported before.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil

import pytest

from tests.support.processes import run_fresh_python

PUBLIC_SURFACE = {
    "storage": [
        "PostgresContextProvider", "PostgresSearchProvider", "PostgresSessionProvider", "PostgresStorage",
        "SchemaTooNewError",
        "SearchQueryError", "SqlStorage", "StorageClosedError", "StorageError",
    ],
    "actors": [
        "Agent", "AgentContext", "AgentContextProvider", "AgentSearchProvider", "AlarmInfo", "BlockConfig",
        "CompactionConfig", "CompactionError", "ConflictError", "ConnectionLike", "ContextBlock", "ContextBlockError",
        "ContextBlocks", "ContextProvider", "DirectorySkillProvider", "InvalidInputError", "InvalidMessageError",
        "ManagerAgent", "MessageNotFoundError", "NotFoundError", "SearchProvider", "Session", "SessionAgent",
        "SessionConfig", "SessionError", "SessionManager", "SkillProvider", "Tool", "WritableContextProvider",
    ],
    "runtime": [
        "ActorHost", "ActorId", "ActorOverloadedError", "ActorRuntimeError", "ActorStub", "DurableAgentsSession",
        "DurableSessionStore", "HostClock", "HostClosedError", "HostStatistics", "InvalidActorIdError", "InvalidArgumentsError",
        "InvalidNamespaceError", "Namespace", "SessionsClient", "TransactionLeftOpenError", "UnknownMethodError",
        "UnknownNamespaceError", "create_app", "open_host", "serve",
    ],
    "runtime.host": ["ActorHost", "ActorId", "ActorStub", "HostClock", "HostStatistics", "Namespace", "open_host"],
    "runtime.server": ["DEFAULT_NAMESPACE", "SessionsServer", "bind_managers", "bind_sessions", "create_app",
                       "require_token_for", "serve"],
    "runtime.client": ["ConnectionClosed", "DEFAULT_URL", "DurableAgentsSession", "DurableSessionStore",
                       "LATEST_LEAF", "ManagedSessionHandle", "ManagerHandle", "SessionHandle", "SessionSocket",
                       "SessionsClient"],
    "runtime.cli": ["main"],
}

#: Packages whose ``__init__`` resolves names lazily (PEP 562).
LAZY_PACKAGES = ["runtime", "storage"]

PROJECT_PACKAGES = ("common", "storage", "actors", "runtime")


def project_modules() -> list[str]:
    """Every module of the four packages except ``__main__`` (importing it runs the command)."""
    names = []
    for package in PROJECT_PACKAGES:
        names.append(package)
        path = importlib.import_module(package).__path__
        names += [info.name for info in pkgutil.walk_packages(path, package + ".")
                  if info.name.rpartition(".")[2] != "__main__"]
    return names


def is_public(module_name: str) -> bool:
    return not any(part.startswith("_") for part in module_name.split("."))


@pytest.mark.parametrize("package", list(PUBLIC_SURFACE))
def test_all_is_exactly_the_pinned_surface(package):
    exported = importlib.import_module(package).__all__
    assert sorted(exported) == PUBLIC_SURFACE[package]
    assert len(set(exported)) == len(exported), "a name is listed twice"


@pytest.mark.parametrize("package", list(PUBLIC_SURFACE))
def test_every_exported_name_imports_from_the_package(package):
    namespace = {}
    exec(f"from {package} import {', '.join(PUBLIC_SURFACE[package])}", namespace)
    module = importlib.import_module(package)
    for name in PUBLIC_SURFACE[package]:
        assert namespace[name] is getattr(module, name), name


@pytest.mark.parametrize("package", list(PUBLIC_SURFACE))
def test_exported_classes_and_functions_come_from_this_project(package):
    module = importlib.import_module(package)
    origins = {name: getattr(module, name).__module__ for name in PUBLIC_SURFACE[package]
               if inspect.isclass(getattr(module, name)) or inspect.isfunction(getattr(module, name))}
    assert origins, "nothing exported is a class or function"
    assert {name: origin for name, origin in origins.items() if origin.partition(".")[0] not in PROJECT_PACKAGES} == {}


@pytest.mark.parametrize("package", list(PUBLIC_SURFACE))
def test_dir_lists_every_exported_name(package):
    assert set(PUBLIC_SURFACE[package]) - set(dir(importlib.import_module(package))) == set()


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_a_lazy_package_resolves_every_name_in_a_fresh_interpreter(package):
    code = (f"import json, {package}\n"
            f"listed = set(dir({package}))\n"
            f"namespace = {{}}\n"
            f"exec('from {package} import *', namespace)\n"
            f"print(json.dumps({{'star': sorted(k for k in namespace if not k.startswith('__')),\n"
            f"                  'unlisted_before_use': sorted(set({package}.__all__) - listed)}}))")
    result = json.loads(run_fresh_python(code))
    assert result == {"star": PUBLIC_SURFACE[package], "unlisted_before_use": []}


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_a_lazy_package_refuses_an_unknown_name(package):
    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'NoSuchName'"):
        module.NoSuchName  # noqa: B018


@pytest.mark.parametrize("module_name", [name for name in project_modules() if is_public(name)])
def test_no_public_module_exports_a_private_or_missing_name(module_name):
    module = importlib.import_module(module_name)
    exported = getattr(module, "__all__", [])
    assert [name for name in exported if name.startswith("_")] == []
    assert [name for name in exported if not hasattr(module, name)] == []
