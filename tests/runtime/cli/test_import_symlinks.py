"""``import`` refuses symbolic links among its inputs with one line (issue 26): real links, real processes."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.data import TEST_DATA
from tests.support.processes import cli_command, cli_env


def run_import(*args):
    return subprocess.run([*cli_command(), "import", *args, "--no-progress"], env=cli_env(None),
                          capture_output=True, text=True, timeout=120)


def claude_code_file():
    return sorted((TEST_DATA / "claude_code").rglob("*.jsonl"))[0]


@pytest.mark.parametrize("source", ["openai_chat", "claude_code"])
def test_import_refuses_an_input_file_that_is_a_symbolic_link(tmp_path, source):
    original = TEST_DATA / "openai_chat" / "tau-bench-airline-3.json" if source == "openai_chat" else claude_code_file()
    link = tmp_path / f"link{original.suffix}"
    link.symlink_to(original)
    refused = run_import(str(link), "--data", str(tmp_path / "data"))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"durable-sessions import: {link} is a symbolic link; import follows no links (give the file itself)"]
    assert not (tmp_path / "data").exists()  # refused before anything was opened


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_import_of_a_folder_refuses_a_symbolic_link_below_it(tmp_path, linked):
    folder = tmp_path / "projects" / "one"
    folder.mkdir(parents=True)
    shutil.copy(claude_code_file(), folder / "real.jsonl")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(claude_code_file(), outside / "elsewhere.jsonl")
    link = folder / "linked.jsonl" if linked == "file" else tmp_path / "projects" / "linked"
    link.symlink_to(outside / "elsewhere.jsonl" if linked == "file" else outside)
    refused = run_import(str(tmp_path / "projects"), "--format", "claude-code", "--data", str(tmp_path / "data"))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"durable-sessions import: {link} is a symbolic link; import follows no links (copy the file itself)"]
    link.unlink()  # without the link the same folder imports
    accepted = run_import(str(tmp_path / "projects"), "--format", "claude-code", "--data", str(tmp_path / "data"))
    assert accepted.returncode == 0, accepted.stderr
