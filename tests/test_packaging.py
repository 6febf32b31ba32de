"""What a wheel of the project ships: the license pyproject.toml names, and each package's ``py.typed`` (PEP 561)."""

import subprocess
import sys
import tomllib
import zipfile

from tests.support.data import REPO_ROOT

PACKAGES = ("common", "storage", "actors", "runtime")


def test_the_license_file_is_the_license_pyproject_names():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert (project["license"], project["license-files"]) == ("MIT", ["LICENSE"])  # an SPDX expression (PEP 639)
    text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text


def test_every_package_is_marked_typed():
    assert all((REPO_ROOT / package / "py.typed").is_file() for package in PACKAGES)


def test_the_wheel_ships_the_license_and_the_typed_markers(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path),
                    str(REPO_ROOT)], check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("durable_sessions-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"{package}/py.typed" for package in PACKAGES} <= set(names)
    assert any(".dist-info/" in name and name.endswith("/LICENSE") for name in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata.splitlines()
