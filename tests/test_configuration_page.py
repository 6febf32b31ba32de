"""docs/configuration.md lists every key of the configuration file, and no other, with its default.

The schema is read from :mod:`runtime.server.config` itself: each section's
accepted keys from the error ``load_config`` gives for an unknown key (which
names the allowed ones), and each key's default from the dataclass that holds
it. Nothing here is copied from the page.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from actors.session_agent import BlockConfig, CompactionConfig, SessionConfig
from actors.session_embeddings import EmbedderConfig
from runtime.server.config import (
    ClusterSettings,
    ConfigError,
    RetentionSettings,
    ServerSettings,
    StorageSettings,
    load_config,
)
from tests.support.data import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "configuration.md"
#: Each section of the file, how to open it in TOML, and the dataclass whose fields give the defaults.
SECTIONS = {
    "[server]": ("[server]", ServerSettings),
    "[storage]": ("[storage]", StorageSettings),
    "[session]": ("[session]", SessionConfig),
    "[[session.blocks]]": ("[[session.blocks]]", BlockConfig),
    "[session.compaction]": ("[session.compaction]", CompactionConfig),
    "[cluster]": ("[cluster]", ClusterSettings),
    "[retention]": ("[retention]", RetentionSettings),
    "[search]": ("[search]", EmbedderConfig),
}
_HEADING = re.compile(r"^#+ `(\[\[?[a-z.]+\]\]?)`\s*$")
_ROW = re.compile(r"^\| `([a-z_]+)` \| ([^|]+) \| ([^|]+) \| (.+) \|$")


def page_tables() -> dict[str, dict[str, tuple[str, str, str]]]:
    """``{section: {key: (type, default, meaning)}}`` from the page's headings and table rows."""
    tables: dict[str, dict[str, tuple[str, str, str]]] = {}
    section = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if heading := _HEADING.match(line):
            section = heading.group(1)
            tables[section] = {}
        elif (row := _ROW.match(line)) and section is not None:
            key, kind, default, meaning = (cell.strip() for cell in row.groups())
            assert key not in tables[section], f"{section} {key} is listed twice"
            tables[section][key] = (kind, default, meaning)
    return tables


def accepted_keys(tmp_path: Path, opening: str) -> set[str]:
    """The keys ``load_config`` accepts in the section that ``opening`` starts ("" for the top level)."""
    path = tmp_path / "probe.toml"
    path.write_text(f"{opening}\nzz_not_a_key = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    found = re.search(r"unknown key \S*zz_not_a_key \(allowed: ([a-z_, ]+)\)", str(raised.value))
    assert found, raised.value
    return set(found.group(1).split(", "))


def test_the_page_has_a_table_for_every_section_and_no_other(tmp_path):
    assert accepted_keys(tmp_path, "") == {"server", "storage", "session", "cluster", "retention", "search"}
    assert set(page_tables()) == set(SECTIONS)


@pytest.mark.parametrize("section", SECTIONS)
def test_every_key_is_documented_and_none_extra(tmp_path, section):
    opening, _ = SECTIONS[section]
    documented = set(page_tables()[section])
    accepted = accepted_keys(tmp_path, opening)
    assert documented - accepted == set(), f"{section}: documented, but the schema has no such key"
    assert accepted - documented == set(), f"{section}: accepted by the schema, missing from the page"
    for key, (kind, default, meaning) in page_tables()[section].items():
        assert kind and default and len(meaning) > 10, f"{section} {key}: a cell is empty"


@pytest.mark.parametrize("section", SECTIONS)
def test_every_default_is_the_schemas(section):
    _, holder = SECTIONS[section]
    fields = {f.name: f for f in dataclasses.fields(holder)}
    for key, (_, cell, _) in page_tables()[section].items():
        field = fields[key]
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            assert cell == "required", f"{section} {key}: has no default, the page says {cell!r}"
            continue
        value = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        if value is None:
            assert cell.startswith("none"), f"{section} {key}: defaults to none, the page says {cell!r}"
        elif dataclasses.is_dataclass(value) or (isinstance(value, tuple) and value
                                                 and dataclasses.is_dataclass(value[0])):
            assert cell.startswith("see `["), f"{section} {key}: a table default, the page says {cell!r}"
        else:
            literal = re.fullmatch(r"`([^`]+)`", cell)
            assert literal, f"{section} {key}: the default {value!r} should be one TOML literal, not {cell!r}"
            documented = tomllib.loads(f"v = {literal.group(1)}")["v"]
            expected = str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
            same_kind = isinstance(documented, bool) == isinstance(expected, bool)
            assert documented == expected and same_kind, \
                f"{section} {key}: the page says {documented!r}, the schema {expected!r}"
