"""Where the test data lives: copies kept in the repository and the optional shared set.

The data set (``../shared/data`` beside the repository) is not part of the
repository. CI has it at ``../shared`` beside the clone; set
``DURABLE_SESSIONS_SHARED_DATA`` to point elsewhere. Tests that need it ask
for the ``shared_data`` fixture (or the parametrised ``claude_code_log_file``)
and are skipped, with the reason, when it is absent. Small copies under
``tests/data/`` always run.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Fixtures copied into the repository (always present).
TEST_DATA = REPO_ROOT / "tests" / "data"

#: The Claude Code transcripts of the shared data set, relative to it.
CLAUDE_CODE_LOG = Path("claude_code") / "claude-code-log"


def _shared_data_candidate() -> Path:
    configured = os.environ.get("DURABLE_SESSIONS_SHARED_DATA")
    return Path(configured) if configured else REPO_ROOT.parent / "shared" / "data"


def shared_data_dir() -> Path | None:
    """The shared data folder, or ``None`` when it is not on this machine."""
    path = _shared_data_candidate()
    return path if path.is_dir() else None


def missing_reason() -> str:
    return f"shared data not found at {_shared_data_candidate()} (set DURABLE_SESSIONS_SHARED_DATA)"


def claude_code_log_files() -> list[Path]:
    """Every ``.jsonl`` of the shared Claude Code data, sorted; ``[]`` if absent."""
    root = shared_data_dir()
    if root is None or not (root / CLAUDE_CODE_LOG).is_dir():
        return []
    return sorted((root / CLAUDE_CODE_LOG).rglob("*.jsonl"))
