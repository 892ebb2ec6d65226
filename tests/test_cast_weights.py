"""shrink's cast_weights: a float constant that every reader Casts to a narrower float type is
stored as the Cast's result; outputs stay bit-identical in onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from builders import model, rand, vi
from conftest import all_tensors, assert_same_outputs, run
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.passes.cast_weights import _Refused, cast_values
from onnxsurgery.pipeline import estimate_pipeline, open_workspace, shrink_pipeline
from onnxsurgery.storage.protos import graphs_everywhere

FLOAT, DOUBLE, FP16, BF16 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16
SHAPE = [16, 32]


def cast(src, dst, to, name=None):
    return helper.make_node("Cast", [src], [dst], to=to, name=name or f"cast_{dst}")


def through_cast(w: np.ndarray, to: int, extra_reader: str | None = None) -> onnx.ModelProto:
    """x + float32(Cast(W, to)): W float32 or float64, read through a Cast to `to` (and, with
    `extra_reader`, also by that op directly)."""
    nodes = [cast("W", "Wn", to), cast("Wn", "Wf", FLOAT), helper.make_node("Add", ["x", "Wf"], ["y"])]
    outputs = [vi("y", shape=list(w.shape))]
    if extra_reader:
        nodes.append(helper.make_node(extra_reader, ["W", "W"], ["z"]))
        outputs.append(vi("z", helper.np_dtype_to_tensor_dtype(w.dtype), shape=list(w.shape)))
    return model(nodes, [vi("x", shape=list(w.shape))], outputs, [numpy_helper.from_array(w, "W")])


def fp16_matmul(w: np.ndarray) -> onnx.ModelProto:
    """A mixed-precision export: float16 activations times Cast(W float32, float16)."""
    nodes = [cast("W", "Wh", FP16), helper.make_node("MatMul", ["x", "Wh"], ["y"])]
    return model(nodes, [vi("x", FP16, [3, w.shape[0]])], [vi("y", FP16, [3, w.shape[1]])],
                 [numpy_helper.from_array(w, "W")])


def loop_model(w: np.ndarray, *, carried: bool, final_read: bool = False, cast_outside: bool = False):
    """A Loop of 3 iterations adding float32(Cast(W, float16)) to its state. `carried`: W comes in
    as a loop state its body passes on unchanged (tf2onnx's LSTM weights), else the body reads
    it from the outer scope. `final_read`: the Loop's final value of that state is a graph
    output. `cast_outside`: the Cast is in the main graph and the body reads its output."""
    shape = list(w.shape)
    body_in = [vi("i", TensorProto.INT64, []), vi("c_in", TensorProto.BOOL, []), vi("v_in", shape=shape)]
    body_out = [vi("c_out", TensorProto.BOOL, []), vi("v_out", shape=shape)]
    source = "w_in" if carried else "W"
    nodes = [helper.make_node("Identity", ["c_in"], ["c_out"])]
    if cast_outside:
        nodes += [cast("Wh", "Wb", FLOAT)]
    else:
        nodes += [cast(source, "Wh_body", FP16), cast("Wh_body", "Wb", FLOAT)]
    nodes.append(helper.make_node("Add", ["v_in", "Wb"], ["v_out"]))
    loop_inputs, loop_outputs = ["M", "cond", "x"], ["y"]
    if carried:
        body_in.append(vi("w_in", shape=shape))
        body_out.append(vi("w_in", shape=shape))
        loop_inputs.append("W")
        loop_outputs.append("W_final")
    body = helper.make_graph(nodes, "body", body_in, body_out)
    main = [helper.make_node("Loop", loop_inputs, loop_outputs, body=body)]
    if cast_outside:
        main.insert(0, cast("W", "Wh", FP16))
    outputs = [vi("y", shape=shape)] + ([vi("W_final", shape=shape)] if final_read else [])
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(3, np.int64), "M"),
             numpy_helper.from_array(np.array(True), "cond")]
    return model(main, [vi("x", shape=shape)], outputs, inits)


def shrunk(save, tmp_path, m: onnx.ModelProto):
    out = tmp_path / "out.onnx"
    report = onnxsurgery.shrink_file(save(m), out, verify=True)
    assert report.verification["exact"]
    step = next(p for p in report.passes if p.name == "cast_weights")
    return onnx.load(str(out)), step


def stored_type(m: onnx.ModelProto, shape=SHAPE) -> int:
    (t,) = [t for t in all_tensors(m) if list(t.dims) == list(shape)]
    return t.data_type


def ops(m: onnx.ModelProto) -> list[tuple[str, int | None]]:
    """(op, Cast's `to`) of every node, every graph."""
    return [(n.op_type, next((a.i for a in n.attribute if a.name == "to"), None))
            for g in graphs_everywhere(m.graph) for n in g.node]


@pytest.mark.parametrize("dtype, to", [(np.float32, FP16), (np.float32, BF16), (np.float64, FLOAT)])
def test_main_graph_weight_stored_as_its_cast_and_the_cast_removed(save, tmp_path, dtype, to):
    m = through_cast(rand(SHAPE, 1).astype(dtype), to)
    out, step = shrunk(save, tmp_path, m)
    assert step.changed == 1 and stored_type(out) == to
    assert ops(out).count(("Cast", to)) == ops(m).count(("Cast", to)) - 1  # the Cast to the stored type is gone
    assert step.bytes_saved == np.prod(SHAPE) * (2 if dtype == np.float32 else 4)
    assert_same_outputs(m, out)


def test_fp16_matmul_of_a_float32_weight(save, tmp_path):
    m = fp16_matmul(rand(SHAPE, 2))
    out, step = shrunk(save, tmp_path, m)
    assert step.changed == 1 and stored_type(out) == FP16 and ops(out) == [("MatMul", None)]
    assert out.ByteSize() < 0.6 * m.ByteSize()
    assert_same_outputs(m, out)


@pytest.mark.parametrize("carried", [False, True])
def test_loop_body_readers(save, tmp_path, carried):
    m = loop_model(rand(SHAPE, 3), carried=carried)
    out, step = shrunk(save, tmp_path, m)
    assert step.changed == 1 and stored_type(out) == FP16
    assert ("Cast", FP16) not in ops(out)
    assert step.details["stored"][0]["loop_states"] == int(carried)
    assert_same_outputs(m, out)


def test_loop_state_whose_final_value_is_read_is_left(save, tmp_path):
    m = loop_model(rand(SHAPE, 3), carried=True, final_read=True)
    out, step = shrunk(save, tmp_path, m)
    assert step.changed == 0 and stored_type(out) == FLOAT
    assert "final value" in step.skipped[0].reason


def test_cast_read_from_a_subgraph_stays_as_a_no_op(save, tmp_path):
    m = loop_model(rand(SHAPE, 4), carried=False, cast_outside=True)
    out, step = shrunk(save, tmp_path, m)
    assert step.changed == 1 and stored_type(out) == FP16
    assert step.details["stored"][0]["casts_kept"] == 1 and ("Cast", FP16) in ops(out)
    assert_same_outputs(m, out)


def test_cast_output_that_is_a_graph_output_stays(save, tmp_path):
    w = rand(SHAPE, 5)
    m = model([cast("W", "y", FP16)], [], [vi("y", FP16, SHAPE)], [numpy_helper.from_array(w, "W")])
    out, step = shrunk(save, tmp_path, m)
    assert step.changed == 1 and stored_type(out) == FP16 and ops(out) == [("Cast", FP16)]
    assert run(out, {})[0].tobytes() == w.astype(np.float16).tobytes()


@pytest.mark.parametrize("reader", ["Add", "Mul"])
def test_weight_with_one_other_reader_is_unchanged(save, tmp_path, reader):
    m = through_cast(rand(SHAPE, 6), FP16, extra_reader=reader)
    out, step = shrunk(save, tmp_path, m)
    assert step.changed == 0 and stored_type(out) == FLOAT
    assert step.skipped[0].reason == f"read by {reader}"


def test_widening_casts_are_unchanged(save, tmp_path):
    """float16 stored, Cast to float32 (the float32 file would be larger); float32 cast to float64."""
    half = through_cast(rand(SHAPE, 7).astype(np.float16), FLOAT)
    out, step = shrunk(save, tmp_path, half)
    assert step.changed == 0 and not step.skipped and stored_type(out) == FP16
    wide = through_cast(rand(SHAPE, 7), DOUBLE)
    out, step = shrunk(save, tmp_path, wide)
    assert step.changed == 0 and not step.skipped and stored_type(out) == FLOAT


def test_float64_to_16_bits_is_not_taken(save, tmp_path):
    """onnxruntime rounds float64 -> float16 through float32: not one rounding, as numpy's."""
    out, step = shrunk(save, tmp_path, through_cast(rand(SHAPE, 7).astype(np.float64), FP16))
    assert step.changed == 0 and stored_type(out) == DOUBLE


def test_casts_to_two_types_are_unchanged(save, tmp_path):
    nodes = [cast("W", "a", FP16), cast("W", "b", BF16), cast("a", "af", FLOAT), cast("b", "bf", FLOAT),
             helper.make_node("Add", ["af", "bf"], ["y"])]
    m = model(nodes, [], [vi("y", shape=SHAPE)], [numpy_helper.from_array(rand(SHAPE, 8), "W")])
    out, step = shrunk(save, tmp_path, m)
    assert step.changed == 0 and "several types" in step.skipped[0].reason


def _edges32() -> np.ndarray:
    tie16 = [1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -24, 2.0 ** -14 * 0.999]
    bits = np.array([0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000001,
                     0x807FFFFF], np.uint32).view(np.float32)  # bfloat16 ties, largest floats, subnormals
    values = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e5, np.inf, -np.inf, 6e-8, 1e-40, *tie16]
    rng = np.random.default_rng(0)
    return np.concatenate([np.array(values, np.float32), bits, rng.standard_normal(64).astype(np.float32) * 1e3,
                           rng.standard_normal(64).astype(np.float32) * 1e-6])


def _edges64() -> np.ndarray:
    values = [0.0, -0.0, 1e39, -1e39, 1e-46, 1.4e-45, 1 + 2.0 ** -24, 1 + 3 * 2.0 ** -24, 3.4028235677973366e38,
              np.inf, -np.inf, 1e-310]
    return np.concatenate([np.array(values), np.random.default_rng(1).standard_normal(64) * 1e30])


@pytest.mark.parametrize("to", [FP16, BF16, FLOAT])
def test_values_are_onnxruntimes_cast(to):
    """cast_values against onnxruntime's own Cast: rounding ties, overflow, infinities, subnormals."""
    x = _edges64() if to == FLOAT else _edges32()
    src = DOUBLE if to == FLOAT else FLOAT
    nodes = [cast("x", "n", to)] + ([cast("n", "y", FLOAT)] if to != FLOAT else [])
    m = model(nodes, [vi("x", src, [len(x)])], [vi("y" if to != FLOAT else "n", FLOAT, [len(x)])])
    (got,) = run(m, {"x": x})
    ours = cast_values(x, to)
    if to == FLOAT:
        assert got.view(np.uint32).tolist() == ours.view(np.uint32).tolist()
    else:
        upper = ours.view(np.uint16) if to == FP16 else ours
        widened = upper.view(np.float16).astype(np.float32) if to == FP16 else \
            (upper.astype(np.uint32) << 16).view(np.float32)
        assert got.view(np.uint32).tolist() == widened.view(np.uint32).tolist()


def test_edge_values_as_a_weight_verify_bit_exact(save, tmp_path):
    w = _edges32()
    m = model([cast("W", "h", FP16), helper.make_node("Identity", ["h"], ["y"])], [], [vi("y", FP16, [len(w)])],
              [numpy_helper.from_array(w, "W")])
    out, step = shrunk(save, tmp_path, m)
    assert step.changed == 1
    assert run(out, {})[0].tobytes() == run(m, {})[0].tobytes()


def test_nan_is_refused(save, tmp_path):
    w = rand(SHAPE, 9)
    w[3, 4] = np.nan
    with pytest.raises(_Refused):
        cast_values(w, FP16)
    out, step = shrunk(save, tmp_path, through_cast(w, FP16))
    assert step.changed == 0 and "NaN" in step.skipped[0].reason and stored_type(out) == FLOAT


@pytest.mark.parametrize("to", [FP16, BF16])
def test_constant_node_weight(save, tmp_path, to):
    w = rand(SHAPE, 10)
    nodes = [helper.make_node("Constant", [], ["W"], value=numpy_helper.from_array(w, "W")), cast("W", "Wh", to),
             cast("Wh", "Wf", FLOAT), helper.make_node("Add", ["x", "Wf"], ["y"])]
    m = model(nodes, [vi("x", shape=SHAPE)], [vi("y", shape=SHAPE)])
    out, step = shrunk(save, tmp_path, m)
    assert step.changed == 1 and stored_type(out) == to and ("Cast", to) not in ops(out)
    assert_same_outputs(m, out)


def test_estimate_is_what_shrink_saves_and_half_width_does_not_count_it_again(save, tmp_path):
    """A float16-exact float32 weight behind a Cast to float16: half_width would store it in 2
    bytes too; the estimate counts it once, as shrink saves it."""
    m = through_cast(rand(SHAPE, 11).astype(np.float16).astype(np.float32), FP16)
    ws = open_workspace(m)
    estimates = {e.name: e.bytes_saved for e in estimate_pipeline(ws.graph, shrink_pipeline())}
    out, step = shrunk(save, tmp_path, m)
    half = next(p for p in onnxsurgery.shrink_file(save(m), tmp_path / "o2.onnx").passes if p.name == "half_width")
    assert estimates["cast_weights"] == step.bytes_saved == np.prod(SHAPE) * 2
    assert estimates["half_width"] == half.bytes_saved == 0
