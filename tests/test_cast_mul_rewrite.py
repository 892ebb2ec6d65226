"""A quantized model's own 8-bit weights behind Cast -> (Sub) -> Mul (quantization/dequantizing.py,
choices/dequantized.py): under the int8 default they are rewritten so that onnxruntime does not
fold them into float copies at load, computing what the original computes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from test_left_alone import _cast_mul_table


def _cast_mul_matmul(to=TensorProto.FLOAT, opset=17):
    """x -> MatMul(Cast(q) * scale[1, N]) -> y, q int8 [K, N]: minilm_int8_castmul's linears."""
    rng = np.random.default_rng(1)
    dtype = helper.tensor_dtype_to_np_dtype(to)
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (96, 64)).astype(np.int8), "wq"),
             numpy_helper.from_array((rng.random((1, 64)) * 0.01 + 0.001).astype(dtype), "w_scale")]
    nodes = [helper.make_node("Cast", ["wq"], ["wf"], to=to),
             helper.make_node("Mul", ["wf", "w_scale"], ["w"]),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    return builders.model(nodes, [builders.vi("x", to, [3, 96])], [builders.vi("y", to, [3, 64])], inits, opset=opset)


def _outputs(path, feed, optimized: bool):
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feed)


def _quantized(tmp_path, model, **options):
    path, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(path))
    plan = onnxsurgery.quant_plan(path, **options)
    onnxsurgery.quant_file(path, out, **options)
    return path, out, {w.name: w for w in plan.weights}


def test_matmul_weight_stays_8_bit_and_computes_the_same(tmp_path):
    path, out, records = _quantized(tmp_path, _cast_mul_matmul())
    assert records["w_scale"].lowering == "dq" and records["w_scale"].dtype == "float"
    assert "rewritten exactly" in records["w_scale"].why and "DequantizeLinear" in records["w_scale"].why
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("DequantizeLinear") == 1 and "Cast" not in ops
    assert {t.name: t.data_type for t in graph.initializer}["wq"] == TensorProto.INT8
    feed = {"x": np.random.default_rng(2).standard_normal((3, 96)).astype(np.float32)}
    # the same operations on the same values: bitwise, unoptimized; optimized, onnxruntime packs a
    # constant MatMul weight and not a computed one, whose kernels may differ in the last bits
    assert np.array_equal(_outputs(path, feed, False)[0], _outputs(out, feed, False)[0])
    np.testing.assert_allclose(_outputs(out, feed, True)[0], _outputs(path, feed, True)[0], rtol=1e-5, atol=1e-6)


def test_gathered_table_reads_its_rows_before_dequantizing(tmp_path):
    path, out, records = _quantized(tmp_path, _cast_mul_table(), exclude=("W",))  # W would be quantized
    assert records["scale"].lowering == "dq" and "rows gathered" in records["scale"].why
    assert records["zp"].lowering is None  # the zero point's chain is rewritten with its scale's
    graph = onnx.load(str(out)).graph
    gathers = [n for n in graph.node if n.op_type == "Gather"]
    assert any(n.input[0] == "q" for n in gathers)  # the integers are gathered, not a float table
    feed = {"ids": np.array([[0, 5, 8191, 7, 7], [1, 2, 3, 4, 100]], np.int64)}
    for optimized in (False, True):
        assert np.array_equal(_outputs(path, feed, optimized)[0], _outputs(out, feed, optimized)[0])


def test_left_as_shipped_outside_the_memory_rule(tmp_path):
    """--target onnxruntime (the memory rule is the default's for any runtime), and a float16
    Cast before opset 19 (DequantizeLinear's float16 output)."""
    _, _, records = _quantized(tmp_path, _cast_mul_matmul(), target="onnxruntime")
    assert records["w_scale"].lowering is None and records["w_scale"].why.startswith("already quantized:")
    _, _, records = _quantized(tmp_path, _cast_mul_matmul(TensorProto.FLOAT16))
    assert records["w_scale"].lowering is None
    _, _, records = _quantized(tmp_path, _cast_mul_matmul(TensorProto.FLOAT16, opset=19))
    assert records["w_scale"].lowering == "dq"


def test_a_written_plan_applies_the_same(tmp_path):
    import json

    path = tmp_path / "in.onnx"
    onnx.save(_cast_mul_matmul(), str(path))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(onnxsurgery.quant_plan(path).to_dict()))
    onnxsurgery.quant_file(path, tmp_path / "a.onnx")
    onnxsurgery.quant_file(path, tmp_path / "b.onnx", plan=plan_file)
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def _table_and_linear():
    """ids -> Gather(Cast(table_q) * table_scale) -> MatMul(Cast(wq) * w_scale) -> y."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (8192, 96)).astype(np.int8), "table_q"),
             numpy_helper.from_array((rng.random((8192, 1)) * 0.01 + 0.001).astype(np.float32), "table_scale"),
             numpy_helper.from_array(rng.integers(-127, 128, (96, 64)).astype(np.int8), "wq"),
             numpy_helper.from_array((rng.random((1, 64)) * 0.01 + 0.001).astype(np.float32), "w_scale")]
    nodes = [helper.make_node("Cast", ["table_q"], ["tf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["tf", "table_scale"], ["table"]),
             helper.make_node("Gather", ["table", "ids"], ["rows"]),
             helper.make_node("Cast", ["wq"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["wf", "w_scale"], ["w"]),
             helper.make_node("MatMul", ["rows", "w"], ["y"])]
    return builders.model(nodes, [builders.vi("ids", TensorProto.INT64, [2, 5])],
                          [builders.vi("y", shape=[2, 5, 64])], inits, opset=17)


def test_a_linear_is_rewritten_only_while_the_estimate_needs_it(tmp_path):
    """The gathered table alone brings the estimate at load under the float model's: the linear's
    chain stays folded (no DequantizeLinear at each inference); --keep-quantized asks for it too."""
    path, out, records = _quantized(tmp_path, _table_and_linear())
    assert records["table_scale"].lowering == "dq" and records["w_scale"].lowering is None
    feed = {"ids": np.array([[0, 5, 8191, 7, 7], [1, 2, 3, 4, 100]], np.int64)}
    assert np.array_equal(_outputs(path, feed, True)[0], _outputs(out, feed, True)[0])
    _, _, records = _quantized(tmp_path, _table_and_linear(), keep_quantized=True)
    assert records["w_scale"].lowering == "dq" and "--keep-quantized" in records["w_scale"].why


def _table_and_linears(n_linears: int, width: int):
    """ids -> Gather(Cast(table_q) * table_scale) -> `n_linears` MatMuls of Cast(wq_i) * w_scale_i [96, width],
    summed: all-MiniLM-L6-v2's proportions of a table to its linears at n_linears=4, width=1824."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (8192, 96)).astype(np.int8), "table_q"),
             numpy_helper.from_array((rng.random((8192, 1)) * 0.01 + 0.001).astype(np.float32), "table_scale")]
    nodes = [helper.make_node("Cast", ["table_q"], ["tf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["tf", "table_scale"], ["table"]),
             helper.make_node("Gather", ["table", "ids"], ["rows"])]
    for i in range(n_linears):
        inits += [numpy_helper.from_array(rng.integers(-127, 128, (96, width)).astype(np.int8), f"wq{i}"),
                  numpy_helper.from_array((rng.random((1, width)) * 0.01 + 0.001).astype(np.float32), f"w_scale{i}")]
        nodes += [helper.make_node("Cast", [f"wq{i}"], [f"wf{i}"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [f"wf{i}", f"w_scale{i}"], [f"w{i}"]),
                  helper.make_node("MatMul", ["rows", f"w{i}"], [f"y{i}"])]
    nodes.append(helper.make_node("Sum", [f"y{i}" for i in range(n_linears)], ["y"]))
    return builders.model(nodes, [builders.vi("ids", TensorProto.INT64, [2, 5])],
                          [builders.vi("y", shape=[2, 5, width])], inits, opset=17)


def test_the_estimate_stops_where_the_tables_meet_the_float_model(tmp_path):
    """Fitted to MiniLM's load figures (dequantized.SHIPPED_FOLDED): its linears' float bytes are 0.89x
    its tables', whose rows gathered alone hold 0.89x the float model at load, so no linear is kept
    (the estimate that once took ARITH_LEAN, +1.9 a folded chain, kept some); linears 1.5x the
    table's are still kept, the largest first, until the estimate is under the float model's."""
    _, _, records = _quantized(tmp_path, _table_and_linears(4, 1824))
    assert records["table_scale"].lowering == "dq"
    assert [records[f"w_scale{i}"].lowering for i in range(4)] == [None] * 4
    _, _, records = _quantized(tmp_path, _table_and_linears(2, 6144))
    assert [records[f"w_scale{i}"].lowering for i in range(2)] == ["dq", None]
