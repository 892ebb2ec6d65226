"""The `dq_transposed` lowering: a Gemm's B read with transB=1 ([N, K]: classifier heads, torch's
Linear), in blocks along K, stored transposed as [K, N] with blocks along axis 0, and its Gemms
set to transB=0. onnxruntime 1.32 fuses DequantizeLinear into a Gemm only without transB: the
weight then runs as MatMulNBits, its integers in memory (ddddocr's 8210x1024 classifier in int8
blocks: 0.71x the float model's memory and 0.87x its latency; behind the transB Gemm the
DequantizeLinear ran at every inference). The fused kernel packs its own copy of the integers,
so `--keep-quantized`, which puts memory first, keeps plain `dq` (ddddocr: 0.31x memory at 2.0x
latency, against 0.44x at 1.6x).

Before: W [N, K] (float) -> Gemm(transB=1)
After:  Wq [K, N], scale[, zero_point] -> DequantizeLinear(axis=0, block_size) -> Gemm(transB=0)"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, NameAllocator, consumers
from ..options import Scheme, dq_opset
from ..rounding import Quantized
from .base import Lowering
from .dq import emit_dq


def fits(site: ConstantSite, scheme: Scheme, dtype: str, opset: int) -> str | None:
    readers = consumers(site)
    if len(site.shape) != 2 or scheme.granularity != "block":
        return "needs a 2-D weight in blocks"
    if not readers or not all(n.op == "Gemm" and i == 1 and n.attrs.get("transB", 0) for n, i in readers):
        return "needs a weight read only as B of Gemms with transB=1"
    if any(o is site.value for o in site.scope.graph.outputs):
        return "the weight is also a graph output"
    return None


def transposed(qt: Quantized) -> Quantized:
    """`qt` (2-D) the other way round: integers, scales and zero points transposed."""
    t = lambda a: None if a is None else np.ascontiguousarray(a.T)  # noqa: E731
    return dataclasses.replace(qt, q=t(qt.q), scale=t(qt.scale), zero_point=t(qt.zero_point), axis=1 - qt.axis)


def build(site: ConstantSite, qt: Quantized, names: NameAllocator, opset: int) -> gs.Tensor | None:
    for node, _ in consumers(site):
        node.attrs["transB"] = 0
    return emit_dq(site, transposed(qt), names, list(site.shape)[::-1])


LOWERING = Lowering("dq_transposed", "DequantizeLinear over the weight stored [K, N], its Gemms without transB "
                    "(fused by onnxruntime into MatMulNBits)", fits, build,
                    min_opset=lambda dtype, granularity: dq_opset(dtype, "block"), packed_zero_points=True)
