"""What each weight is multiplied by, from calibration samples: the second moments
H = sum of x x^T of its consumer's inputs, for GPTQ rounding (gptq.py).

The original model runs in onnxruntime with each consumer's data input added as a graph
output. Supported consumers, in the main graph: MatMul (2-D weight as B), Gemm (B, without
transA) and Conv with one group (the input unfolded into kernel-sized patches). A weight with
any other reader, or inside a subgraph, is rounded without calibration.

Every supported weight is calibrated, however few input rows it saw (a squeeze-excite Conv
after global pooling sees one per sample). Leaving those with fewer rows than input columns to
ordinary rounding was tried: it helped PP-OCR cls (int4 output error 0.62 -> 0.19) but undid
most of the gain elsewhere (PP-OCRv4 rec int8 0.029 -> 0.16, the encoder's int4 0.052 -> 0.22,
16 samples), so it is not done.

H is [K, K] float64 for K input columns (a Conv's C x kernel), in the column order of
`gptq.matrix_order`. Weights are captured in chunks whose H fit in `memory_budget` bytes, so
a large model runs the samples more than once rather than holding every H at the same time.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from .errors import InputError
from .graph_utils import ConstantSite, consumers

DEFAULT_MEMORY_BUDGET = 1 << 30
_PATCH_BYTES = 64 << 20  # unfolded Conv inputs are processed in slices of about this size


@dataclass(frozen=True)
class Reader:
    """One consumer reading a weight: its data input and how it multiplies the weight."""

    activation: str
    op: str  # MatMul | Gemm | Conv
    attrs: dict


def readers(site: ConstantSite) -> list[Reader] | None:
    """How each consumer multiplies `site`, or None when one of them is not supported."""
    if site.scope.parent is not None or not site.value.outputs:
        return None
    rank = len(site.shape)
    found = []
    for node, idx in consumers(site):
        data = node.inputs[0]
        ok = idx == 1 and data is not site.value and not hasattr(data, "values") and (
            (node.op == "MatMul" and rank == 2)
            or (node.op == "Gemm" and rank == 2 and not node.attrs.get("transA", 0))
            or (node.op == "Conv" and rank >= 3 and node.attrs.get("group", 1) == 1
                and node.attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")))
        if not ok:
            return None
        found.append(Reader(data.name, node.op, dict(node.attrs)))
    if len({_channel_axis(r, site.shape) for r in found}) > 1:  # readers disagree on the layout
        return None
    return found


def input_columns(x: np.ndarray, reader: Reader, weight_shape: tuple[int, ...]):
    """The rows the weight's input columns meet, as [rows, K] float32 slices (a generator)."""
    x = np.asarray(x, np.float32)
    if reader.op != "Conv":
        k = weight_shape[1] if reader.op == "Gemm" and reader.attrs.get("transB", 0) else weight_shape[0]
        yield x.reshape(-1, k)
        return
    kernel = weight_shape[2:]
    r = len(kernel)
    pads = [0] * 2 * r  # VALID
    if reader.attrs.get("auto_pad", "NOTSET") == "NOTSET":
        pads = list(reader.attrs.get("pads", pads))
    strides = list(reader.attrs.get("strides", [1] * r))
    dilations = list(reader.attrs.get("dilations", [1] * r))
    x = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + r]) for i in range(r)])
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    win = np.lib.stride_tricks.sliding_window_view(x, span, axis=tuple(range(2, 2 + r)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
              + tuple(slice(None, None, d) for d in dilations)]  # [N, C, *out, *kernel]
    order = [0] + list(range(2, 2 + 2 * r)) + [1]  # [N, *out, *kernel, C]: gptq's column order
    patches = win.transpose(order)
    width = math.prod(kernel) * x.shape[1]
    per_row = max(1, math.prod(patches.shape[2:1 + r]) * width * 4)  # bytes per step of the first out axis
    step = max(1, _PATCH_BYTES // per_row)
    for n in range(patches.shape[0]):
        for o in range(0, patches.shape[1], step):
            yield patches[n, o:o + step].reshape(-1, width)


class Calibration:
    """Second moments of weight inputs from `samples` (dicts of input arrays) run through the
    model at `model_path`; inputs a sample lacks are generated as in verification."""

    def __init__(self, model_path: str | os.PathLike, samples: list[dict[str, np.ndarray]], *,
                 shapes: dict[str, list[int]] | None = None, memory_budget: int = DEFAULT_MEMORY_BUDGET):
        if not samples:
            raise InputError("calibration needs at least one sample")
        self.model_path = model_path
        self.samples = samples
        self.shapes = shapes
        self.memory_budget = memory_budget
        self._planned: list[tuple[str, tuple[int, ...], list[Reader]]] = []
        self._cache: dict[str, np.ndarray] = {}
        self.skipped: dict[str, str] = {}  # weight -> why it was not calibrated
        self._session = None

    def plan(self, sites: list[ConstantSite]) -> None:
        """The weights to be asked for, in the order they will be asked for."""
        self._planned = []
        for site in sites:
            found = readers(site)
            if found:
                self._planned.append((site.name, tuple(site.shape), found))
            else:
                self.skipped[site.name] = "a reader calibration does not support (in a subgraph, grouped Conv, ...)"

    def hessian(self, site: ConstantSite) -> np.ndarray | None:
        """H for a planned weight (capturing its chunk if needed), else None."""
        index = next((i for i, p in enumerate(self._planned) if p[0] == site.name), None)
        if index is None:
            return None
        if site.name not in self._cache:
            self._capture(index)
        return self._cache[site.name]

    def _capture(self, start: int) -> None:
        chunk, total = [], 0
        for name, shape, rdrs in self._planned[start:]:
            k = math.prod(shape) // shape[_channel_axis(rdrs[0], shape)]
            if chunk and total + 8 * k * k > self.memory_budget:
                break
            chunk.append((name, shape, rdrs, k))
            total += 8 * k * k
        self._cache = {name: np.zeros((k, k)) for name, _, _, k in chunk}
        sess, given = self._probe()
        wanted = sorted({r.activation for _, _, rdrs, _ in chunk for r in rdrs} - given)
        for feeds in self._feeds(sess):
            try:
                values = dict(zip(wanted, sess.run(wanted, feeds))) if wanted else {}
            except Exception as e:  # onnxruntime's own exception types: a sample that does not fit
                raise InputError(f"onnxruntime failed on a calibration sample: {str(e).splitlines()[0]}") from e
            values.update({k: v for k, v in feeds.items() if k in given})
            for name, shape, rdrs, _ in chunk:
                h = self._cache[name]
                for r in rdrs:
                    for cols in input_columns(values[r.activation], r, shape):
                        h += (cols.T @ cols).astype(np.float64)

    def _probe(self):
        """A session of the original model with every planned activation as an output."""
        from .verify import session

        if self._session is None:
            model = onnx.load(str(self.model_path))
            inputs = {i.name for i in model.graph.input}
            outputs = {o.name for o in model.graph.output}
            for act in sorted({r.activation for _, _, rdrs in self._planned for r in rdrs} - inputs - outputs):
                model.graph.output.append(helper.make_empty_tensor_value_info(act))
            self._session = (session(model), inputs)
        return self._session

    def _feeds(self, sess):
        from .verify import make_inputs

        generated = None
        for sample in self.samples:
            missing = [i.name for i in sess.get_inputs() if i.name not in sample]
            if missing and generated is None:
                generated = make_inputs(sess, shapes=self.shapes)
            yield {**{k: generated[k] for k in missing}, **sample}


def _channel_axis(reader: Reader, shape: tuple[int, ...]) -> int:
    """The weight axis along the consumer's outputs (gptq's rows); the rest are input columns."""
    if reader.op == "Gemm" and reader.attrs.get("transB", 0):
        return 0
    return 1 if reader.op in ("MatMul", "Gemm") else 0
