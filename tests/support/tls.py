"""A self-signed certificate for ``localhost`` and ``127.0.0.1``, made at test time with the ``openssl`` command."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["self_signed"]


def self_signed(folder: Path) -> tuple[Path, Path]:
    """``(certfile, keyfile)`` of a new self-signed certificate (PEM; valid 2 days) under ``folder``.

    The certificate is its own CA: a client trusts it with ``verify=str(certfile)`` or ``SSL_CERT_FILE``.
    Skips the test when ``openssl`` is not installed.
    """
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key
