"""Verification's batch-2 sample runs only where the quantizer changed a node that reads
activations (running/readers.py): a result that only swaps weights for DequantizeLinear in
front of the same readers is run at batch 1; another kind of reader, a new opset, keep it."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper

import builders
from onnxsurgery.running.readers import same_readers


def _model(path, opset: int = 21) -> None:
    onnx.save(builders.model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                             [builders.vi("x", shape=["batch", 64])], [builders.vi("y", shape=["batch", 64])],
                             [onnx.numpy_helper.from_array(builders.rand((64, 64), 1), "W")], opset=opset),
              str(path))


def test_readers_by_kind(tmp_path):
    _model(tmp_path / "in.onnx")
    model = onnx.load(tmp_path / "in.onnx")
    graph = gs.import_onnx(model)
    assert same_readers(tmp_path / "in.onnx", graph) and same_readers(model, model)
    # a weight behind DequantizeLinear: the same MatMul reads x
    (matmul,) = [n for n in graph.nodes if n.op == "MatMul"]
    q = gs.Constant("Wq", np.zeros((64, 64), np.int8))
    w = gs.Variable("Wd", np.float32, (64, 64))
    scale = gs.Constant("s", np.array(0.1, np.float32))
    graph.nodes.append(gs.Node("DequantizeLinear", inputs=[q, scale], outputs=[w]))
    matmul.inputs[1] = w
    assert same_readers(model, graph)
    matmul.op = "MatMulNBits"  # another kind reads x
    assert not same_readers(model, graph)
    _model(tmp_path / "old.onnx", opset=17)
    # an upgrade that left every reader as it was (only the stamp): its readers are the input's
    assert same_readers(tmp_path / "old.onnx", tmp_path / "in.onnx")
    assert not same_readers(tmp_path / "old.onnx", graph)  # ... not with another kind besides


def _reduced(path, opset: int, shape=(-1, 64), axes_input: bool = False) -> None:
    """x -> MatMul -> Reshape(shape) -> ReduceMean over the last axis (axes an attribute before
    opset 18, an input from 18, as the converter writes it)."""
    axes = [helper.make_node("ReduceMean", ["r", "axes"], ["y"])] if axes_input else \
        [helper.make_node("ReduceMean", ["r"], ["y"], axes=[-1])]
    constants = [onnx.numpy_helper.from_array(builders.rand((64, 64), 1), "W"),
                 onnx.numpy_helper.from_array(np.array(shape, np.int64), "shape")]
    if axes_input:
        constants.append(onnx.numpy_helper.from_array(np.array([-1], np.int64), "axes"))
    onnx.save(builders.model([helper.make_node("MatMul", ["x", "W"], ["h"]),
                              helper.make_node("Reshape", ["h", "shape"], ["r"]), *axes],
                             [builders.vi("x", shape=["batch", 64])], [builders.vi("y", shape=["batch", 1])],
                             constants, opset=opset), str(path))


def test_an_upgrade_is_compared_reader_by_reader(tmp_path):
    """At another opset each reader must be as it was: an attribute the converter made an input
    of the same value reads the same; a changed shape constant (the MiniLM defect: a Reshape fixed
    to batch 1) or another attribute does not."""
    _reduced(tmp_path / "in.onnx", 17)
    _reduced(tmp_path / "up.onnx", 21, axes_input=True)
    assert same_readers(tmp_path / "in.onnx", tmp_path / "up.onnx")
    _reduced(tmp_path / "fixed.onnx", 21, shape=(1, -1), axes_input=True)
    assert not same_readers(tmp_path / "in.onnx", tmp_path / "fixed.onnx")
    _reduced(tmp_path / "same_opset.onnx", 17, shape=(1, -1))  # at one opset, kinds alone (weights only)
    assert same_readers(tmp_path / "in.onnx", tmp_path / "same_opset.onnx")


def test_a_batch_broken_by_an_upgrade_is_still_caught(tmp_path):
    """The batch-2 sample runs where the upgrade changed a reader, and shows the break: a Reshape
    fixed to batch 1 computes the input's outputs at batch 1 and other shapes at batch 2."""
    from onnxsurgery.running.verify import compare_models

    _reduced(tmp_path / "in.onnx", 17)
    _reduced(tmp_path / "fixed.onnx", 21, shape=(1, -1), axes_input=True)
    report = compare_models(tmp_path / "in.onnx", tmp_path / "fixed.onnx", fold_candidate=False)
    assert report["samples"] == 2 and report["other_shapes"] == 1
    _reduced(tmp_path / "up.onnx", 21, axes_input=True)  # the upgrade alone: batch 1 only, exact
    report = compare_models(tmp_path / "in.onnx", tmp_path / "up.onnx", fold_candidate=False)
    assert report["samples"] == 1 and report["exact"]


def test_weights_only_runs_batch_one(tmp_path, monkeypatch):
    import onnxsurgery
    from onnxsurgery.running.verify import compare_models

    _model(tmp_path / "in.onnx")
    batches = builders.batches_run(monkeypatch)
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", lowering="dq")
    assert report.verification["samples"] == 1 and report.verification["rel_l2_error"] > 0
    # neither side ran batch 2: a small model's reference runs ahead, its batch-2 sample waiting for
    # the quantized graph's answer (reference_runs._verdict)
    assert batches.count(2) == 0
    # compared on its own, the same: the batch-2 sample ran for the reference, then left out
    again = compare_models(tmp_path / "in.onnx", tmp_path / "q.onnx", fold_candidate=False)
    assert again["samples"] == 1 and again["rel_l2_error"] == report.verification["rel_l2_error"]


def test_another_reader_keeps_batch_two(tmp_path, monkeypatch):
    import onnxsurgery

    _model(tmp_path / "in.onnx")
    batches = builders.batches_run(monkeypatch)
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", dtype="int4", lowering="matmulnbits")
    types = {n.op_type for n in onnx.load(tmp_path / "q.onnx").graph.node}
    assert "MatMulNBits" in types and "MatMul" not in types
    assert report.verification["samples"] == 2 and batches.count(2) == 2  # both sides ran batch 2


def test_row_sums_beside_a_matmul_run_batch_one(tmp_path, monkeypatch):
    """Asymmetric scaled: the zero points' term sums each row of the MatMul's A over its last
    axis (the weight's K), then scales along N: every sample alone (per_sample._row_sum)."""
    import onnxsurgery

    _model(tmp_path / "in.onnx")
    batches = builders.batches_run(monkeypatch)
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", lowering="scaled", symmetric=False)
    types = {n.op_type for n in onnx.load(tmp_path / "q.onnx").graph.node}
    assert "ReduceSum" in types  # asymmetric scaled: the zero points' sums over the input's rows
    assert report.verification["samples"] == 1 and batches.count(2) <= 1


def _row_sum(path, axes, keepdims: int = 1) -> None:
    """x [batch, 64] -> MatMul W, minus ReduceSum(x, axes) * z: the asymmetric scaled form."""
    z = onnx.numpy_helper.from_array(np.full(64, 3.0, np.float32), "z")
    onnx.save(builders.model([helper.make_node("MatMul", ["x", "W"], ["h"]),
                              helper.make_node("ReduceSum", ["x", "axes"], ["r"], keepdims=keepdims),
                              helper.make_node("Mul", ["r", "z"], ["c"]), helper.make_node("Sub", ["h", "c"], ["d"]),
                              helper.make_node("Relu", ["d"], ["y"])],
                             [builders.vi("x", shape=["batch", 64])], [builders.vi("y", shape=["batch", 64])],
                             [onnx.numpy_helper.from_array(builders.rand((64, 64), 1), "W"), z,
                              onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes")]), str(path))


def test_a_sum_over_the_batch_keeps_batch_two(tmp_path):
    _model(tmp_path / "in.onnx")
    _row_sum(tmp_path / "rows.onnx", [-1])
    assert same_readers(tmp_path / "in.onnx", tmp_path / "rows.onnx")
    _row_sum(tmp_path / "batch.onnx", [0])  # over the samples: each one reads the others
    assert not same_readers(tmp_path / "in.onnx", tmp_path / "batch.onnx")
    _row_sum(tmp_path / "dropped.onnx", [-1], keepdims=0)  # [batch]: the vector would line up with it
    assert not same_readers(tmp_path / "in.onnx", tmp_path / "dropped.onnx")


def test_channel_scales_alone_run_batch_one(tmp_path, monkeypatch):
    """Symmetric scaled: an input scale before the MatMul and the weight's column scales after
    it, each varying along the weight's own axis (readers._channel_scale): batch 1 only."""
    import onnxsurgery

    _model(tmp_path / "in.onnx")
    batches = builders.batches_run(monkeypatch)
    report = onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", lowering="scaled", symmetric=True)
    types = [n.op_type for n in onnx.load(tmp_path / "q.onnx").graph.node]
    assert types.count("Mul") == 2 and "DequantizeLinear" not in types
    assert report.verification["samples"] == 1 and batches.count(2) <= 1


def test_left_out_ahead_then_wanted_runs_again(tmp_path, monkeypatch):
    """The reference's runs started ahead leave the batch-2 sample out once told so (quant, after
    quantizing); a comparison that wants it after all runs the reference again."""
    import onnxsurgery
    from onnxsurgery.running import verify

    _model(tmp_path / "in.onnx")
    onnxsurgery.quant_file(tmp_path / "in.onnx", tmp_path / "q.onnx", dtype="int4", lowering="matmulnbits",
                           verify=False)
    batches = builders.batches_run(monkeypatch)
    runs: dict = {}
    pending = verify.reference_ahead(tmp_path / "in.onnx", runs)
    pending.go_on(wider=False)
    names, samples, expected, merge, wider = pending.result()
    assert wider == -1 and len(samples) == 1 and batches == [1]
    report = verify.compare_models(tmp_path / "in.onnx", tmp_path / "q.onnx", reference_runs=runs,
                                   fold_candidate=False)
    assert report["samples"] == 2 and batches.count(2) == 2  # reference and result at batch 2


def _conv(path, scales=None, attributes=True) -> None:
    """x [batch, 4, 8, 8] -> Conv -> Relu; with `scales` (the constants' shapes) x is multiplied
    by one before the Conv and the Conv's output by the other after it, as equalization and the
    lean lowering write them (the weight divided and multiplied alike: the same computation)."""
    w = builders.rand((4, 4, 3, 3), 1)
    found = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]} if attributes else {}
    x, nodes, constants = "x", [], []
    if scales:
        before, after = (np.full(shape, 2.0, np.float32) for shape in scales)
        constants += [onnx.numpy_helper.from_array(before, "s_in"), onnx.numpy_helper.from_array(after, "s_out")]
        nodes.append(helper.make_node("Mul", ["x", "s_in"], ["xs"]))
        x, w = "xs", w / 2.0 / 2.0
    nodes.append(helper.make_node("Conv", [x, "W"], ["c" if scales else "h"], **found))
    if scales:
        nodes.append(helper.make_node("Mul", ["c", "s_out"], ["h"]))
    nodes.append(helper.make_node("Relu", ["h"], ["y"]))
    onnx.save(builders.model(nodes, [builders.vi("x", shape=["batch", 4, 8, 8])],
                             [builders.vi("y", shape=["batch", 4, 8, 8])],
                             [onnx.numpy_helper.from_array(w.astype(np.float32), "W"), *constants]), str(path))


def test_a_channel_scale_is_not_a_reader_the_batch_breaks(tmp_path):
    """A constant that varies along the Conv's channels only ([C, 1, 1], one rank below its
    activations) scales each sample alike at any batch: the batch-2 sample is not run for it.
    One that varies along axis 0, or beside a Conv whose rank is not said, keeps the sample."""
    from onnxsurgery.running.verify import compare_models

    _conv(tmp_path / "in.onnx")
    _conv(tmp_path / "scaled.onnx", scales=[(4, 1, 1), (4, 1, 1)])
    assert same_readers(tmp_path / "in.onnx", tmp_path / "scaled.onnx")
    assert same_readers(tmp_path / "in.onnx", gs.import_onnx(onnx.load(tmp_path / "scaled.onnx")))
    report = compare_models(tmp_path / "in.onnx", tmp_path / "scaled.onnx", fold_candidate=False)
    assert report["samples"] == 1 and report["rel_l2_error"] < 1e-5
    _conv(tmp_path / "batch.onnx", scales=[(4, 1, 1), (2, 1, 1, 1)])  # spans axis 0: a batch-2 defect's kind
    assert not same_readers(tmp_path / "in.onnx", tmp_path / "batch.onnx")
    _conv(tmp_path / "plain.onnx", attributes=False)
    _conv(tmp_path / "unsaid.onnx", scales=[(4, 1, 1), (4, 1, 1)], attributes=False)
    assert not same_readers(tmp_path / "plain.onnx", tmp_path / "unsaid.onnx")
    # the scale spanning axis 0 runs at batch 2 and shows there what it does
    report = compare_models(tmp_path / "in.onnx", tmp_path / "batch.onnx", fold_candidate=False)
    assert report["samples"] == 2 and report["other_shapes"] >= 1


def test_reading_the_definitions_leaves_the_graph_as_it_was(tmp_path):
    """same_readers reads a gs graph's integer constants without loading them into it: a loaded
    constant exports as raw_data where the input held int64_data (vit_focus' written file changed)."""
    _reduced(tmp_path / "in.onnx", 17)
    _reduced(tmp_path / "up.onnx", 21, axes_input=True)
    up = onnx.load(tmp_path / "up.onnx")
    for t in up.graph.initializer:  # held as int64_data, as converters write them
        if t.data_type == onnx.TensorProto.INT64:
            t.int64_data[:] = onnx.numpy_helper.to_array(t).tolist()
            t.ClearField("raw_data")
    graph = gs.import_onnx(up)
    before = gs.export_onnx(gs.import_onnx(up)).SerializeToString()
    assert same_readers(tmp_path / "in.onnx", graph)
    assert gs.export_onnx(graph).SerializeToString() == before


def test_zero_point_convs_are_per_sample(tmp_path):
    """The lean asymmetric Conv's form: the Conv over the integers plus a zero-point correction,
    itself Convs over the same input (eeg_spindles). A Conv over constant weights computes each
    sample alone, and the two joined come from one tensor: batch 1 only. A join with another
    path from the input (a Transpose: not sample by sample) keeps the batch-2 sample."""
    from onnxsurgery.running.verify import compare_models

    _conv(tmp_path / "in.onnx")
    w = builders.rand((4, 4, 3, 3), 1)
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}

    def corrected(path, other: str) -> None:
        nodes = [helper.make_node("Conv", ["x", "W"], ["main"], **conv),
                 helper.make_node("Conv", ["x", "Z"], ["sums"], **conv),
                 helper.make_node("Mul", ["sums", "zp"], ["correction"]),
                 helper.make_node("Add", ["main", other], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
        if other == "moved":
            nodes.insert(0, helper.make_node("Transpose", ["x"], ["moved"], perm=[0, 1, 3, 2]))
        constants = [onnx.numpy_helper.from_array(w, "W"), onnx.numpy_helper.from_array(np.zeros_like(w), "Z"),
                     onnx.numpy_helper.from_array(np.zeros((4, 1, 1), np.float32), "zp")]
        onnx.save(builders.model(nodes, [builders.vi("x", shape=["batch", 4, 8, 8])],
                                 [builders.vi("y", shape=["batch", 4, 8, 8])], constants), str(path))
    corrected(tmp_path / "zp.onnx", "correction")
    assert same_readers(tmp_path / "in.onnx", tmp_path / "zp.onnx")
    assert compare_models(tmp_path / "in.onnx", tmp_path / "zp.onnx", fold_candidate=False)["samples"] == 1
    corrected(tmp_path / "moved.onnx", "moved")
    assert not same_readers(tmp_path / "in.onnx", tmp_path / "moved.onnx")


def test_a_scale_of_higher_rank_keeps_batch_two(tmp_path):
    """A column scale after a MatMul is per sample as a vector; one of higher rank than the
    activation ([1, 1, 64] on [batch, 64]) would move the batch to axis 1: kept."""
    _model(tmp_path / "in.onnx")

    def scaled(path, shape) -> None:
        onnx.save(builders.model([helper.make_node("MatMul", ["x", "W"], ["m"]),
                                  helper.make_node("Mul", ["m", "s"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                                 [builders.vi("x", shape=["batch", 64])], [builders.vi("y", shape=["batch", 64])],
                                 [onnx.numpy_helper.from_array(builders.rand((64, 64), 1), "W"),
                                  onnx.numpy_helper.from_array(np.full(shape, 0.5, np.float32), "s")]), str(path))
    scaled(tmp_path / "vector.onnx", (64,))
    assert same_readers(tmp_path / "in.onnx", tmp_path / "vector.onnx")
    scaled(tmp_path / "higher.onnx", (1, 1, 64))
    assert not same_readers(tmp_path / "in.onnx", tmp_path / "higher.onnx")
    scaled(tmp_path / "ones.onnx", (1, 1, 1))
    assert not same_readers(tmp_path / "in.onnx", tmp_path / "ones.onnx")
