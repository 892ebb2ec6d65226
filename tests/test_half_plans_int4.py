"""Under --dtype int4, a 16-bit weight read through Casts to float32 takes the form its float32
twin takes (choices/int4_paths.py): the readers behind the Casts decide (a Conv: int8 lean, no
4-bit; a MatMul with K not tiled by a power of two: int8 lean), and the model's share of Conv
bytes counts the Convs behind Casts. Before, the Cast was judged as the reader: 4-bit everywhere."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxsurgery

import builders
from test_half_plans import FORM, _bf16_values
from test_half_plans_at_load import _plans, _stored


# the per-weight forms are tested here; int4 saves 18.5% of int8's bytes on these models, where the
# plan-level rule (int4_saving.py, tests/test_int4_saving.py) would keep the int8 default's
pytestmark = pytest.mark.usefixtures("int4_forms_alone")


def _conv_and_matmul(bf16: bool):
    """A 64x64x3x3 Conv (below SMALL_CONV_ELEMENTS: int8 lean), then MatMuls with K = 96 (blocks of
    32 tile it; fused), K = 240 (blocks of 16, not 30: fused, forms.choose_scheme) and K = 120 (no
    power-of-two tiling: int8 lean)."""
    nodes, inits = [], []
    inits.append(_stored("k", _bf16_values((64, 64, 3, 3), 1, 0.1), bf16, nodes))
    nodes += [helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]),
              helper.make_node("Reshape", ["c", "flat"], ["f"])]
    inits.append(numpy_helper.from_array(np.array([64, 96], np.int64), "flat"))
    inits.append(_stored("w", _bf16_values((96, 240), 2, 0.1), bf16, nodes))
    inits.append(_stored("v", _bf16_values((240, 120), 3, 0.1), bf16, nodes))
    inits.append(_stored("u", _bf16_values((120, 64), 5, 0.1), bf16, nodes))
    nodes += [helper.make_node("MatMul", ["f", "w"], ["m"]), helper.make_node("MatMul", ["m", "v"], ["n"]),
              helper.make_node("MatMul", ["n", "u"], ["y"])]
    return builders.model(nodes, [builders.vi("x", shape=[1, 64, 8, 12])], [builders.vi("y", shape=[64, 64])],
                          inits, opset=21)


def test_int4_forms_look_behind_the_casts(tmp_path):
    plans = _plans(tmp_path, _conv_and_matmul, min_elements=1024, dtype="int4")
    f32, bf16 = plans[False], plans[True]
    assert [f32[n].dtype for n in "kwvu"] == ["int8", "int4", "int4", "int8"]  # the rule's
    assert f32["v"].block_size == 16
    for name in f32:
        assert [getattr(f32[name], k) for k in FORM] == [getattr(bf16[name], k) for k in FORM], name
        assert f32[name].why == bf16[name].why, name


def _with_bias(bf16: bool):
    """_conv_and_matmul and a 2048-element vector added to a second input (the int4 rule: float16)."""
    m = _conv_and_matmul(bf16)
    nodes = []
    bias = _stored("b", _bf16_values((2048,), 4), bf16, nodes)
    m.graph.node.extend(nodes + [helper.make_node("Add", ["x2", "b"], ["y2"])])
    m.graph.initializer.append(bias)
    m.graph.input.append(builders.vi("x2", shape=[1, 2048]))
    m.graph.output.append(builders.vi("y2", shape=[1, 2048]))
    return m


def test_int4_bias_is_left_in_its_16_bits(tmp_path):
    """The int4 rule's float16 for a vector: a 16-bit one is left as it is (its float32 twin's
    float16), a candidate still, not refused as if --fp16 had been asked for it."""
    plans = _plans(tmp_path, _with_bias, min_elements=1024, dtype="int4")
    f32, bf16 = plans[False], plans[True]
    assert (f32["b"].dtype, f32["b"].lowering) == ("float16", "cast")
    assert (bf16["b"].dtype, bf16["b"].lowering) == ("float", None)
    assert bf16["b"].why == f"left in its 16 bits, where a float32 weight gets float16 ({f32['b'].why})"


def _normed_matmul(bf16: bool):
    """x * gamma + beta (a decomposed LayerNorm's scale and shift), then a 256x128 MatMul: its
    4-bit clipping search is weighted by gamma^2 + beta^2 (symmetry.normalized_input_energy)."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Mul", ["x", "gamma"], ["g"]), helper.make_node("Add", ["g", "beta"], ["n"]),
             helper.make_node("MatMul", ["n", "w"], ["y"])]
    inits = [numpy_helper.from_array(rng.uniform(0.1, 3.0, 256).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.uniform(-1.0, 1.0, 256).astype(np.float32), "beta")]
    inits.append(_stored("w", _bf16_values((256, 128), 8, 0.05), bf16, nodes))
    return builders.model(nodes, [builders.vi("x", shape=[4, 256])], [builders.vi("y", shape=[4, 128])], inits,
                          opset=21)


def test_int4_clipping_is_weighted_behind_the_casts(tmp_path):
    """The written 4-bit weight is the float32 twin's: the clipping search weighs its blocks by the
    layer's input behind the Cast too (before: unweighted, other scales; tumor_vgg16's bf16 dense
    layers, int4 relative L2 0.471 against its float32 twin's 0.394)."""
    import onnxruntime as ort

    outs = {}
    for bf16 in (False, True):
        src, dest = tmp_path / f"n{bf16}.onnx", tmp_path / f"q{bf16}.onnx"
        onnx.save(_normed_matmul(bf16), str(src))
        onnxsurgery.quant_file(src, dest, min_elements=1024, dtype="int4")
        x = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
        outs[bf16] = ort.InferenceSession(str(dest), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(outs[True], outs[False])
