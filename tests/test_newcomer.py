"""Issue 57: a newcomer's first hour, as a test. The README's own commands, in order, from a fresh
folder laid out as a checkout (only `samples/` in it), the way a newcomer types them after the
set-up the README describes: every command exits 0 and says nothing on stderr, the round trips
it shows come back whole (the plan `--dry-run --json` writes applied by `--plan`, on a model
folder; npy -> run -> embed bit-identical), nothing hidden is left behind, and the Python API
block runs. tests/test_docs.py compares the printed lines; this checks what the commands leave.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def readme_commands() -> list[str]:
    return [line[2:] for lang, code in BLOCK.findall(README) if lang == "console"
            for line in code.splitlines() if line.startswith("$ ")]


def test_the_readme_shows_the_round_trips_and_what_set_up_costs():
    commands = readme_commands()
    plan = next(c for c in commands if "--dry-run --json >" in c)
    applied = next(c for c in commands if "--plan" in c)
    assert shlex.split(plan)[-1] in shlex.split(applied)  # the plan written is the plan applied
    assert Path(shlex.split(plan)[2]).suffix == ""  # ... of a model folder
    assert any(c.startswith("onnxsurgery embed") for c in commands)
    for words in ("python3-venv", "make", "package index", "300 MB", "470 MB", "7 minutes"):
        assert words in README, words


@pytest.fixture(scope="module")
def toured(tmp_path_factory) -> Path:
    """A fresh folder with the README's commands run in it, in order."""
    folder = tmp_path_factory.mktemp("newcomer")
    (folder / "samples").symlink_to(ROOT / "samples")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}  # this checkout's code, as make install gives
    for command in readme_commands():
        args = shlex.split(command)
        into = None
        if len(args) > 2 and args[-2] == ">":
            args, into = args[:-2], folder / args[-1]
        args = [sys.executable, *(["-m", "onnxsurgery"] if args[0] == "onnxsurgery" else []), *args[1:]]
        proc = subprocess.run(args, cwd=folder, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0 and not proc.stderr.strip(), f"$ {command}\n{proc.stderr}"
        if into is not None:
            into.write_text(proc.stdout)
    code = next(code for lang, code in BLOCK.findall(README) if lang == "python")
    proc = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return folder


def test_the_plan_and_folder_round_trip(toured):
    build = toured / "build"
    plans = json.loads((build / "plan.json").read_text())
    assert list(plans) == ["encoder_shared.onnx"] and plans["encoder_shared.onnx"]["weights"]
    reports = json.loads((build / "export-int8.json").read_text())
    assert "every weight as the plan says" in reports["notes"]
    assert sorted(p.name for p in (build / "export-int8").iterdir()) == sorted(p.name for p in
                                                                             (build / "export").iterdir())


def test_npy_run_embed_round_trip_is_exact(toured):
    build = toured / "build"
    assert len(list((build / "graph.npy").glob("*.npy"))) == len(json.loads((build / "graph.npy.json").read_text())
                                                                  ["inputs"]) > 0
    import onnxsurgery

    assert onnxsurgery.compare(build / "small.onnx", build / "back.onnx")["exact"]


def test_nothing_hidden_is_left_behind(toured):
    hidden = [str(p.relative_to(toured)) for p in toured.rglob(".*")]
    assert hidden == []
