"""`quant --help` a person can read (issue 49, item 9): the options in five groups, one line
each at 80 columns, and one word for where the result runs (`--target`), the older `--runtime`
kept as a hidden alias; the top-level help says where to start."""

from __future__ import annotations

import json

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import helper, numpy_helper

import builders
from onnxsurgery.cli import main
from onnxsurgery.cli.options import GROUPS
from onnxsurgery.quantization.request import WHERE_IT_RUNS


def _help(*args: str) -> str:
    r = CliRunner().invoke(main, [*args, "--help"], terminal_width=80)
    assert r.exit_code == 0, r.output
    return r.output


def test_quant_help_is_grouped_and_short():
    text = _help("quant")
    lines = text.splitlines()
    assert len(lines) <= 70
    assert [line[:-1] for line in lines if line[:-1] in GROUPS] == list(GROUPS)
    options = [line for line in lines if line.startswith("  -")]
    assert len(options) >= 30 and all(len(line) <= 80 for line in lines)
    # one line per option: no option's help runs onto a second line
    continued = [line for line in lines if line.startswith(" " * 10) and line.strip()]
    assert continued == [], continued
    assert "--runtime" not in text and "docs/quantization.md" in text
    where = lines[lines.index("Where it runs:") + 1:]
    assert where[0].split()[0] == "--target" and "onnxruntime-web" in where[0]


def test_top_level_help_says_where_to_start():
    text = _help()
    assert "Start with `onnxsurgery info MODEL`" in text
    commands = [line.split()[0] for line in text.split("Commands:")[1].splitlines() if line.strip()]
    assert commands[:3] == ["info", "shrink", "quant"]


def test_where_it_runs_covers_every_target():
    from onnxsurgery.quantization.options import TARGETS

    assert set(TARGETS) <= set(WHERE_IT_RUNS) and set(WHERE_IT_RUNS) - set(TARGETS) == {"onnxruntime-web"}


def _model(path):
    w = builders.rand((64, 64), 1)
    m = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[2, 64])],
                       [builders.vi("y", shape=[2, 64])], [numpy_helper.from_array(w, "W")])
    onnx.save(m, str(path))
    return path


def test_target_onnxruntime_web_and_the_old_runtime_spelling_agree(tmp_path):
    src = _model(tmp_path / "in.onnx")
    reports = {}
    for name, args in (("target", ["--target", "onnxruntime-web"]), ("runtime", ["--runtime", "onnxruntime-web"]),
                       ("default", [])):
        r = CliRunner().invoke(main, ["-q", "quant", str(src), str(tmp_path / f"{name}.onnx"), "--min-elements",
                                      "1024", "--keep-quantized", "--json", *args])
        assert r.exit_code == 0, r.output
        reports[name] = json.loads(r.output)
    for name in ("target", "runtime"):
        assert "as onnxruntime-web computes" in reports[name]["verification"]["runtime"]
        assert reports[name]["weights"] == reports["default"]["weights"]  # standard ops, as target any
    assert "onnxruntime-web" not in reports["default"]["verification"]["runtime"]
    a, b = (onnx.load(str(tmp_path / f"{n}.onnx")) for n in ("target", "runtime"))
    assert [n.op_type for n in a.graph.node] == [n.op_type for n in b.graph.node]
    assert np.array_equal(numpy_helper.to_array(a.graph.initializer[0]), numpy_helper.to_array(b.graph.initializer[0]))


def test_target_onnxruntime_web_is_refused_beside_tensorrt_in_one_line(tmp_path):
    src = _model(tmp_path / "in.onnx")
    r = CliRunner().invoke(main, ["-q", "quant", str(src), str(tmp_path / "o.onnx"), "--target", "tensorrt",
                                  "--runtime", "onnxruntime-web"])
    assert r.exit_code == 2 and "pick one" in r.output and len(r.output.strip().splitlines()) == 1
