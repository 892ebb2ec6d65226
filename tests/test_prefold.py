"""A 16-bit float model's result verified folded with its weights' chains folded one weight at a
time first (running/prefold.py): the same outputs as onnxruntime's default session, bit for bit,
and the reported error the default session's (zoo invariant 8)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
from click.testing import CliRunner
from onnx import TensorProto, helper

import builders
from onnxsurgery.cli import main
from onnxsurgery.running.output_errors import compare_outputs
from onnxsurgery.running.prefold import prefolded_session
from onnxsurgery.running.sessions import _load, session, session_settings

HIDDEN = 256


def _half_model() -> onnx.ModelProto:
    """x @ W1 -> Relu -> @ W2, each weight stored float16 and Cast to float32 before its MatMul."""
    nodes = [helper.make_node("Cast", ["w1_16"], ["w1"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["w2_16"], ["w2"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    inits = [onnx.numpy_helper.from_array(builders.rand((HIDDEN, HIDDEN), s).astype(np.float16), f"w{s}_16")
             for s in (1, 2)]
    return builders.model(nodes, [builders.vi("x", shape=[1, "n", HIDDEN])],
                          [builders.vi("y", shape=[1, "n", HIDDEN])], inits)


def _default(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_prefolded_result_computes_what_a_default_session_does(tmp_path):
    path, out = tmp_path / "half.onnx", tmp_path / "q.onnx"
    onnx.save(_half_model(), path)
    result = CliRunner().invoke(main, ["quant", str(path), str(out), "--json"])
    assert result.exit_code == 0, result.output
    reported = json.loads(result.output)["verification"]["outputs"]["y"]["rel_l2_error"]
    folded = prefolded_session(out, session_settings(), _load)
    assert folded is not None  # the quantized weights' Cast -> Mul chains were folded here
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 16, HIDDEN)).astype(np.float32)}
    expected = _default(out).run(None, feeds)
    assert folded.run(None, feeds)[0].tobytes() == expected[0].tobytes()
    assert session(out, prefold=True).run(None, feeds)[0].tobytes() == expected[0].tobytes()
    # invariant 8: the reported error is the written file's in a default session
    generated = CliRunner().invoke(main, ["compare", str(path), str(out), "--json"])
    assert generated.exit_code == 0, generated.output
    assert reported > 0
    assert abs(json.loads(generated.output)["outputs"]["y"]["rel_l2_error"] - reported) <= 1e-6 * reported


def test_nothing_to_fold_is_left_to_onnxruntime(tmp_path):
    path = tmp_path / "plain.onnx"
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    onnx.save(builders.model(nodes, [builders.vi("x", shape=[1, 8])], [builders.vi("y", shape=[1, 8])],
                             [onnx.numpy_helper.from_array(builders.rand((8, 8), 1), "w")]), path)
    assert prefolded_session(path, session_settings(), _load) is None


def test_a_default_session_and_the_prefolded_one_agree_on_the_half_model(tmp_path):
    path = tmp_path / "half.onnx"
    onnx.save(_half_model(), path)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 8, HIDDEN)).astype(np.float32)}
    got = session(path, prefold=True).run(None, feeds)
    assert compare_outputs(_default(path).run(None, feeds), got, ["y"])["y"]["exact"]


def test_a_weight_read_in_16_bits_is_left_to_onnxruntime(tmp_path):
    """isnet in float16: its quantized weights' chains end in float16 Convs, which onnxruntime's
    folding computed otherwise than a folded constant (0.33 apart): not folded here."""
    from onnxsurgery.running.prefold import _chains

    nodes = [helper.make_node("Cast", ["w8"], ["w32"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["w32", "scale"], ["w"]),
             helper.make_node("Cast", ["w"], ["w16"], to=TensorProto.FLOAT16),
             helper.make_node("MatMul", ["x", "w16"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.ones((8, 8), np.int8), "w8"),
             onnx.numpy_helper.from_array(np.array(0.5, np.float32), "scale")]
    graph = builders.model(nodes, [builders.vi("x", TensorProto.FLOAT16, [1, 8])],
                           [builders.vi("y", TensorProto.FLOAT16, [1, 8])], inits).graph
    assert _chains(graph) == ([], [])
    nodes[3] = helper.make_node("MatMul", ["x", "w"], ["y"])  # read in float32: folded here
    del graph.node[:]
    graph.node.extend(nodes[:2] + nodes[3:])
    assert _chains(graph)[1] == ["w"]
