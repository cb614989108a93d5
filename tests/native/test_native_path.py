"""`gpugov native path`: prints the installed library, or fails clearly when it is missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpugov import cli
from gpugov.node import native


def test_prints_installed_library(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    (tmp_path / "libgpugov.so").write_bytes(b"\x7fELF")
    monkeypatch.setattr(native, "PACKAGE_NATIVE", tmp_path)
    r = CliRunner().invoke(cli.app, ["native", "path"])
    assert r.exit_code == 0
    assert r.output.strip() == str(tmp_path / "libgpugov.so")


def test_missing_library_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(native, "PACKAGE_NATIVE", tmp_path)
    r = CliRunner().invoke(cli.app, ["native", "path"])
    assert r.exit_code == 1
    assert "was not built" in r.output


def test_installed_package_has_its_library():
    # In a checkout installed with `pip install -e .` or `pip install .` the build put it there.
    path = native.PACKAGE_NATIVE / native.LIBRARY_NAME
    if not path.exists():
        pytest.skip(f"package not built/installed here ({path} missing)")
    assert path.read_bytes()[:4] == b"\x7fELF"
