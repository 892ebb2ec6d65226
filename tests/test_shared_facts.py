"""quantize.py's facts shared by every way one weight is quantized (its input-side scales and
its channels' ranges, within `remembering`): the written file is the one made without them,
where the plan measured a sample of a weight's channels and the pass quantizes it whole too."""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import builders
import onnxsurgery


def _model(path):
    rng = np.random.default_rng(3)
    lopsided = (rng.uniform(0.0, 1.0, (256, 192)) * 0.05).astype(np.float32)  # zero points pay
    normal = (rng.standard_normal((192, 128)) * 0.05).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W_lopsided"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "W_normal"], ["y"])]
    inits = [numpy_helper.from_array(lopsided, "W_lopsided"), numpy_helper.from_array(normal, "W_normal")]
    model = builders.model(nodes, [builders.vi("x", shape=[4, 256])], [builders.vi("y", shape=[4, 128])], inits,
                           opset=21, ir=10)
    onnx.save(model, str(path))


@pytest.mark.parametrize("options", [{}, {"dtype": "int4"}, {"asymmetric": True}], ids=["int8", "int4", "asymmetric"])
def test_shared_facts_change_no_byte(tmp_path, monkeypatch, options):
    from onnxsurgery.quantization import quantize
    from onnxsurgery.quantization.choices import sampling

    # the plan measures 64 of each weight's channels, the pass quantizes all of them
    monkeypatch.setattr(sampling, "SAMPLE_FROM_ELEMENTS", 1 << 12)
    monkeypatch.setattr(sampling, "SAMPLED_ELEMENTS", 1 << 13)
    monkeypatch.setattr(sampling, "MIN_SAMPLED_CHANNELS", 32)
    src = tmp_path / "in.onnx"
    _model(src)
    measured = not options.pop("asymmetric", False)  # --asymmetric: nothing measured, nothing sampled
    if not measured:
        options["symmetric"] = False
    shared = []
    keep = quantize._shared
    monkeypatch.setattr(quantize, "_shared", lambda values, site: shared.append(values.shape) or keep(values, site))
    onnxsurgery.quant_file(src, tmp_path / "shared.onnx", verify=False, **options)
    assert {(256, 192), (192, 128)} <= set(shared)  # whole weights went through the shared facts
    assert not measured or any(s[1] < 128 for s in shared)  # and samples of them too
    monkeypatch.setattr(quantize, "_shared", lambda values, site: None)
    onnxsurgery.quant_file(src, tmp_path / "alone.onnx", verify=False, **options)
    assert (tmp_path / "shared.onnx").read_bytes() == (tmp_path / "alone.onnx").read_bytes()
