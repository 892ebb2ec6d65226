"""A 16-bit weight read through Casts to float32 is a float32 weight at load (issue 55, second
round): the memory-at-load rule keeps it as it keeps the float32 model's (load_memory.as_float32),
a reader behind the Cast in an If branch is found (weight_readers.through_casts), the accurate
chain feeds the readers in float32 without rounding to 16 bits and back (lowerings/arith.py), and
a quantized model's own data stays itself behind a Cast (weights.already_quantized)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
import builders
from test_half_plans import FORM, _bf16_values


def _stored(name: str, w: np.ndarray, bf16: bool, nodes: list) -> onnx.TensorProto:
    """`w` as float32, or as bfloat16 behind a Cast to float32 named `name` (zoo/variants.py's bf16)."""
    if not bf16:
        return numpy_helper.from_array(w, name)
    raw = (w.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    nodes.insert(0, helper.make_node("Cast", [name + "__bf16"], [name], to=TensorProto.FLOAT))
    return helper.make_tensor(name + "__bf16", TensorProto.BFLOAT16, list(w.shape), raw, raw=True)


def _chain(bf16: bool) -> onnx.ModelProto:
    """Four 256x256 MatMuls (the lean forms alone hold more than the float model: some are kept),
    then a 3x3 Conv in an If's branches reading an outer Cast's output."""
    nodes, inits = [], []
    x = "x"
    for i in range(4):
        inits.append(_stored(f"w{i}", _bf16_values((256, 256), 10 + i, 0.1), bf16, nodes))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        x = f"r{i}"
    inits.append(_stored("k", _bf16_values((128, 16, 3, 3), 20, 0.1), bf16, nodes))
    nodes.append(helper.make_node("Reshape", [x, "to_image"], ["img"]))
    inits.append(numpy_helper.from_array(np.array([1, 16, 4, 4], np.int64), "to_image"))
    branch = lambda out, op: helper.make_graph(  # noqa: E731
        [helper.make_node(op, ["img", "k"], [out], pads=[1, 1, 1, 1])], f"b_{out}", [],
        [builders.vi(out, shape=[1, 128, 4, 4])])
    nodes += [helper.make_node("ReduceSum", ["img"], ["s"], keepdims=0),
              helper.make_node("Greater", ["s", "zero"], ["cond"]),
              helper.make_node("If", ["cond"], ["y"], then_branch=branch("t", "Conv"), else_branch=branch("e", "Conv"))]
    inits.append(numpy_helper.from_array(np.array(-1e9, np.float32), "zero"))
    return builders.model(nodes, [builders.vi("x", shape=[1, 256])], [builders.vi("y", shape=[1, 128, 4, 4])], inits,
                          opset=17)


def _plans(tmp_path, make, **options):
    plans = {}
    for bf16 in (False, True):
        src = tmp_path / f"{make.__name__}.{'bf16' if bf16 else 'f32'}.onnx"
        onnx.save(make(bf16), str(src))
        plans[bf16] = {r.name.removesuffix("__bf16"): r for r in onnxsurgery.quant_plan(src, **options).weights}
    return plans


def test_bfloat16_weights_are_kept_in_memory_as_float32_ones(tmp_path):
    plans = _plans(tmp_path, _chain, min_elements=1024)
    f32, bf16 = plans[False], plans[True]
    assert set(f32) == set(bf16)
    for name in f32:
        assert [getattr(f32[name], k) for k in FORM] == [getattr(bf16[name], k) for k in FORM], name
    assert any(r.lowering in ("dq", "dq_equalized", "dq_float") for r in f32.values())  # the rule keeps some
    assert bf16["k"].consumers == ["Cast"]  # the Conv behind it sits in the If's branch


def test_bfloat16_weights_that_would_not_fit_as_float32_stay_quantized(tmp_path):
    """Where the float32 weights do not fit the memory the model runs in, a bfloat16 weight behind
    Casts counts its float32 bytes (onnxruntime folds the Casts at load): its 2 bytes would fit."""
    plans = _plans(tmp_path, _chain, min_elements=1024, memory=800_000)  # float32 1.1 MB, bf16 0.56 MB
    f32, bf16 = plans[False], plans[True]
    for name in f32:
        assert [getattr(f32[name], k) for k in FORM] == [getattr(bf16[name], k) for k in FORM], name
    assert all(r.lowering == "dq" and r.why.startswith("kept quantized at load") for r in bf16.values()
               if r.dtype != "float")


def test_bfloat16_kept_and_chained_weights_compute_as_float32_ones(tmp_path):
    """Written and verified: the kept weights' DequantizeLinear, the scaled Conv in the branch."""
    errors = {}
    for bf16 in (False, True):
        src = tmp_path / f"w.{'bf16' if bf16 else 'f32'}.onnx"
        onnx.save(_chain(bf16), str(src))
        report = onnxsurgery.quant_file(src, tmp_path / f"q.{src.name}", min_elements=1024)
        errors[bf16] = report.verification["rel_l2_error"]
        out = onnx.load(str(tmp_path / f"q.{src.name}"))
        stored = [t for t in out.graph.initializer if t.data_type == TensorProto.BFLOAT16]
        assert not stored  # every weight quantized, no 16-bit copy or round trip left
    assert errors[True] <= 1.2 * errors[False] + 1e-6, errors


def test_accurate_chain_feeds_the_readers_in_float32(tmp_path):
    """A 16-bit weight's arith chain: no Cast to bfloat16 and back, the values a float32 weight's gives."""
    outs = {}
    for bf16 in (False, True):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        w = _bf16_values((64, 96), 3, 0.2)
        model = builders.model(nodes, [builders.vi("x", shape=[2, 64])], [builders.vi("y", shape=[2, 96])],
                               [_stored("w", w, bf16, nodes)], opset=17)
        src = tmp_path / f"a{bf16}.onnx"
        onnx.save(model, str(src))
        onnxsurgery.quant_file(src, tmp_path / f"q{bf16}.onnx", min_elements=1024, lowering="arith",
                               granularity="block")
        out = onnx.load(str(tmp_path / f"q{bf16}.onnx"))
        assert not any(n.op_type == "Cast" and helper.get_attribute_value(n.attribute[0]) == TensorProto.BFLOAT16
                       for n in out.graph.node)
        import onnxruntime as ort
        x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
        outs[bf16] = ort.InferenceSession(str(tmp_path / f"q{bf16}.onnx")).run(None, {"x": x})[0]
    np.testing.assert_array_equal(outs[True], outs[False])


def test_quantized_models_data_stays_behind_a_cast(tmp_path):
    """A float constant a quantized op reads (here DequantizeLinear's scale; voicefilter_embedder's
    DynamicQuantizeLSTM bias), stored in bfloat16 behind a Cast, is the quantized model's own data
    as its float32 storage is."""
    plans = {}
    for bf16 in (False, True):
        nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["w"], axis=1),
                 helper.make_node("Add", ["w", "x"], ["y"])]
        inits = [numpy_helper.from_array(np.ones((1, 4096), np.int8), "q"),
                 _stored("s", np.abs(_bf16_values((4096,), 5)) + 0.01, bf16, nodes)]
        src = tmp_path / f"d{bf16}.onnx"
        onnx.save(builders.model(nodes, [builders.vi("x", shape=[1, 4096])], [builders.vi("y", shape=[1, 4096])],
                                 inits, opset=17), str(src))
        plans[bf16] = {r.name.removesuffix("__bf16"): r for r in onnxsurgery.quant_plan(src, min_elements=1024).weights}
    assert plans[False]["s"].dtype == plans[True]["s"].dtype == "float"
    assert plans[True]["s"].why.startswith("already quantized")
