"""Issue 57, item 2: SIGTERM and SIGHUP (`kill PID`, a closed terminal) leave nothing behind, as
Ctrl-C does: no hidden staging folder beside the output, no report scratch folder, no output;
and each says in one line that nothing was written. The signal is sent by the process itself at
a set point (while the staged output waits to be put in place; while the report's scratch folder
holds the methods' files), so the test does not race the command."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import builders

ROOT = Path(__file__).resolve().parents[1]

# Run the CLI with one function patched to signal its own process first.
DRIVER = """
import os, signal, sys, time
import importlib
module, name, signum = sys.argv[1], sys.argv[2], int(sys.argv[3])
# Ctrl-C as a terminal's foreground process gets it: a shell's background job (nohup, `&`, some CI
# runners) starts with SIGINT ignored, and Python then leaves it ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
owner, _, attr = name.rpartition(".")
target = importlib.import_module(module)
holder = getattr(target, owner) if owner else target
original = getattr(holder, attr)
def patched(*args, **kwargs):
    os.kill(os.getpid(), signum)
    time.sleep(5)  # the handler runs here
    return original(*args, **kwargs)
setattr(holder, attr, patched)
from onnxsurgery.cli import main
sys.argv = ["onnxsurgery", *sys.argv[4:]]
main()
"""


def interrupted(at: str, signum: int, *args) -> subprocess.CompletedProcess:
    module, _, name = at.partition(":")
    return subprocess.run([sys.executable, "-c", DRIVER, module, name, str(int(signum)), "-q", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("signum, words", [(signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP"),
                                           (signal.SIGINT, "Ctrl-C")])
def test_quant_interrupted_while_staged_leaves_nothing_and_says_so(tmp_path, save, signum, words):
    src = save(builders.quant_cases(), "q.onnx")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = interrupted("onnxsurgery.storage.staging:StagedModel.commit", signum, "quant", src, out_dir / "q8.onnx")
    assert r.returncode == 128 + signum, r.stderr
    assert r.stderr.strip() == f"onnxsurgery: interrupted ({words}); nothing was written", r.stderr
    assert list(out_dir.iterdir()) == []  # no output, no hidden staging folder or spill file


def test_report_interrupted_leaves_no_scratch_folder(tmp_path, save):
    src = save(builders.duplicate_initializers(), "d.onnx")
    r = interrupted("onnxsurgery.html_report:measure_methods", signal.SIGTERM, "report", src, "-o",
                    tmp_path / "r.html", "--methods", "shrink")
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    assert "nothing was written" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert leftovers(tmp_path) == [] and not (tmp_path / "r.html").exists()


def test_shrink_of_several_inputs_says_nothing_more_was_written(tmp_path, save):
    """Outputs already put in place stay (they are complete); the line says nothing *more*."""
    a = save(builders.duplicate_initializers(), "a.onnx")
    b = save(builders.duplicate_constant_nodes(), "b.onnx")
    dest = tmp_path / "dest"
    dest.mkdir()
    driver = DRIVER.replace("def patched(*args, **kwargs):\n", "calls = []\ndef patched(*args, **kwargs):\n"
                            "    calls.append(1)\n    if len(calls) < 2:\n        return original(*args, **kwargs)\n")
    r = subprocess.run([sys.executable, "-c", driver, "onnxsurgery.storage.staging", "StagedModel.commit",
                        str(int(signal.SIGTERM)), "-q", "shrink", str(a), str(b), str(dest)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr
    assert "onnxsurgery: interrupted (SIGTERM); nothing more was written" in r.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["a.onnx"]
