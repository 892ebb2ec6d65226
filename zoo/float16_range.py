"""Whether a model's float16 form computes what it computes (the zoo's `fp16` variant, variants.py):
onnxconverter-common clamps float32 values past its limit (1e4) and float16 holds none past 65504,
so a model whose weights reach past float16's range gets, converted, a float16 original that is
another function, and judging a quantization of it against that original says nothing."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504


def out_of_float16(m: onnx.ModelProto) -> str | None:
    """Why a float16 form of `m` would compute another function: a float32 weight of more than one
    element (a scalar is a fill value, -1e9 or float32's largest for a mask, whose role the clamp
    keeps) holding finite values past float16's largest, which the converter clamps (to 1e4).
    ppocr_v4_seal_det's first BatchNorm variances reach 5.8e7, crepe_full's conv2_BN 4.97e5: their
    float16 originals are 1.062 and 0.333 (relative L2, report set) from the float32 ones."""
    worst = None
    for name, t in _float_tensors(m):
        if int(np.prod(t.dims)) < 2:
            continue
        v = numpy_helper.to_array(t)
        finite = np.abs(v[np.isfinite(v)])
        top = float(finite.max(initial=0.0))
        if top > FLOAT16_MAX and (worst is None or top > worst[1]):
            worst = (name, top)
    if worst is None:
        return None
    return (f"weights leave float16's range ({worst[0]} up to {worst[1]:.3g}, float16's largest {FLOAT16_MAX:.0f}): "
            "the converter clamps them, so its float16 original computes another function")


def _float_tensors(m: onnx.ModelProto):
    """(name, tensor) of every float32 initializer and Constant node of the main graph."""
    for t in m.graph.initializer:
        if t.data_type == TensorProto.FLOAT:
            yield t.name, t
    for n in m.graph.node:
        for a in n.attribute:
            if n.op_type == "Constant" and a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                yield n.output[0], a.t
