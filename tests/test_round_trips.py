"""Round trips that used to break (issue: npy -> embed scalars, nothing moved, optional types,
scalar weights), and gs's log lines kept off the terminal. Every result runs in onnxruntime."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from conftest import run
from onnxsurgery.cli import main

DTYPES = [np.float32, np.float16, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_]
SHAPES = [(), (1,), (3,), (2, 3), (2, 1, 3)]


def _read_twice_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """For every dtype and rank (scalars included), a constant read by two Identity nodes whose
    outputs are graph outputs: `npy` moves each out (it is read twice)."""
    rng = np.random.default_rng(0)
    nodes, outputs, inits, values = [], [], [], {}
    for d, dtype in enumerate(DTYPES):
        for s, shape in enumerate(SHAPES):
            name = f"c{d}_{s}"
            value = (rng.random(shape) < 0.5) if dtype is np.bool_ else (rng.random(shape) * 100).astype(dtype)
            values[name] = np.asarray(value, dtype)
            inits.append(numpy_helper.from_array(values[name], name))
            for k in range(2):
                nodes.append(helper.make_node("Identity", [name], [f"{name}_out{k}"]))
                outputs.append(helper.make_tensor_value_info(f"{name}_out{k}", helper.np_dtype_to_tensor_dtype(
                    values[name].dtype), list(shape)))
    return builders.model(nodes, [], outputs, inits), values


def test_npy_then_embed_keeps_every_dtype_and_rank_scalars_included(tmp_path):
    model, values = _read_twice_model()
    src, moved, back = tmp_path / "in.onnx", tmp_path / "moved.onnx", tmp_path / "back.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.npy_file(src, moved, shared=True)  # each read twice, most under 1 KB
    assert sorted(report.pass_report("externalize").details["inputs"]) == sorted(values)
    onnxsurgery.embed_file(moved, back)
    saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(back)).graph.initializer}
    for name, value in values.items():
        assert saved[name].dtype == value.dtype and saved[name].shape == value.shape, name
        assert saved[name].tobytes() == value.tobytes(), name
    for a, b in zip(run(model, {}), run(back, {})):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    for a, b in zip(run(model, {}), onnxsurgery.run_model(moved).values()):  # scalars stay scalars
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_embed_after_npy_moved_nothing_writes_a_copy(tmp_path, save):
    model = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[2, 8])],
                           [builders.vi("y", shape=[2, 4])], [numpy_helper.from_array(builders.rand((8, 4), 1), "W")])
    src = save(model)  # no constant is read twice
    moved, back = tmp_path / "moved.onnx", tmp_path / "back.onnx"
    assert onnxsurgery.npy_file(src, moved).pass_report("externalize").details["inputs"] == []
    r = CliRunner().invoke(main, ["embed", str(moved), str(back)])
    assert r.exit_code == 0, r.output
    feeds = builders.feeds_for(model)
    for a, b in zip(run(model, feeds), run(back, feeds)):
        assert a.tobytes() == b.tobytes()


def test_embed_without_a_manifest_is_still_refused(tmp_path, save):
    src = save(builders.quant_cases())
    r = CliRunner().invoke(main, ["embed", str(src), str(tmp_path / "o.onnx")])
    assert r.exit_code == 2 and "no manifest beside" in r.output
    assert not (tmp_path / "o.onnx").exists()


def test_quant_skips_a_scalar_weight_with_a_reason(tmp_path):
    nodes = [helper.make_node("Mul", ["x", "s"], ["y"])]
    model = builders.model(nodes, [builders.vi("x", shape=[4])], [builders.vi("y", shape=[4])],
                           [numpy_helper.from_array(np.array(0.5, np.float32), "s")])
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    report = onnxsurgery.quant_file(src, out, min_elements=1)
    skipped = {s.name: s.reason for s in report.pass_report("quantize").skipped}
    assert "scalar" in skipped["s"]
    feeds = {"x": np.arange(4, dtype=np.float32)}
    assert run(out, feeds)[0].tolist() == run(model, feeds)[0].tolist()


def _optional_model() -> onnx.ModelProto:
    """An Optional with no input: only its TYPE_PROTO attribute says what it holds (gs does not
    import that attribute type), read inside an If branch as onnx's test_if_opt does."""
    empty = helper.make_node("Optional", [], ["opt"], type=helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    has = helper.make_node("OptionalHasElement", ["opt"], ["has"])
    branch = helper.make_graph([empty, has], "branch", [], [helper.make_tensor_value_info("has", TensorProto.BOOL, [])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    return builders.model([node], [builders.vi("c", TensorProto.BOOL, [])], [builders.vi("y", TensorProto.BOOL, [])],
                          opset=18)


@pytest.mark.parametrize("command", ["shrink", "quant"])
def test_type_proto_attributes_survive(tmp_path, command):
    model = _optional_model()
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    getattr(onnxsurgery, f"{command}_file")(src, out, min_elements=1)
    branch = onnx.load(str(out)).graph.node[0].attribute[0].g
    attr = next(a for a in branch.node[0].attribute if a.name == "type")
    assert attr.type == onnx.AttributeProto.TYPE_PROTO
    assert run(out, {"c": np.array(True)})[0] == run(model, {"c": np.array(True)})[0]


def test_gs_log_lines_stay_off_the_terminal_unless_verbose(tmp_path):
    """A model without an ai.onnx opset import makes gs warn; that warning (and gs's 'colored
    module is not installed') goes through logging: absent by default, shown with -v."""
    model = builders.duplicate_initializers()
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    cli = [sys.executable, "-m", "onnxsurgery"]
    quiet = subprocess.run([*cli, "info", str(src)], capture_output=True, text=True)
    loud = subprocess.run([*cli, "-v", "info", str(src)], capture_output=True, text=True)
    assert quiet.returncode == 0 and loud.returncode == 0, quiet.stderr + loud.stderr
    assert "[W]" not in quiet.stdout + quiet.stderr and "opset" not in quiet.stderr
    assert "[W]" not in loud.stdout + loud.stderr
    assert "onnx_graphsurgeon" in loud.stderr and "opset information" in loud.stderr


def _with_short_external_data(tmp_path):
    model = builders.quant_cases()
    src = tmp_path / "m.onnx"
    onnx.save(model, str(src), save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
              size_threshold=0)
    data = tmp_path / "m.data"
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size // 2)
    return src


@pytest.mark.parametrize("command", [["info"], ["npy", "{out}"], ["shrink", "{out}"], ["quant", "{out}"]])
def test_short_external_data_is_one_line_exit_2_and_leaves_nothing(tmp_path, command):
    src = _with_short_external_data(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "out.onnx"
    r = CliRunner().invoke(main, [command[0], str(src), *[a.format(out=out) for a in command[1:]]])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "m.data is shorter than m.onnx says" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no out.npy/ folder


def test_a_name_that_is_not_utf8_is_bad_input(tmp_path):
    data = builders.quant_cases().SerializeToString()
    at = data.find(b"W_mm")
    src = tmp_path / "bad.onnx"
    src.write_bytes(data[:at] + b"\xff" + data[at + 1:])
    for args in (["info", str(src)], ["shrink", str(src), str(tmp_path / "o.onnx")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "is not UTF-8 text" in r.stderr, r.output
    assert not (tmp_path / "o.onnx").exists()


def test_weights_with_nan_or_inf_are_left_alone_without_numpy_warnings(tmp_path):
    w = builders.rand((64, 64), 1)
    bad = w.copy()
    bad[3, 5] = np.nan
    worse = w.copy() * 1e37  # huge but finite values, and one Inf
    worse[0, 0] = np.inf
    nodes = [helper.make_node("MatMul", ["x", n], [f"y{n}"]) for n in ("W", "N", "I")]
    model = builders.model(nodes, [builders.vi("x", shape=[2, 64])],
                           [builders.vi(f"y{n}", shape=[2, 64]) for n in ("W", "N", "I")],
                           [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (bad, "N"), (worse, "I"))])
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    r = CliRunner().invoke(main, ["quant", str(src), str(tmp_path / "q.onnx"), "--min-elements", "16", "--json"])
    assert r.exit_code == 0 and r.stderr == "", r.output
    import json

    q = next(p for p in json.loads(r.stdout)["passes"] if p["name"] == "quantize")
    assert q["details"]["quantized"] == ["W"]
    assert {s["name"]: s["reason"] for s in q["skipped"]} == {"N": "holds NaN or Inf values",
                                                               "I": "holds NaN or Inf values"}


def test_a_large_tensor_whose_dims_disagree_with_its_bytes_is_bad_input(tmp_path):
    """Large payloads are read lazily (as references into the .onnx): their size is checked
    against the dims too, before anything reads them."""
    model = builders.quant_cases()
    big = max(model.graph.initializer, key=lambda t: len(t.raw_data))
    assert len(big.raw_data) >= 4096
    big.dims[0] -= 1
    src = tmp_path / "bad.onnx"
    onnx.save(model, str(src))
    for args in (["info", str(src)], ["quant", str(src), str(tmp_path / "q.onnx"), "--min-elements", "1"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "its dims" in r.stderr, r.output
