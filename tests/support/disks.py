"""Small real filesystems for the full-disk drills: a loop-mounted ext4 image, filled on purpose.

``with small_ext4(tmp_path, size_mb=24) as mount:`` makes an image file,
formats it (``mkfs.ext4``), mounts it through a loop device and yields the
mount point; the block unmounts it. Mounting needs root (or CAP_SYS_ADMIN)
and a free loop device: where that is not permitted the test is skipped,
except under CI (``CI`` set), where it fails instead: CI runs as root and
must run these drills.

:func:`fill` takes every free block with a filler file (as root, the
blocks ext4 reserves for root too); :func:`free` removes it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FILLER = "filler.bin"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the full-disk drill cannot run in CI: {reason}")
    pytest.skip(f"cannot mount a small ext4 filesystem here: {reason}")


@contextmanager
def small_ext4(tmp_path: Path, *, size_mb: int = 24) -> Iterator[Path]:
    """A fresh ext4 filesystem of ``size_mb`` MiB mounted under ``tmp_path`` (see the module docstring)."""
    if os.geteuid() != 0:
        _unavailable("not root")
    mkfs = shutil.which("mkfs.ext4") or shutil.which("mkfs.ext4", path="/sbin:/usr/sbin")
    if mkfs is None:
        _unavailable("mkfs.ext4 is not installed")
    image, mount = tmp_path / "disk.img", tmp_path / "disk"
    mount.mkdir()
    with image.open("wb") as file:
        file.truncate(size_mb * 1024 * 1024)
    formatted = subprocess.run([mkfs, "-q", "-F", str(image)], capture_output=True, text=True)
    if formatted.returncode != 0:
        _unavailable(f"mkfs.ext4 failed: {formatted.stderr.strip()}")
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True, text=True)
    if mounted.returncode != 0:
        _unavailable(f"mount failed: {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(mount: Path) -> int:
    """Write a filler file until the filesystem refuses (``ENOSPC``); the bytes written."""
    written = 0
    block = b"\0" * 65536
    with open(mount / FILLER, "ab", buffering=0) as file:
        for size in (65536, 4096, 512, 1):
            while True:
                try:
                    written += file.write(block[:size])
                except OSError:
                    break
        try:
            os.fsync(file.fileno())
        except OSError:
            pass
    return written


def free(mount: Path) -> None:
    """Remove the filler file."""
    (mount / FILLER).unlink(missing_ok=True)
