"""``common`` is the bottom of the house: importing all of it loads nothing of the project above it.

Storage, actors, the runtime and the client all import these modules, so
they must stay light: no SQLite (apsw), no Postgres driver, no trio, no web
framework, and none of ``storage``, ``actors`` or ``runtime``. Checked in a
fresh interpreter, since this test process has long since imported them all.
``tests/test_layering.py`` checks the same rule on the source.
"""

from __future__ import annotations

import json
import pkgutil
from pathlib import Path

from tests.support.processes import run_fresh_python

ROOT = Path(__file__).resolve().parents[2]
#: What no module of ``common`` may load, directly or through another package.
HEAVY = ["apsw", "psycopg", "psycopg_pool", "trio", "quart", "quart_trio", "hypercorn", "werkzeug",
         "storage", "actors", "runtime"]


def common_modules() -> list[str]:
    return ["common"] + [f"common.{info.name}" for info in pkgutil.iter_modules([str(ROOT / "common")])]


def test_the_module_list_is_what_common_holds():
    assert common_modules() == [
        "common", "common.archive", "common.errors", "common.openai_items", "common.openai_session", "common.shapes",
        "common.transcript_summary", "common.wire",
    ]


def test_importing_every_module_of_common_loads_nothing_heavy_and_nothing_of_the_project_above():
    code = ("import json, sys\n"
            f"import {', '.join(common_modules())}\n"
            "print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(run_fresh_python(code))
    assert set(common_modules()) <= set(loaded)
    assert [p for p in HEAVY if any(m == p or m.startswith(p + ".") for m in loaded)] == []
