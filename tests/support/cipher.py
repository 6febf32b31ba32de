"""The cipher-capable apsw (``apsw-sqlite3mc``, extra ``encryption``) for the encryption tests' processes.

The project's own environment keeps plain apsw (the dependency every install
gets). The two wheels install the same ``apsw`` module, so the cipher build
is put in a folder of its own (``pip install --target DIR --no-deps
apsw-sqlite3mc``, as ``.ci/run`` does) and the encryption tests run their
``durable-sessions`` processes with ``PYTHONPATH=DIR``, which Python searches
before the environment's ``site-packages``. :func:`cipher_pythonpath` finds it:

* the test interpreter's apsw is the cipher build already: ``""`` (nothing to add);
* ``$DURABLE_SESSIONS_TEST_SQLITE3MC`` names such a folder: that folder;
* otherwise the tests skip, except in CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: The variable naming the folder the cipher build was installed into (``pip install --target``).
FOLDER_ENV = "DURABLE_SESSIONS_TEST_SQLITE3MC"
_PROBE = "import apsw; c = apsw.Connection(':memory:'); print(c.execute('SELECT sqlite3mc_version()').fetchone()[0])"


def is_cipher_build(pythonpath: str) -> bool:
    """Whether this interpreter loads the cipher build of apsw under ``PYTHONPATH=pythonpath`` (``""``: as is)."""
    env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else dict(os.environ)
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=60)
    return done.returncode == 0 and "Multiple Ciphers" in done.stdout


def cipher_pythonpath() -> str:
    """The ``PYTHONPATH`` under which this interpreter loads the cipher build (``""``: it does already).

    Skips the calling test when there is none, or fails it in CI.
    """
    if is_cipher_build(""):
        return ""
    folder = os.environ.get(FOLDER_ENV, "")
    if folder and is_cipher_build(folder):
        return folder
    reason = (f"no cipher-capable apsw: pip install --target DIR --no-deps apsw-sqlite3mc and set {FOLDER_ENV}=DIR"
              + (f" ({folder} holds none)" if folder else ""))
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
