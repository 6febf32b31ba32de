"""The type check: mypy, configured in ``pyproject.toml`` (``[tool.mypy]``), reports no error.

This test runs ``python -m mypy`` from the repository root, so the README's test
command (the one ``.ci/run`` runs) fails on a type error. Without mypy installed
it is skipped, except in CI (``CI`` set), where a missing checker must fail
rather than pass silently.

The other tests pin the configuration itself: the strict modules get every
flag ``mypy --strict`` enables (a per-module ``strict = true`` would switch
strict mode on for the whole run), and every package the project ships is
checked.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Modules the strict override must keep naming (it may name more).
STRICT_MODULES = {"storage.cluster.*", "storage.tree.*", "runtime.api"}
#: Strict flags that are global only (no per-module form), with where they are set instead.
GLOBAL_STRICT_FLAGS = {"warn_redundant_casts": True}  # set in [tool.mypy]


def _config() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)


def _require_mypy() -> None:
    if importlib.util.find_spec("mypy") is None:
        if os.environ.get("CI"):
            pytest.fail("mypy is not installed; CI must run the type check (pip install -e '.[test]')", pytrace=False)
        pytest.skip("mypy is not installed (it comes with the test extra)")


def _strict_override() -> dict[str, Any]:
    overrides = _config()["tool"]["mypy"]["overrides"]
    found = [o for o in overrides if STRICT_MODULES <= set(o["module"])]
    assert len(found) == 1, f"expected one [[tool.mypy.overrides]] naming {sorted(STRICT_MODULES)}, found {found}"
    return found[0]


def test_mypy_reports_no_error() -> None:
    _require_mypy()
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, f"mypy failed (exit {result.returncode}):\n{result.stdout}{result.stderr}"
    assert result.stdout.startswith("Success: no issues found"), result.stdout


def test_strict_modules_get_every_strict_flag() -> None:
    _require_mypy()
    from mypy.main import define_options
    from mypy.options import PER_MODULE_OPTIONS

    _, _, assignments = define_options()
    strict = dict(assignments)
    per_module = {flag: value for flag, value in strict.items() if flag in PER_MODULE_OPTIONS}
    settings = {key: value for key, value in _strict_override().items() if key != "module"}
    assert settings == per_module, "the strict override must list exactly the per-module flags of `mypy --strict`"
    global_only = {flag: value for flag, value in strict.items() if flag not in PER_MODULE_OPTIONS}
    assert set(global_only) == set(GLOBAL_STRICT_FLAGS), f"mypy's global strict flags changed: {global_only}"
    top = _config()["tool"]["mypy"]
    for flag, value in GLOBAL_STRICT_FLAGS.items():
        assert top.get(flag) == value, f"[tool.mypy] {flag} should be {value}"


def test_every_shipped_package_is_checked() -> None:
    config = _config()
    patterns = config["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = {
        path.name for path in ROOT.iterdir()
        if (path / "__init__.py").is_file() and any(fnmatch.fnmatch(path.name, p) for p in patterns)
    }
    assert shipped >= {"storage", "actors", "runtime"}
    assert set(config["tool"]["mypy"]["files"]) == shipped, "[tool.mypy] files must name every shipped package"
