"""`python -m onnxsurgery shrink` loads only what its path uses (issue 58's import floor): not
hashlib (OpenSSL's libcrypto, for merging's blake2b, which `_blake2` gives alone), not the
optional passes it was not asked for, and it runs with the cyclic collector resumed after the
start's pause (__main__.py, cli/common.py's _load_stack) and the imports frozen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import builders

ROOT = Path(__file__).resolve().parent.parent

# the command run as `python -m onnxsurgery` does, then what it loaded and the collector's state,
# written at exit (__main__.py runs the exit functions before its quick exit)
PROBE = """
import atexit, gc, json, runpy, sys
out = sys.argv[1]
def said():
    with open(out, "w") as f:
        json.dump({"modules": sorted(sys.modules), "collecting": gc.isenabled(), "frozen": gc.get_freeze_count()}, f)
atexit.register(said)
sys.argv = ["onnxsurgery", *sys.argv[2:]]
runpy.run_module("onnxsurgery", run_name="__main__")
"""


def _probe(tmp_path, *args) -> dict:
    said = tmp_path / "said.json"
    r = subprocess.run([sys.executable, "-c", PROBE, str(said), *map(str, args)], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(said.read_text())


def test_shrink_loads_only_its_path(save, tmp_path):
    src = save(builders.duplicate_initializers())
    got = _probe(tmp_path, "-q", "shrink", src, tmp_path / "o.onnx")
    assert (tmp_path / "o.onnx").is_file()
    modules = set(got["modules"])
    assert "onnxsurgery.passes.digests" in modules  # the probe saw the command run (either path: shrink_direct.py)
    unused = {"hashlib", "_hashlib", "onnxsurgery.passes.narrow_types", "onnxsurgery.passes.merge_transposed",
              "onnxsurgery.passes.merge_reshaped", "onnxsurgery.passes.bypass_identity",
              "onnxsurgery.passes.quantize_weights", "onnxsurgery.html_report", "onnxsurgery.running.verify"}
    assert modules & unused == set()
    assert got["collecting"] and got["frozen"] > 0


def test_direct_path_loads_no_graph_library(save, tmp_path):
    """A model whose only change is merging initializers is shrunk on its proto (shrink_direct.py):
    no onnx-graphsurgeon, nor the modules of ours that load it, in the process (albert17)."""
    src = save(builders.duplicate_initializers())
    got = _probe(tmp_path, "-q", "shrink", src, tmp_path / "o.onnx")
    modules = set(got["modules"])
    assert "onnxsurgery.api.shrink_direct" in modules and (tmp_path / "o.onnx").is_file()
    graph_side = {"onnx_graphsurgeon", "onnxsurgery.graph_utils", "onnxsurgery.storage.file_backed",
                  "onnxsurgery.pipeline"}
    assert modules & graph_side == set()


def test_asked_for_passes_still_load(save, tmp_path):
    src = save(builders.duplicate_initializers())
    got = _probe(tmp_path, "-q", "shrink", "--narrow", "--transposed", "--reshaped", src, tmp_path / "o.onnx")
    assert {"onnxsurgery.passes.narrow_types", "onnxsurgery.passes.merge_transposed",
            "onnxsurgery.passes.merge_reshaped", "onnx_graphsurgeon"} <= set(got["modules"])


def test_help_leaves_no_pause_behind_in_a_library_process():
    # the pause is __main__'s alone: importing the CLI in a script keeps the caller's collector
    code = "import gc, onnxsurgery.cli, onnxsurgery.cli.common as c; print(gc.isenabled(), c._resume_collector)"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["True", "False"]
