"""What every lowering offers the rest of `quant` (one module per lowering, each ending in a
`LOWERING = Lowering(...)`): whether it can take a weight, the opset it needs, the bytes it
stores, the float copies onnxruntime holds while it loads it, and the nodes it builds. Planning
(choices) and applying ask these questions of the registry instead of testing the lowering's
name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator
from ..options import Scheme
from ..rounding import Quantized

# fits(site, scheme, dtype, opset) -> None when it can take the weight, else why not
Fits = Callable[[ConstantSite, Scheme, str, int], "str | None"]
# build(site, quantized, names, opset) -> the tensor replacing the weight, or None when the
# lowering rewrote the weight's readers instead
Build = Callable[[ConstantSite, Quantized, NameAllocator, int], "gs.Tensor | None"]


def always(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> None:
    return None


def any_opset(dtype: str, granularity: str) -> int:
    return 1


@dataclass(frozen=True)
class Lowering:
    name: str
    summary: str  # one line for the docs and the plan's `why`
    fits: Fits
    build: Build
    min_opset: Callable[[str, str], int] = any_opset  # (dtype, granularity) -> opset
    float_scales: bool = True  # scales stored in float32; else float16 where every scale fits
    packed_zero_points: bool = False  # 4-bit zero points two per byte (else one per byte)
    float_zero_points: bool = False  # zero points stored as float32 (applied after the reader)
    # weight-sized float copies onnxruntime holds while it loads the weight (0: the integers stay)
    float_copies: Callable[[str, bool], int] = lambda granularity, zero_points: 0
    equalized: bool = False  # input-side scales stored too (a float32 per input channel)

    def stored_bytes(self, elements: int, groups: int, dtype: str, zero_points: bool, input_channels: int = 0,
                     scale_bytes: int | None = None) -> int:
        """Payload bytes: integers (4-bit packed two per byte), scales (`scale_bytes` each where
        measured, else as the lowering stores them), zero points, input scales."""
        four_bit = dtype in ("int4", "uint4")
        q_bytes = (elements + 1) // 2 if four_bit else elements
        zp_bytes = 0
        if zero_points:
            zp_bytes = 4 * groups if self.float_zero_points else \
                (groups + 1) // 2 if four_bit and self.packed_zero_points else groups
        scale_bytes = scale_bytes or (4 if self.float_scales else 2)
        return q_bytes + groups * scale_bytes + zp_bytes + 4 * input_channels
