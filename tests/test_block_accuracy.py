"""Issue 18's "int4 defect": on ALBERT-base (12 layers sharing one weight set), int4 blocks of 128
gave a smaller output error than blocks of 32. The cause was the measure, not the quantizer:
ALBERT's output there is two logits behind a randomly initialised pooler and classifier, so
which way single weights round decides the figure. On the encoder's sequence output the error
grows with the block size, as it should (docs/quantization.md). This test holds that on a model
built in code: one weight shared by 12 layers, read through the realistic residual + LayerNorm
path, measured in onnxruntime on a wide output."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import builders
import onnxsurgery
from conftest import run

LAYERS, WIDTH, TOKENS = 12, 256, 32


def _shared_layers() -> onnx.ModelProto:
    """x -> 12 x (x + Gelu-ish(LayerNorm(x) @ W)) with one W, as ALBERT shares its layers."""
    nodes, h = [], "x"
    for i in range(LAYERS):
        nodes += [helper.make_node("LayerNormalization", [h, "gamma", "beta"], [f"n{i}"], axis=-1),
                  helper.make_node("MatMul", [f"n{i}", "W"], [f"m{i}"]),
                  helper.make_node("Tanh", [f"m{i}"], [f"t{i}"]),
                  helper.make_node("Add", [h, f"t{i}"], [f"h{i}"])]
        h = f"h{i}"
    inits = [numpy_helper.from_array((builders.rand((WIDTH, WIDTH), 1) / np.sqrt(WIDTH)).astype(np.float32), "W"),
             numpy_helper.from_array(np.ones(WIDTH, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(WIDTH, np.float32), "beta")]
    return builders.model(nodes, [builders.vi("x", shape=[TOKENS, WIDTH])],
                          [builders.vi(h, shape=[TOKENS, WIDTH])], inits)


@pytest.mark.parametrize("dtype", ["int4", "int8"])
@pytest.mark.parametrize("symmetric", [False, True])
def test_smaller_blocks_are_not_less_accurate_on_shared_weights(tmp_path, dtype, symmetric):
    model = _shared_layers()
    src = tmp_path / "shared.onnx"
    onnx.save(model, str(src))
    feeds = {"x": builders.rand((TOKENS, WIDTH), 7)}
    (ref,) = run(model, feeds)
    errors = {}
    for block in (32, 128):
        out = tmp_path / f"b{block}.onnx"
        report = onnxsurgery.quant_file(src, out, dtype=dtype, granularity="block", block_size=block,
                                        symmetric=symmetric, min_elements=1024, verify=False)
        assert report.pass_report("quantize").changed == 1  # the one shared weight
        (got,) = run(out, feeds)
        errors[block] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    assert 0 < errors[32] < errors[128], errors
