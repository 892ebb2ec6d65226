"""Issue 49, item 1: a tf2onnx BERT's [1,1,8,16,128] copies of its [128,128] weights, read only
by Shape (30% of the file), and copies under another shape read as values. `shrink` removes
the first (each Shape becomes its shape) and merges the second through a Reshape, bit-identical
in onnxruntime, and never where the Reshape costs more than it saves."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from click.testing import CliRunner
from conftest import all_tensors, assert_same_outputs, builders, run
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.cli import main
from onnxsurgery.passes import merge_reshaped as merge_reshaped_module
from onnxsurgery.graph_api import fold_shape_only_constants, merge_reshaped_constants
from onnxsurgery.passes.shape_only import shape_slice

HIDDEN = 128
WEIGHT_BYTES = HIDDEN * HIDDEN * 4


def _cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def test_shrink_cli_drops_shape_only_copies_and_reshapes_the_other_bit_identical(save, tmp_path):
    m = builders.tf2onnx_shape_copies(HIDDEN)
    src, out = save(m), tmp_path / "out.onnx"
    data = json.loads(_cli("shrink", src, out, "--reshaped", "--verify", "--json").output)
    saved = onnx.load(str(out))
    onnx.checker.check_model(saved, full_check=True)
    passes = {p["name"]: p for p in data["passes"]}
    # S0 (main graph, two Shape readers) and then_S1 (a Constant node in an If branch) are gone
    assert {c["name"] for c in passes["shape_only"]["details"]["constants"]} == {"S0", "then_S1"}
    # R1 (read by Mul) is W1 under another shape: one Reshape of W1
    assert [(d["name"], d["reshape_of"]) for d in passes["merge_reshaped"]["details"]["merged"]] == [("R1", "W1")]
    big = [t for t in all_tensors(saved) if np.prod(t.dims) >= HIDDEN * HIDDEN]
    assert sorted(t.name for t in big) == ["W0", "W1"]
    assert [n.op_type for n in saved.graph.node].count("Reshape") == 3  # two of the model's, one of ours
    # the tiny pair (2x8 and 16) is left alone: a Reshape costs more than its 64 bytes
    assert {"T", "T_flat"} <= {t.name for t in saved.graph.initializer}
    size_in, size_out = src.stat().st_size, out.stat().st_size
    assert size_in - size_out > 3 * WEIGHT_BYTES - 1024 and data["bytes_after"] == size_out
    assert data["verification"]["exact"]
    assert_same_outputs(m, out)  # both If branches (feeds_for alternates the condition)


def test_shape_start_and_end_as_onnx_reads_them():
    dims = (1, 1, 8, 16, 128)
    assert shape_slice(dims, None, None) == list(dims)
    assert shape_slice(dims, 2, 3) == [8]
    assert shape_slice(dims, -2, None) == [16, 128]
    assert shape_slice(dims, -9, 2) == [1, 1]  # clamped to the rank
    assert shape_slice(dims, 3, 99) == [16, 128]
    assert shape_slice(dims, 4, 2) == []
    assert shape_slice((), None, None) == []


@pytest.mark.parametrize("start, end", [(None, None), (1, None), (-2, None), (0, -1), (-7, 9), (3, 1)])
def test_each_start_and_end_gives_what_onnxruntime_computes(start, end):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    c = builders.rand((2, 3, 4, 5), 1)
    dims = [len(shape_slice(c.shape, start, end))]
    m = builders.model([helper.make_node("Shape", ["C"], ["s"], **attrs)], [],
                       [builders.vi("s", TensorProto.INT64, dims)], [numpy_helper.from_array(c, "C")])
    result, report = onnxsurgery.shrink(m)
    assert report.pass_report("shape_only").changed == 1
    assert not result.graph.initializer
    assert run(result, {})[0].tolist() == run(m, {})[0].tolist() == shape_slice(c.shape, start, end)


def test_shape_only_reads_no_value(monkeypatch):
    """Decided on dtype, shape and readers: a weight's bytes are never read."""
    graph = onnxsurgery.import_graph(builders.tf2onnx_shape_copies(HIDDEN))

    def refuse(*_):
        raise AssertionError("a value was read")

    for c in graph.tensors().values():
        if isinstance(c, gs.Constant):
            monkeypatch.setattr(c._values, "load", refuse, raising=False)
    report = fold_shape_only_constants(graph)
    assert report.changed == 2  # S0 (two Shape readers, 1 and 5 dims) and then_S1 (one, 1 dim)
    assert report.bytes_saved == 2 * WEIGHT_BYTES - 3 * 16 - 8 * (1 + 5 + 1)


def test_reshaped_merge_fingerprints_only_sizes_held_under_two_shapes(monkeypatch):
    seen = []
    real = merge_reshaped_module.fingerprint

    def counting(tensor, nbytes):
        seen.append(tensor.name)
        return real(tensor, nbytes)

    monkeypatch.setattr(merge_reshaped_module, "fingerprint", counting)
    m = builders.tf2onnx_shape_copies(HIDDEN)
    graph = onnxsurgery.import_graph(m)
    extra = gs.Constant("lonely", builders.rand((7, 9), 3))  # a size no other tensor has
    graph.nodes.append(gs.Node("Add", inputs=[graph.inputs[0], graph.inputs[0]],
                               outputs=[gs.Variable("unused", dtype=np.float32)]))
    graph.nodes.append(gs.Node("Identity", inputs=[extra], outputs=[gs.Variable("lonely_out", dtype=np.float32)]))
    fold_shape_only_constants(graph)
    merge_reshaped_constants(graph)
    assert "lonely" not in seen
    assert sorted(seen) == ["R1", "T", "T_flat", "W0", "W1"]  # 16384 floats: three tensors; 16 floats: two


def _reshaped_pair(elements: int, name_len: int = 4) -> onnx.ModelProto:
    """A weight [n] read by Add and the same bytes [1, n] read by Mul."""
    w = builders.rand((elements,), 5)
    a, b = "A" * name_len, "B" * name_len
    return builders.model(
        [helper.make_node("Add", ["x", a], ["y"]), helper.make_node("Mul", ["x2", b], ["z"])],
        [builders.vi("x", shape=[elements]), builders.vi("x2", shape=[1, elements])],
        [builders.vi("y", shape=[elements]), builders.vi("z", shape=[1, elements])],
        [numpy_helper.from_array(w, a), numpy_helper.from_array(w.reshape(1, elements).copy(), b)])


@pytest.mark.parametrize("elements", [16, 32, 48, 64, 96, 128, 256])
def test_a_reshaped_merge_never_grows_the_file(save, tmp_path, elements):
    m = _reshaped_pair(elements, name_len=24)
    src, out = save(m), tmp_path / "out.onnx"
    report = onnxsurgery.shrink_file(src, out, reshaped=True)
    merged = report.pass_report("merge_reshaped").changed
    assert out.stat().st_size <= src.stat().st_size
    if merged:  # made only where it pays, and the figure said is about what it saved
        assert src.stat().st_size - out.stat().st_size >= report.pass_report("merge_reshaped").bytes_saved * 0.8
    assert merged == (elements >= 96)  # 4 bytes a value against a Reshape's names and shape
    assert_same_outputs(m, out)


def test_graph_outputs_overridable_inputs_and_quantized_readers_stay():
    w = builders.rand((64, 64), 6)
    scale, zero = np.float32(0.1), np.int8(0)
    q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(w.reshape(1, 4096).copy(), "W_out"),
             numpy_helper.from_array(w.reshape(4096).copy(), "W_default"),
             numpy_helper.from_array(q, "Q"), numpy_helper.from_array(q.reshape(4096).copy(), "Q_flat"),
             numpy_helper.from_array(np.array(scale), "s"), numpy_helper.from_array(np.array(zero), "z"),
             numpy_helper.from_array(w.reshape(16, 256).copy(), "S_default")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"]),
             helper.make_node("Add", ["v", "W_default"], ["y2"]),
             helper.make_node("DequantizeLinear", ["Q", "s", "z"], ["dq"]),
             helper.make_node("MatMul", ["x", "dq"], ["y3"]),
             helper.make_node("Cast", ["Q_flat"], ["Q_flat_f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["v", "Q_flat_f"], ["y4"]),
             helper.make_node("Shape", ["S_default"], ["s_dims"])]
    m = builders.model(nodes, [builders.vi("x", shape=[2, 64]), builders.vi("v", shape=[4096]),
                               builders.vi("W_default", shape=[4096]), builders.vi("S_default", shape=[16, 256])],
                       [builders.vi(n, shape=d)
                        for n, d in (("y", [2, 64]), ("y2", [4096]), ("y3", [2, 64]), ("y4", [4096]))]
                       + [builders.vi("W_out", shape=[1, 4096]), builders.vi("s_dims", TensorProto.INT64, [2])],
                       inits)
    result, report = onnxsurgery.shrink(m, reshaped=True)
    assert report.pass_report("merge_reshaped").changed == 0
    assert report.pass_report("shape_only").changed == 0
    skipped = {s.name: s.reason for s in report.pass_report("merge_reshaped").skipped}
    assert "DequantizeLinear" in skipped["Q"]
    assert {"W", "W_out", "W_default", "Q", "Q_flat", "S_default"} <= {t.name for t in result.graph.initializer}


def test_info_and_default_shrink_drop_shape_only_copies_and_leave_reshaped_ones(save, tmp_path):
    """Merging through a Reshape is opt-in (--reshaped): see the memory test below."""
    src, out = save(builders.tf2onnx_shape_copies(HIDDEN)), tmp_path / "out.onnx"
    data = json.loads(_cli("info", src, "--json").output)
    parts = data["shrink_parts"]
    assert 2 * WEIGHT_BYTES - 1024 < parts["read only by Shape"] < 2 * WEIGHT_BYTES
    assert "reshaped copies" not in parts and data["savings"]["shrink"] == parts["read only by Shape"]
    text = _cli("info", src).output
    assert "of which constants read only by Shape, stored as their shape" in text
    report = json.loads(_cli("shrink", src, out, "--verify", "--json").output)
    assert [p["name"] for p in report["passes"]] == ["shape_only", "merge_duplicates", "cast_weights", "half_width"]
    assert report["bytes_before"] - report["bytes_after"] > 2 * WEIGHT_BYTES - 1024
    assert "R1" in {t.name for t in onnx.load(str(out)).graph.initializer}


def test_quant_does_not_store_shape_only_copies(save, tmp_path):
    """The issue's BERT: quant stored them as int8 (98 KB of its 420 KB)."""
    m = builders.tf2onnx_shape_copies(HIDDEN)
    src, out = save(m), tmp_path / "q.onnx"
    data = json.loads(_cli("quant", src, out, "--json").output)
    assert {c["name"] for p in data["passes"] if p["name"] == "shape_only" for c in p["details"]["constants"]} \
        == {"S0", "then_S1"}
    saved = onnx.load(str(out))
    names = {t.name for t in all_tensors(saved)}
    assert not any(n.startswith(("S0", "then_S1")) for n in names)
    feeds = builders.feeds_for(m)
    for a, b in zip(run(m, feeds), run(out, feeds)):
        assert a.shape == b.shape


def test_reshaped_copies_in_sibling_branches_and_under_an_outer_weight(save, tmp_path):
    """If branches: the then-branch's Constant [1, 4096] is the outer W [64, 64] reshaped; the
    else-branch's [4096] Constant equals it too. Both branches end up reading W through a
    Reshape of their own; the outer W is kept."""
    w = builders.rand((64, 64), 9)
    then_g = helper.make_graph(
        [builders.const_node("then_C", w.reshape(1, 4096)), helper.make_node("Add", ["v", "then_C"], ["t"])],
        "then", [], [builders.vi("t", shape=[1, 4096])])
    else_g = helper.make_graph(
        [builders.const_node("else_C", w.reshape(4096)), helper.make_node("Mul", ["v", "else_C"], ["e"])],
        "else", [], [builders.vi("e", shape=[1, 4096])])
    m = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"]),
                        helper.make_node("If", ["c"], ["z"], then_branch=then_g, else_branch=else_g)],
                       [builders.vi("x", shape=[2, 64]), builders.vi("v", shape=[1, 4096]),
                        builders.vi("c", TensorProto.BOOL, [])],
                       [builders.vi("y", shape=[2, 64]), builders.vi("z", shape=[1, 4096])],
                       [numpy_helper.from_array(w, "W")])
    src, out = save(m), tmp_path / "out.onnx"
    report = onnxsurgery.shrink_file(src, out, verify=True, reshaped=True)
    assert report.pass_report("merge_reshaped").changed == 2
    saved = onnx.load(str(out))
    assert [tuple(t.dims) for t in all_tensors(saved) if np.prod(t.dims) == 4096] == [(64, 64)]
    assert out.stat().st_size < src.stat().st_size - 2 * 4096 * 4 + 1024
    assert_same_outputs(m, out)


def test_same_bytes_in_sibling_branches_only(save, tmp_path):
    """Neither branch sees the other's constant: the kept one becomes an initializer of the
    main graph, read by both (one through a Reshape)."""
    w = builders.rand((32, 64), 10)
    then_g = helper.make_graph(
        [builders.const_node("then_C", w), helper.make_node("MatMul", ["x", "then_C"], ["t"])],
        "then", [], [builders.vi("t", shape=[2, 64])])
    else_g = helper.make_graph(
        [builders.const_node("else_C", w.reshape(64, 32)), helper.make_node("MatMul", ["x2", "else_C"], ["e0"]),
         helper.make_node("Concat", ["e0", "e0"], ["e"], axis=1)],
        "else", [], [builders.vi("e", shape=[2, 64])])
    m = builders.model([helper.make_node("If", ["c"], ["z"], then_branch=then_g, else_branch=else_g)],
                       [builders.vi("x", shape=[2, 32]), builders.vi("x2", shape=[2, 64]),
                        builders.vi("c", TensorProto.BOOL, [])],
                       [builders.vi("z", shape=[2, 64])])
    src, out = save(m), tmp_path / "out.onnx"
    report = onnxsurgery.shrink_file(src, out, verify=True, reshaped=True)
    assert report.pass_report("merge_reshaped").changed == 1
    assert sum(np.prod(t.dims) == 2048 for t in all_tensors(onnx.load(str(out)))) == 1
    assert_same_outputs(m, out)


def test_memory_after_session_creation_holds_one_more_copy_of_a_reshaped_merge(save, tmp_path):
    """Why --reshaped is opt-in. onnxruntime (1.32) folds Reshape(initializer) when the session
    starts and then holds one copy more than the original did (W [1024, 1024] read by MatMul,
    R = W as [1, 1024, 1024] read by Mul: 21.5 MB -> 25.5 MB of growth over session creation;
    with ConstantFolding off 17.5 MB, below the original). Dropping constants read only by
    Shape holds less, not more."""
    from onnxsurgery.running.session_memory import measure_in_fresh_process

    w = builders.rand((1024, 1024), 14)
    m = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Mul", ["v", "R"], ["z"])],
                       [builders.vi("x", shape=[2, 1024]), builders.vi("v", shape=[1, 1024, 1024])],
                       [builders.vi("y", shape=[2, 1024]), builders.vi("z", shape=[1, 1024, 1024])],
                       [numpy_helper.from_array(w, "W"), numpy_helper.from_array(w.reshape(1, 1024, 1024).copy(), "R")])
    src, out = save(m), tmp_path / "out.onnx"
    assert onnxsurgery.shrink_file(src, out, verify=True, reshaped=True).pass_report("merge_reshaped").changed == 1
    assert out.stat().st_size < src.stat().st_size / 2 + 1024
    original, shrunk = measure_in_fresh_process(src), measure_in_fresh_process(out)
    copy, slack = w.nbytes, 2**20  # allocator noise
    assert shrunk["rss_growth"] <= original["rss_growth"] + copy + slack, (original, shrunk)

    m = builders.tf2onnx_shape_copies(1024)
    src, out = save(m, "bert.onnx"), tmp_path / "bert_out.onnx"
    onnxsurgery.shrink_file(src, out, verify=True)
    original, shrunk = measure_in_fresh_process(src), measure_in_fresh_process(out)
    assert shrunk["peak_growth"] <= original["peak_growth"] + slack, (original, shrunk)
