"""shrink's half-width storage: float32 constants that float16/bfloat16 hold exactly go to 2
bytes with a Cast after; outputs stay bit-identical in onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from builders import const_node, feeds_for, model, rand, vi
from conftest import all_tensors, assert_same_outputs, run
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.storage.protos import graphs_everywhere
import onnxsurgery
from onnxsurgery.passes.half_width import exact_half_type
from onnxsurgery.pipeline import estimate_pipeline, open_workspace, shrink_pipeline

BF16 = TensorProto.BFLOAT16
FP16 = TensorProto.FLOAT16


def bf16_exact(shape, seed):
    """What an fp32 export of a bf16 checkpoint holds: float32 with the low 16 bits zero, with
    values too small for float16 so that only bfloat16 is exact."""
    x = rand(shape, seed) * 1e-6
    return (x.view(np.uint32) & 0xFFFF0000).view(np.float32)


def fp16_exact(shape, seed):
    return (rand(shape, seed) * 0.1).astype(np.float16).astype(np.float32)


def mlp(weights: dict[str, np.ndarray], opset=17) -> onnx.ModelProto:
    """x -> MatMul W1 -> Add b1 -> Relu -> MatMul W2 (W2 a Constant node) -> y."""
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             const_node("W2", weights["W2"]),
             helper.make_node("MatMul", ["r", "W2"], ["y"])]
    inits = [numpy_helper.from_array(weights["W1"], "W1"), numpy_helper.from_array(weights["b1"], "b1")]
    return model(nodes, [vi("x", shape=[3, 64])], [vi("y", shape=[3, 32])], inits, opset=opset)


def exact_mlp(make=bf16_exact, opset=17):
    return mlp({"W1": make((64, 128), 1), "b1": make((128,), 2), "W2": make((128, 32), 3)}, opset=opset)


def stored_types(m: onnx.ModelProto) -> dict[str, int]:
    return {t.name: t.data_type for t in all_tensors(m)}


@pytest.mark.parametrize("make, half_type", [(bf16_exact, BF16), (fp16_exact, FP16)])
def test_exact_weights_go_to_two_bytes_and_outputs_stay_identical(save, tmp_path, make, half_type):
    src = save(exact_mlp(make))
    out = tmp_path / "small.onnx"
    report = onnxsurgery.shrink_file(src, out, verify=True)
    assert report.verification["exact"]
    assert out.stat().st_size <= 0.55 * src.stat().st_size
    result = onnx.load(str(out))
    assert sorted(stored_types(result).values()) == [half_type] * 3
    assert [n.op_type for n in result.graph.node].count("Cast") == 3
    assert_same_outputs(onnx.load(str(src)), result, seeds=(0, 1, 2))
    half = report.pass_report("half_width")
    assert half.changed == 3 and half.bytes_saved == 2 * (64 * 128 + 128 + 128 * 32)


def test_float16_preferred_and_bfloat16_only_from_opset_13():
    both = np.array([1.0, -0.0, 0.5, -2.0, np.inf] * 4, np.float32)  # exact in both
    assert exact_half_type(gs_const(both), both.nbytes, bfloat16=True) == (FP16, None)
    bf = bf16_exact((20,), 0)
    assert exact_half_type(gs_const(bf), bf.nbytes, bfloat16=True) == (BF16, None)
    half_type, why = exact_half_type(gs_const(bf), bf.nbytes, bfloat16=False)
    assert half_type is None and "opset 13" in why
    # opset 12: the bf16-exact model keeps float32
    result, report = onnxsurgery.shrink(exact_mlp(bf16_exact, opset=12))
    assert set(stored_types(result).values()) == {TensorProto.FLOAT}
    assert report.pass_report("half_width").changed == 0


def gs_const(array):
    import onnx_graphsurgeon as gs

    return gs.Constant("c", array)


def test_nan_negative_zero_and_subnormals():
    x = bf16_exact((64,), 4)
    x[0], x[1] = -0.0, np.float32(1e-40)  # -0 and a float32 subnormal
    x[1] = (np.array([x[1]]).view(np.uint32) & 0xFFFF0000).view(np.float32)[0]
    assert exact_half_type(gs_const(x), x.nbytes, bfloat16=True)[0] == BF16
    x[2] = np.nan
    half_type, why = exact_half_type(gs_const(x), x.nbytes, bfloat16=True)
    assert half_type is None and "NaN" in why
    # a value one ulp off in float32 rules both types out
    y = fp16_exact((64,), 5)
    y[7] = np.nextafter(y[7], np.float32(1))
    assert exact_half_type(gs_const(y), y.nbytes, bfloat16=True)[0] is None


def test_random_float32_weights_stay_as_they_are(save, tmp_path):
    m = mlp({"W1": rand((64, 128), 1), "b1": rand((128,), 2), "W2": rand((128, 32), 3)})
    src = save(m)
    report = onnxsurgery.shrink_file(src, tmp_path / "o.onnx")
    assert report.pass_report("half_width").changed == 0
    assert report.notes == ["nothing to shrink: the output is a copy of the input"]


def test_interfaces_quantized_readers_and_small_constants_are_kept():
    w = fp16_exact((32, 32), 1)
    scale = fp16_exact((32,), 2) + 1
    nodes = [helper.make_node("Add", ["x", "W_out"], ["y"]),  # W_out is also a graph output
             helper.make_node("Add", ["x", "W_default"], ["z"]),
             helper.make_node("DequantizeLinear", ["q", "scale"], ["dq"], axis=1),
             helper.make_node("Add", ["x", "dq"], ["d"]),
             helper.make_node("Add", ["x", "tiny"], ["t"])]
    inits = [numpy_helper.from_array(w, "W_out"), numpy_helper.from_array(w + 1, "W_default"),
             numpy_helper.from_array(np.ones((32, 32), np.int8), "q"), numpy_helper.from_array(scale, "scale"),
             numpy_helper.from_array(np.ones((32,), np.float32), "tiny")]  # 128 B: not worth a Cast
    m = model(nodes, [vi("x", shape=[32, 32]), vi("W_default", shape=[32, 32])],
              [vi(n, shape=[32, 32]) for n in ("y", "z", "d", "t", "W_out")], inits)
    result, report = onnxsurgery.shrink(m)
    assert set(stored_types(result).values()) <= {TensorProto.FLOAT, TensorProto.INT8}
    skipped = {s.name: s.reason for s in report.pass_report("half_width").skipped}
    assert "graph output" in skipped["W_out"] and "overridable" in skipped["W_default"]
    assert "DequantizeLinear" in skipped["scale"] and "tiny" not in skipped


def test_subgraph_readers_get_a_cast_each_and_run_identically():
    """An outer weight read in both If branches and by the main graph: one Cast per graph."""
    w = fp16_exact((16, 16), 6)
    k = bf16_exact((8, 16), 7)
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["t_out"])], "then", [],
                               [vi("t_out", shape=[8, 16])])
    else_g = helper.make_graph([const_node("K", k), helper.make_node("Add", ["x", "K"], ["e0"]),
                                helper.make_node("MatMul", ["e0", "W"], ["e_out"])], "else", [],
                               [vi("e_out", shape=[8, 16])])
    nodes = [helper.make_node("If", ["c"], ["i"], then_branch=then_g, else_branch=else_g),
             helper.make_node("MatMul", ["i", "W"], ["y"])]
    m = model(nodes, [vi("c", TensorProto.BOOL, []), vi("x", shape=[8, 16])], [vi("y", shape=[8, 16])],
              [numpy_helper.from_array(w, "W")])
    result, report = onnxsurgery.shrink(m)
    assert report.pass_report("half_width").changed == 2
    casts = [n for g in graphs_everywhere(result.graph) for n in g.node if n.op_type == "Cast"]
    assert len(casts) == 4  # W: main, then, else; K: else
    assert sorted(stored_types(result).values()) == [FP16, BF16]
    for seed in (0, 1):
        feeds = feeds_for(m, seed)
        for a, b in zip(run(m, feeds), run(result, feeds)):
            assert a.tobytes() == b.tobytes()



def test_info_shows_what_16_bit_storage_saves(save):
    from click.testing import CliRunner

    from onnxsurgery.cli import main

    src = save(exact_mlp())
    ws = open_workspace(str(src))
    steps = {step.name: step for step in estimate_pipeline(ws.graph, shrink_pipeline(opsets=ws.opsets),
                                                           overridable=ws.overridable)}
    half = steps.pop("half_width")
    assert half.bytes_saved == 2 * (64 * 128 + 128 + 128 * 32) and not any(s.bytes_saved for s in steps.values())
    r = CliRunner().invoke(main, ["info", str(src), "--json"])
    data = json.loads(r.output)
    assert data["savings"]["shrink"] == half.bytes_saved
    assert data["shrink_parts"]["16-bit storage"] == half.bytes_saved
    r = CliRunner().invoke(main, ["info", str(src)])
    assert "of which float32 stored exactly in 16 bits: 24.8 KB" in r.output


def test_half_off_keeps_float32():
    result, report = onnxsurgery.shrink(exact_mlp(), half=False)
    assert set(stored_types(result).values()) == {TensorProto.FLOAT}
    assert report.pass_report("half_width") is None


def test_memory_after_session_creation_not_above_the_float_original(tmp_path):
    """The Cast folds at session start into one float32 copy: memory after session creation no
    larger than the float original's. Measured with external data (mapped, as onnxruntime reads
    large models): with the payload inline, glibc keeps the freed 16-bit buffer in the process's
    heap after the fold (its dynamic mmap threshold), which shows as that much more RSS; with
    MALLOC_MMAP_THRESHOLD_ fixed, inline is level with the original too."""
    from onnxsurgery.storage.staging import save_model
    from onnxsurgery.running.session_memory import measure_in_fresh_process

    m = model([helper.make_node("MatMul", ["x", "W"], ["y"])], [vi("x", shape=[3, 2048])],
              [vi("y", shape=[3, 2048])], [numpy_helper.from_array(bf16_exact((2048, 2048), 8), "W")])
    src, out = tmp_path / "float.onnx", tmp_path / "half.onnx"
    save_model(m, src, external_data=True)
    onnxsurgery.shrink_file(src, out, external_data=True, verify=True)
    assert (tmp_path / "half.onnx.data").stat().st_size == (tmp_path / "float.onnx.data").stat().st_size // 2
    before, after = measure_in_fresh_process(src), measure_in_fresh_process(out)
    for key in ("peak_growth", "rss_growth"):
        assert after[key] <= before[key] * 1.05 + 2**20, (key, before, after)


@pytest.mark.parametrize("make, half_type", [(bf16_exact, BF16), (fp16_exact, FP16)])
def test_a_gathered_table_casts_the_rows_and_stays_two_bytes_in_memory(save, tmp_path, make, half_type):
    """A table read only as the data of Gather nodes: each Gather reads the 2-byte table and a
    Cast follows it, so onnxruntime has no table-sized Cast to fold at load (its optimized graph
    still holds the table in 2 bytes), and the outputs are bit-identical to the float original's."""
    import onnxruntime as ort

    table = make((512, 64), 5)
    nodes = [helper.make_node("Gather", ["T", "ids"], ["e"]), helper.make_node("Gather", ["T", "ids2"], ["e2"]),
             helper.make_node("Add", ["e", "e2"], ["y"])]
    m = model(nodes, [vi("ids", TensorProto.INT64, [2, 7]), vi("ids2", TensorProto.INT64, [2, 7])],
              [vi("y", shape=[2, 7, 64])], [numpy_helper.from_array(table, "T")])
    src, out = save(m), tmp_path / "small.onnx"
    report = onnxsurgery.shrink_file(src, out, verify=True)
    assert report.verification["exact"]
    shrunk = onnx.load(str(out))
    assert [t.data_type for t in shrunk.graph.initializer] == [half_type]
    gathers = [n for n in shrunk.graph.node if n.op_type == "Gather"]
    assert len(gathers) == 2 and all(n.input[0] == shrunk.graph.initializer[0].name for n in gathers)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"])
    assert {t.data_type for t in onnx.load(options.optimized_model_filepath).graph.initializer} == {half_type}
    rng = np.random.default_rng(0)
    feeds = {"ids": rng.integers(0, 512, (2, 7)), "ids2": rng.integers(-512, 512, (2, 7))}  # negative ids too
    (a,), (b,) = run(m, feeds), run(out, feeds)
    assert a.dtype == b.dtype == np.float32 and np.array_equal(a.view(np.uint32), b.view(np.uint32))
