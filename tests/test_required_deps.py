"""Issue 57, item 15: tests never skip silently under `make test` for want of a package. Every
package a test imports through pytest.importorskip is in the dev extra (which `make install`
installs), and `make test` runs pytest with --require-deps (tests/conftest.py), under which a
missing one fails the run instead of skipping its tests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def dev_extra() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    line = next(line for line in text.splitlines() if line.startswith("dev = ["))
    return {re.split(r"[<>=\[ ]", name)[0].lower().replace("-", "_") for name in re.findall(r'"([^"]+)"', line)}


def test_the_dev_extra_has_every_package_the_tests_import_or_skip():
    wanted = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        wanted |= set(re.findall(r'importorskip\("([\w.]+)"', path.read_text()))
    assert wanted, "no importorskip found: the scan is broken"
    assert sorted(wanted - dev_extra()) == []


def test_make_test_fails_rather_than_skips_on_a_missing_package(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('project_conftest', {str(ROOT / 'tests' / 'conftest.py')!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "pytest_addoption, pytest_configure = module.pytest_addoption, module.pytest_configure\n")
    (tmp_path / "test_needs.py").write_text(
        "import pytest\n\n\ndef test_it():\n    pytest.importorskip('no_such_package_here')\n")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
               str(tmp_path / "test_needs.py")]
    relaxed = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert relaxed.returncode == 0 and "1 skipped" in relaxed.stdout, relaxed.stdout
    strict = subprocess.run(command + ["--require-deps"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert strict.returncode == 1 and "1 failed" in strict.stdout, strict.stdout
    assert "no_such_package_here" in strict.stdout and "make install" in strict.stdout
    assert "--require-deps" in (ROOT / "Makefile").read_text()
