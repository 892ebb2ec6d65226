"""What the nineteenth round's zoo models (npm packages) found, and the zoo's own code for them.

- gutenye_rec_opset9 (Guten OCR's PP-OCRv4 rec at opset 9, every weight a Constant node) in the
  zoo's float16 variant: `quant --dtype int4`, `--target tensorrt` and `--lowering dq` refused it.
  onnx's version converter turns Clip's `min`/`max` attributes (opset < 11) into float32 Constant
  inputs, whatever type the Clip computes in, and onnxruntime refused the upgraded float16 model
  (opset_constants.py). Past that, the upgrade's check held the float16 model to float32's
  tolerance: upgrade_tolerance read the weights' type from initializers only, and this model has
  none (quant_steps.py).
- silero_vad_v5_web keeps its weights in If branches: the zoo's bfloat16 variant now stores them
  too (zoo/variants.py), where it skipped the model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery import quant_file
from onnxsurgery.api.quant_steps import UPGRADE_TOLERANCE, upgrade_tolerance
from onnxsurgery.opset import upgrade_opset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import decisions, variants  # noqa: E402


def _half_clip_model(opset: int = 9) -> onnx.ModelProto:
    """float32 in and out, float16 inside (as onnxconverter-common's keep_io_types writes it): a
    MatMul by a 64 x 64 float16 weight held in a Constant node, then Clip(0, 6) by attributes."""
    w = (np.linspace(-1, 1, 64 * 64).reshape(64, 64)).astype(np.float16)
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "w")),
        helper.make_node("MatMul", ["x16", "w"], ["m"]),
        helper.make_node("Clip", ["m"], ["c"], min=0.0, max=6.0),
        helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(nodes, "half_clip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _run(model, x):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_an_upgraded_float16_clip_takes_its_bounds_in_float16():
    model = _half_clip_model()
    upgraded = upgrade_opset(model, 13)
    clip = next(n for n in upgraded.graph.node if n.op_type == "Clip")
    assert len(clip.input) == 3  # the converter made min and max inputs
    consts = {n.output[0]: n.attribute[0].t for n in upgraded.graph.node if n.op_type == "Constant"}
    assert {consts[name].data_type for name in clip.input[1:]} == {TensorProto.FLOAT16}
    x = np.linspace(-3, 3, 128, dtype=np.float32).reshape(2, 64)
    np.testing.assert_array_equal(_run(upgraded, x), _run(model, x))  # onnxruntime refused it before


def test_a_float32_model_keeps_the_converters_constants_as_they_were():
    model = _half_clip_model()
    for n in model.graph.node:  # the same graph, computing in float32
        if n.op_type == "Cast" and n.output[0] == "x16":
            n.attribute[0].i = TensorProto.FLOAT
        if n.op_type == "Constant":
            t = numpy_helper.to_array(n.attribute[0].t).astype(np.float32)
            n.attribute[0].t.CopyFrom(numpy_helper.from_array(t, "w"))
    plain = onnx.version_converter.convert_version(model, 13)
    ours = upgrade_opset(model, 13)
    assert [n.SerializeToString() for n in ours.graph.node] == [n.SerializeToString() for n in plain.graph.node]


def test_the_upgrade_tolerance_reads_weights_held_in_constant_nodes():
    assert upgrade_tolerance(_half_clip_model()) == UPGRADE_TOLERANCE[TensorProto.FLOAT16]


def test_int4_of_a_float16_opset9_model_with_clip_is_written(tmp_path):
    src = tmp_path / "half_clip.onnx"
    onnx.save(_half_clip_model(), src)
    out = tmp_path / "int4.onnx"
    quant_file(src, out, dtype="int4", min_elements=1024)  # refused before: the upgraded model did not load
    written = onnx.load(str(out))
    assert next(o.version for o in written.opset_import if o.domain in ("", "ai.onnx")) == 21
    x = np.linspace(-3, 3, 128, dtype=np.float32).reshape(2, 64)
    ref, got = _run(src, x), _run(out, x)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.1


def _if_branch_model() -> onnx.ModelProto:
    """An If whose branches each hold a 32 x 32 float32 weight in a Constant node."""
    def branch(name, scale):
        w = (np.linspace(-1, 1, 1024).reshape(32, 32) * scale).astype(np.float32)
        return helper.make_graph([helper.make_node("Constant", [], [f"{name}_w"], value=numpy_helper.from_array(w)),
                                  helper.make_node("MatMul", ["x", f"{name}_w"], [f"{name}_y"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [1, 32])])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", 1.0), else_branch=branch("else", 2.0))
    graph = helper.make_graph([node], "if_model", [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                                                    helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    return model


def test_the_bf16_variant_stores_if_branch_weights_in_bfloat16(tmp_path):
    src = tmp_path / "if_model.onnx"
    onnx.save(_if_branch_model(), src)
    out = variants.bf16(src, tmp_path)  # skipped before: "no float32 initializer or Constant"
    m = onnx.load(str(out))
    stored = [a.t.data_type for b in m.graph.node[0].attribute for n in b.g.node if n.op_type == "Constant"
              for a in n.attribute]
    assert stored == [TensorProto.BFLOAT16, TensorProto.BFLOAT16]
    x = np.linspace(-1, 1, 32, dtype=np.float32)[None]
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for cond in (True, False):
        ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(
            None, {"cond": np.array(cond), "x": x})[0]
        got = sess.run(None, {"cond": np.array(cond), "x": x})[0]
        assert 0 < np.abs(got - ref).max() < 0.05  # rounded to bfloat16, not left float32


def test_speech_prob_thresholds_silero_output_at_one_half():
    got, sparse = decisions.speech_prob({"output": np.array([[0.2], [0.5], [0.51]]),
                                         "stateN": np.zeros((2, 3, 128))}, {})
    assert got.tolist() == [False, False, True] and not sparse
