"""Unit tests for modules the suite otherwise covers only end to end, where they hold logic of
their own: a plan's records (quantization/plan.py: read, edited, shown), apply (it does what
the records say and decides nothing), the lowerings (each one's stored bytes are what it
builds, and the result computes the weight), and the writer (payloads laid out page-aligned
in the data file, copied straight from a file)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import builders
from onnxsurgery.errors import PlanError
from onnxsurgery.export import export_model
from onnxsurgery.graph_names import overridable_initializers
from onnxsurgery.graph_utils import collect_constants
from onnxsurgery.storage.io import import_onnx
from onnxsurgery.quantization.apply import apply_plan
from onnxsurgery.quantization.choices.planner import plan_weights
from onnxsurgery.quantization.lowerings import REGISTRY
from onnxsurgery.quantization.options import QuantOptions
from onnxsurgery.quantization.plan import Plan, WeightPlan, follow_dtype, needs_derivation, read_plan, table
from onnxsurgery.storage.writer import DataFileLayout, copy_range, layout_model, write_data_file, write_pieces


def _matmuls(*shapes, opset=17, ir=8) -> onnx.ModelProto:
    """x [2, K0] -> MatMul W0 -> MatMul W1 -> ... -> y; each W an initializer of `shapes`."""
    nodes, inits, prev = [], [], "x"
    for i, shape in enumerate(shapes):
        inits.append(numpy_helper.from_array(builders.rand(shape, i + 1), f"W{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], [f"h{i}"]))
        prev = f"h{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    inputs, outputs = [builders.vi("x", shape=[2, shapes[0][0]])], [builders.vi("y", shape=[2, shapes[-1][1]])]
    return builders.model(nodes, inputs, outputs, inits, opset=opset, ir=ir)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _rel_l2(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# plan.py ------------------------------------------------------------------------------------

@pytest.mark.parametrize("entry, words", [
    ({"name": "W", "dtype": "int8", "colour": 1}, "plan weight 'W': unknown key 'colour'"),
    ({"name": "W"}, "plan weight 'W': missing 'dtype'"),
    ({"name": "W", "dtype": "int3"}, "plan weight 'W': dtype \"int3\" is not one of"),
    ({"name": "W", "dtype": "int8", "block_size": 1}, "block_size must be an integer from 2"),
    ({"name": "W", "dtype": "int8", "symmetric": "yes"}, "symmetric must be true, false or null"),
    ({"name": "W", "dtype": "float", "lowering": "levels"}, "lowering \"levels\" needs \"levels\" and \"granularity\""),
])
def test_a_plan_record_is_refused_in_one_line_naming_the_weight(entry, words):
    with pytest.raises(PlanError, match=words.replace("(", r"\(")):
        read_plan({"weights": [entry]})


def test_a_weight_listed_twice_is_refused():
    with pytest.raises(PlanError, match="plan weight 'W': listed twice"):
        read_plan({"weights": [{"name": "W", "dtype": "int8"}, {"name": "W", "dtype": "int4"}]})


def test_editing_a_dtype_alone_clears_what_followed_from_the_old_one():
    scaled = dict(name="W", consumers=["MatMul"], shape=[64, 64], dtype="int8", granularity="channel", axis=1,
                  symmetric=True, lowering="scaled", rounding="nearest", why="lean: ...")
    to_half = WeightPlan(**{**scaled, "dtype": "float16"})
    assert set(follow_dtype(to_half)) == {"granularity", "axis", "symmetric", "lowering", "rounding"}
    assert (to_half.lowering, to_half.granularity, to_half.why) == ("cast", None, "")
    to_float = WeightPlan(**{**scaled, "dtype": "float"})
    follow_dtype(to_float)
    assert not to_float.changes and to_float.lowering is None
    kept = WeightPlan(**scaled)  # an integer record as written: nothing to clear, nothing to derive
    assert follow_dtype(kept) == [] and not needs_derivation(kept)
    to_four = WeightPlan(**{**scaled, "dtype": "int4", "lowering": None})
    assert follow_dtype(to_four) == [] and needs_derivation(to_four)  # the lowering is derived against the graph


def test_a_plan_goes_out_as_json_and_back_record_for_record():
    graph = import_onnx(_matmuls((64, 64), (64, 32)))
    plan = plan_weights(graph, QuantOptions(min_elements=16, lowering="arith"), 17, frozenset())
    back = read_plan(json.loads(json.dumps(plan.to_dict())))
    assert back == plan.weights and [w.name for w in back] == ["W0", "W1"]


def test_the_table_lists_changes_largest_first_and_counts_the_small_ones():
    def record(name, n, dtype, why=""):
        return WeightPlan(name, ["MatMul"], [n], dtype, "channel", None, 0, True, "arith" if dtype != "float" else None,
                          bytes_before=4 * n, bytes_after=n if dtype != "float" else 4 * n, why=why)

    plan = Plan([record("small", 100, "int8"), record("big", 1000, "int8"), record("tiny", 8, "float",
                 "below --min-elements"), record("odd", 5000, "float", "a graph output")], opset=17)
    lines = table(plan).splitlines()
    assert lines[0].startswith("plan: 2 of 4 float weights change")
    body = [line.split()[0] for line in lines[2:5]]
    assert body == ["big", "small", "odd"]  # changed, largest first; then the one left alone for a reason
    assert lines[-1] == "  1 smaller weight left float (below --min-elements)"


# apply.py ------------------------------------------------------------------------------------

def test_apply_does_what_the_records_say_and_nothing_else():
    model = _matmuls((64, 64), (64, 64), (64, 32))
    graph = import_onnx(model)
    plan = plan_weights(graph, QuantOptions(min_elements=16, lowering="arith"), 17, frozenset())
    w0, w1, w2 = plan.weights
    w1.dtype, w1.lowering = "float16", "cast"  # an edited record: applied as it says
    follow_dtype(w1)
    w2.dtype = "float"
    follow_dtype(w2)
    w2.why = "left alone by hand"
    report = apply_plan(graph, plan)
    assert report.changed == 2 and sorted(report.details["quantized"]) == ["W0", "W1"]
    assert [s.name for s in report.skipped] == ["W2"]
    stored = {s.name: s for s in collect_constants(graph)}
    assert stored["W2"].tensor.dtype == np.float32 and stored["W2"].nbytes == 64 * 32 * 4  # untouched
    graph.cleanup().toposort()
    result = export_model(graph, model)
    ops = [n.op_type for n in result.graph.node]
    assert "DequantizeLinear" not in ops and ops.count("Cast") >= 2  # arith's Cast chain, and W1's Cast
    halves = {t.name: list(t.dims) for t in result.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16}
    assert [64, 64] in halves.values()  # W1 in 2 bytes (arith's scales may be float16 too)
    x = builders.rand((2, 64), 9)
    assert _rel_l2(_run(result, x), _run(model, x)) < 0.02


# lowerings/ ----------------------------------------------------------------------------------

@pytest.mark.parametrize("lowering, dtype, opset, ir", [("dq", "int8", 17, 8), ("dq", "int4", 21, 10),
                                                         ("arith", "int8", 17, 8), ("arith", "uint4", 17, 8),
                                                         ("scaled", "int8", 17, 8)])
def test_a_lowering_stores_the_bytes_its_record_says_and_computes_the_weight(lowering, dtype, opset, ir):
    model = _matmuls((128, 64), opset=opset, ir=ir)
    graph = import_onnx(model)
    scheme = {"granularity": "channel", "symmetric": True} if lowering == "scaled" else \
        {"granularity": "channel"} if (lowering, dtype) == ("dq", "int8") else {}  # dq blocks: opset 21
    options = QuantOptions(min_elements=16, lowering=lowering, dtype=dtype, **scheme)
    plan = plan_weights(graph, options, opset, overridable_initializers(graph))
    (record,) = plan.weights
    assert record.lowering == lowering and record.dtype == dtype
    report = apply_plan(graph, plan)
    graph.cleanup().toposort()
    result = export_model(graph, model)
    form = REGISTRY[lowering]  # the protocol's arithmetic is the plan's figure
    assert form.stored_bytes(128 * 64, _groups(record), dtype, not record.symmetric,
                             input_channels=128 if form.equalized else 0) == record.bytes_after
    written = sum(len(t.raw_data) or numpy_helper.to_array(t).nbytes for t in result.graph.initializer)
    measured = record.bytes_before - report.bytes_saved  # what apply says it stored
    assert measured <= written <= measured + 64  # and what it wrote (beside a Reshape's shape or two)
    assert measured <= record.bytes_after + 2 * _groups(record)  # the plan's figure; scales float32 where it said 16
    x = builders.rand((2, 128), 5)
    assert _rel_l2(_run(result, x), _run(model, x)) < (0.2 if "4" in dtype else 0.02)


def _groups(record: WeightPlan) -> int:
    k, n = record.shape
    return {"channel": n, "tensor": 1}.get(record.granularity) or (k // record.block_size) * n


# writer.py -----------------------------------------------------------------------------------

def test_the_data_file_layout_aligns_every_payload_to_a_page():
    layout = DataFileLayout("m.onnx.data", threshold=1024, align=4096)
    offsets = [layout.place(b"x" * n) for n in (10, 5000, 1)]
    assert offsets == [0, 4096, 12288] and layout.size == 12289


def test_a_model_laid_out_with_its_large_payloads_in_a_data_file_reads_back_the_same(tmp_path):
    model = _matmuls((64, 64), (64, 2))  # one payload of 16 KB, one of 512 bytes
    buf = memoryview(model.SerializeToString())
    pieces, length = layout_model(buf, None)
    assert pieces == [buf] and length == len(buf)  # nothing to move: the bytes as they are
    layout = DataFileLayout("out.onnx.data", threshold=1024, align=4096)
    pieces, length = layout_model(buf, layout)
    assert len(layout.entries) == 1 and len(layout.entries[0][0]) == 64 * 64 * 4
    with open(tmp_path / "out.onnx", "wb") as f:
        write_pieces(f, pieces, None)
    with open(tmp_path / "out.onnx.data", "wb") as f:
        write_data_file(f, layout, None)
    assert (tmp_path / "out.onnx").stat().st_size == length < len(buf)
    assert onnx.load(str(tmp_path / "out.onnx"), load_external_data=False).graph.initializer[0].data_location == \
        onnx.TensorProto.EXTERNAL
    back = onnx.load(str(tmp_path / "out.onnx"))
    assert all(np.array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
               for a, b in zip(back.graph.initializer, model.graph.initializer))


def test_copy_range_copies_a_slice_between_files_or_says_it_could_not(tmp_path):
    data = bytes(range(256)) * 64
    (tmp_path / "a").write_bytes(data)
    with open(tmp_path / "a", "rb") as src, open(tmp_path / "b", "wb+") as dst:
        dst.write(b"\0" * 10)
        dst.flush()
        done = copy_range(src.fileno(), dst.fileno(), 100, 10, 1000)
    if done:  # the kernel copied; else the platform cannot, and 0 says so (the writer then copies itself)
        assert done == 1000 and (tmp_path / "b").read_bytes() == b"\0" * 10 + data[100:1100]


def test_a_gs_graph_is_untouched_by_planning():
    """The planner decides from the graph without changing it (apply changes it)."""
    graph = import_onnx(_matmuls((64, 64)))
    before = gs.export_onnx(graph).SerializeToString()
    plan_weights(graph, QuantOptions(min_elements=16), 17, frozenset())
    assert gs.export_onnx(graph).SerializeToString() == before
