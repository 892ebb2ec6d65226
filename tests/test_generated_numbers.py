"""Generated samples on which the original computes numbers. chython-rxnmap (zoo: rxnmap) takes
per-token role codes that the graph compares with 0 to find its molecule tokens: generated as all
0 (the rule meant for silero-vad's scalar `sr == 16000`), every position was masked and every
output NaN, and verification compared NaN with NaN and reported an error of 0 with 100% argmax
agreement: a verification that checked nothing, said to be exact."""

from __future__ import annotations

import json

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper

import builders
from onnxsurgery.cli import main
from onnxsurgery.running.feeds import LENGTHS, make_inputs
from onnxsurgery.running.generated import runnable_inputs
from onnxsurgery.running.sessions import session

HIDDEN = 64


def _masked_by_codes() -> onnx.ModelProto:
    """x [1, n, HIDDEN] @ W, summed per token, tokens whose role is 0 masked to -inf, a softmax
    over the tokens: NaN everywhere where every role is 0."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("ReduceSum", ["h", "last"], ["scores"], keepdims=0),
        builders.const_node("zero", np.array(0, np.int64)),
        helper.make_node("Equal", ["roles", "zero"], ["masked"]),
        builders.const_node("minus_inf", np.array(-np.inf, np.float32)),
        helper.make_node("Where", ["masked", "minus_inf", "scores"], ["kept"]),
        helper.make_node("Softmax", ["kept"], ["attention"], axis=-1),
    ]
    inits = [onnx.numpy_helper.from_array(builders.rand((HIDDEN, HIDDEN), 1), "w"),
             onnx.numpy_helper.from_array(np.array([-1], np.int64), "last")]
    return builders.model(nodes, [builders.vi("x", shape=[1, "n", HIDDEN]),
                                  builders.vi("roles", TensorProto.INT64, [1, "n"])],
                          [builders.vi("attention", shape=[1, "n"])], inits)


def _hollow_when_short(threshold: float) -> onnx.ModelProto:
    """y = x * log(length - threshold): NaN everywhere for inputs no longer than `threshold`."""
    nodes = builders.log_of_length("x", threshold, "scale") + [helper.make_node("Mul", ["x", "scale"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=[1, "n"])], [builders.vi("y", shape=[1, "n"])])


def test_codes_compared_with_a_constant_stay_varied(tmp_path):
    path = tmp_path / "codes.onnx"
    onnx.save(_masked_by_codes(), path)
    sess = session(str(path))
    feeds = make_inputs(sess, model=str(path))
    assert len(np.unique(feeds["roles"])) > 1  # not all the constant the graph compares with
    assert np.isfinite(sess.run(None, feeds)[0]).all()


def test_verification_compares_numbers(tmp_path):
    path, out = tmp_path / "codes.onnx", tmp_path / "q.onnx"
    onnx.save(_masked_by_codes(), path)
    result = CliRunner().invoke(main, ["quant", str(path), str(out), "--json"])
    assert result.exit_code == 0, result.output
    verification = json.loads(result.output)["verification"]
    error = verification["outputs"]["attention"]["rel_l2_error"]
    assert 0 < error < 0.05  # a quantized weight moves the numbers; NaN against NaN said 0


def test_a_sample_without_numbers_is_tried_again(tmp_path):
    path = tmp_path / "hollow.onnx"
    onnx.save(_hollow_when_short(100.0), path)
    sess = session(str(path))
    sample, outputs, length, error = runnable_inputs(sess, lambda feeds: sess.run(None, feeds), model=str(path))
    assert error is None and length == LENGTHS[1] > 100
    assert np.isfinite(outputs[0]).all()


def test_a_model_without_numbers_anywhere_keeps_its_first_sample(tmp_path):
    path = tmp_path / "hollow.onnx"
    onnx.save(_hollow_when_short(1e9), path)
    sess = session(str(path))
    sample, outputs, length, error = runnable_inputs(sess, lambda feeds: sess.run(None, feeds), model=str(path))
    assert error is None and length == LENGTHS[0]
    assert np.isnan(outputs[0]).all()


def test_ids_into_a_table_cast_back_from_16_bits_stay_in_range(tmp_path):
    """The zoo's bf16 variant of rxnmap: each table stored in 16 bits and Cast to float32 before
    its Gather. Unbounded ids ran out of the table's 4 rows, and the one sample left (all ids 0)
    made every output NaN."""
    table = builders.rand((4, 8), 2).astype(np.float16)
    nodes = [helper.make_node("Cast", ["table16"], ["table"], to=TensorProto.FLOAT),
             helper.make_node("Gather", ["table", "ids"], ["y"])]
    model = builders.model(nodes, [builders.vi("ids", TensorProto.INT64, [1, "n"])],
                           [builders.vi("y", shape=[1, "n", 8])],
                           [onnx.numpy_helper.from_array(table, "table16")])
    path = tmp_path / "cast_table.onnx"
    onnx.save(model, path)
    feeds = make_inputs(session(str(path)), model=str(path))
    assert feeds["ids"].max() < 4 and len(np.unique(feeds["ids"])) > 1
