"""`python -m onnxsurgery` ends without the interpreter's teardown (__main__.py): what a
command prints still arrives whole, files are in place, and the exit status is the command's
(0, 2 for a bad input or a usage error), as with the usual exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import builders

ROOT = Path(__file__).resolve().parent.parent


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onnxsurgery", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True)


def test_output_whole_and_status_zero(save, tmp_path):
    src = save(builders.duplicate_initializers())
    r = _run("shrink", src, tmp_path / "o.onnx", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["command"] == "shrink"  # the whole JSON, flushed before the exit
    assert (tmp_path / "o.onnx").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging left


def test_errors_keep_their_status(tmp_path):
    r = _run("shrink", tmp_path / "missing.onnx", tmp_path / "o.onnx")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = _run("shrink", "--no-such-option")
    assert r.returncode == 2 and "No such option" in r.stderr
