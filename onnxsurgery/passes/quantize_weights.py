"""Weight-only quantization: large float constants become small integers plus scales, turned
back into float in the graph, so every consumer sees a tensor of the original dtype and shape.

Before: W (float32/float16/bfloat16/float64, at least `min_elements` elements) -> consumers.
After, with the `dq` lowering:    Wq, scale[, zero_point] -> DequantizeLinear [-> Cast] -> consumers
         with the `arith` lowering: Wq -> Cast -> [Sub zp] -> Mul scale [-> Reshape] [-> Cast] -> consumers
4-bit values under `arith` are stored two per uint8 and unpacked with BitShift/Concat/Reshape
(opset 11 on; Cast/Div/Mul/Sub in int32 before), so int4 works on models below opset 21.
onnxruntime constant-folds the `arith` chain when the session starts (no run-time cost, float
weights in memory); it keeps DequantizeLinear, so `dq` runs at every inference except where it
fuses DQ -> MatMul into MatMulNBits. Measured with onnxruntime 1.31 on six 1024x1024 MatMuls
(opset 21), latency relative to float32: int4 blocks as dq 0.26x at 1 token, 1.03x at 128;
int8 blocks as dq 0.30x and 1.47x; arith about 1.0x at both. `auto` therefore picks `dq` only
for a blockwise 4-bit weight read by a single MatMul at opset >= 21, and `arith` elsewhere,
except for an embedding table read only by Gather along axis 0 (8-bit; 4-bit from opset 11,
packed row by row): there `auto` picks `gather`, which gathers the integer rows (and their
scales and zero points) first and dequantizes only those, at run time. The table then stays
8- or 4-bit in the session instead of being folded into a float copy (BERT's 30522x512 table:
15.6 MB at int8 instead of 62.5 MB, plus the four float intermediates folding holds at load),
and the values are bit-identical: the same (q - zp) * scale per element.

Axis: follows the consumer. MatMul B [K, N]: channels along N, blocks along K (the reduction
axis); Gemm B likewise, honouring transB; Conv W [M, C, ...]: channels along M, blocks along C;
ConvTranspose W [C, M, ...]: channels along M; Gather data: one scale per row. Otherwise axis 0
for channels and the last axis for blocks.

Rounding: `balanced` (each group's rounding errors sum to zero, quant/rounding.py) for weights read
only by Conv/ConvTranspose under `auto`, round-to-nearest elsewhere. Measured over four
rounding draws (scales jittered by up to 2%): PP-OCRv4 rec's median output error 0.066 -> 0.038
and argmax agreement 98.1% -> 98.8%, because conv inputs are non-negative activations that turn
a block's error sum into an output shift; det and the encoder sample unchanged; BERT's MatMuls,
which read LayerNorm outputs, 7% worse, hence Conv only.

Default: int8, asymmetric, blocks of 32, chosen by measurement (docs/quantization.md). Blocks
must tile their axis: a nearby divisor is used when the block size does not divide it, else one
scale per channel (`choose_scheme`). Graph outputs and overridable inputs stay float.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..errors import UnsupportedModelError
from ..graph_utils import (
    ConstantSite,
    NameAllocator,
    choose_axes,
    collect_constants,
    iter_scopes,
    overridable_initializers,
    read_values,
    readers_by_graph,
    replace_uses,
    set_values,
)
from ..progress import progress
from ..quant.calibration import Calibration, calibrated_rounding
from ..quant.estimates import estimated_bytes, stored_bytes
from ..quant.lean_choice import choose_lean
from ..quant.lowerings import build
from ..quant.nodes import Emitter, const
from ..quant.options import FLOAT_TYPES, QuantOptions, Scheme, dq_min_opset
from ..quant.rounding import snap_to_levels, weight_error
from ..quant.scaled import zero_points_fit
from ..quant.symmetry_choice import SymmetryChoice, choose_symmetric
from ..quant.schemes import (balanced_rounding, choose_scheme, float16_for_tensorrt, lean_scheme, lowering_for,
                             matches, quantize_site, refusal, scheme_args, site_options, value_refusal)
from ..report import PassReport
from .base import Estimate

log = logging.getLogger("onnxsurgery")
MAX_ERRORS_REPORTED = 10


def quantize_weights(graph: gs.Graph, *, options: QuantOptions, opset: int,
                     keep: frozenset[str] | None = None, calibration: Calibration | None = None,
                     activations: Calibration | None = None) -> PassReport:
    """Quantize float weights in place (all scopes). With `calibration`, the integer roundings
    of the weights whose consumers it supports use GPTQ (gptq.py) instead of `rounding`. With
    `activations` (the inputs each weight's readers see, e.g. from the verification inputs),
    auto's choice between the lean and the accurate lowering is measured in the layers' outputs.
    Raises UnsupportedModelError when the `dq` lowering is asked for at an opset that cannot
    express the scheme."""
    keep = overridable_initializers(graph) if keep is None else keep
    # Weights with huge (finite) values overflow float32 sums in the error figures; numpy's
    # warnings about it must not reach the user's terminal (NaN/Inf weights are skipped below)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _quantize_weights(graph, options, opset, keep, calibration, activations)


@dataclass(frozen=True, eq=False)
class QuantizeWeights:
    """`quantize_weights` as a pipeline step (passes/base.py). `opset` None: the graph's."""

    options: QuantOptions
    opset: int | None = None
    calibration: Calibration | None = None
    activations: Calibration | None = None
    name = "quantize"
    needs_cleanup = True  # constants merged away and Identity nodes bypassed must not count

    def estimate(self, graph: gs.Graph, *, keep: frozenset[str], removed: frozenset[int] = frozenset()) -> Estimate:
        """From shapes alone (quant.estimates.estimated_bytes): the weights the pass would take,
        minus the bytes each would store. Weights the pass skips for their values (NaN or Inf;
        beyond float16's range where TensorRT needs float16) are counted; auto's
        lean-or-accurate choice is assumed lean."""
        opset = self.opset or graph.opset
        scopes = list(iter_scopes(graph))
        saved = 0
        for site in collect_constants(graph, scopes):
            if site.onnx_dtype in FLOAT_TYPES and id(site.tensor) not in removed \
                    and refusal(site, scopes, site_options(site, self.options), keep) is None:
                saved += site.nbytes - estimated_bytes(site, self.options, opset)
        return Estimate(self.name, saved)

    def apply(self, graph: gs.Graph, *, keep: frozenset[str]) -> PassReport:
        return quantize_weights(graph, options=self.options, opset=self.opset or graph.opset, keep=keep,
                                calibration=self.calibration, activations=self.activations)


def _quantize_weights(graph: gs.Graph, options: QuantOptions, opset: int, keep: frozenset[str],
                      calibration: Calibration | None, activations: Calibration | None) -> PassReport:
    report = PassReport("quantize")
    if options.lowering == "dq" and opset < dq_min_opset(options):
        raise UnsupportedModelError(
            f"--lowering dq with {options.dtype}/{options.granularity} needs opset "
            f"{dq_min_opset(options)}; this model is opset {opset}. "
            "Upgrade it first (the quant API and CLI do) or use --lowering arith."
        )
    scopes = list(iter_scopes(graph))
    names = NameAllocator(graph)
    errors, schemes, fallbacks, balanced, calibrated = [], {}, [], [], []
    lean, accurate = [], []  # auto's measured choice between `scaled` and `arith`
    not_calibrated = {}  # weight -> why it kept ordinary rounding
    float16_instead = {}  # target tensorrt: weight -> why it has no quantized form there
    todo = []
    four_bit = options.as_four_bit() if options.int4_for else None
    for site in collect_constants(graph, scopes):
        if site.onnx_dtype not in FLOAT_TYPES:
            continue
        opts = site_options(site, options, four_bit)  # 4-bit for the weights allocated 4 bits
        no_quantized_form = float16_for_tensorrt(site, opts)
        reason = refusal(site, scopes, opts, keep) or value_refusal(site, float16_because=no_quantized_form)
        if reason:
            if reason != "small":
                report.skip(site.name, reason)
            continue
        scheme = choose_scheme(site, opts)
        lowering = lowering_for(site, opts, scheme, opset)
        as_fp16 = site.onnx_dtype == onnx.TensorProto.FLOAT and matches(site, options.fp16_for)
        if no_quantized_form:
            float16_instead[site.name] = no_quantized_form
            as_fp16 = True
        todo.append((site, scheme, lowering, as_fp16, opts))
    lean_choice = choose_lean([(site, scheme) for site, scheme, lowering, *_ in todo if lowering == "lean"],
                              options, opset, total_bytes=sum(site.nbytes for site, *_ in todo),
                              activations=activations)
    todo = [(site, scheme, lowering, as_fp16 or site.name in lean_choice.half, opts)
            for site, scheme, lowering, as_fp16, opts in todo]
    stays_float = bool(options.fp16 or options.levels)
    symmetry = choose_symmetric([(site, scheme, lowering, opts) for site, scheme, lowering, as_fp16, opts in todo
                                 if lowering not in ("lean", "scaled") and not as_fp16],
                                activations) if options.auto_symmetric else SymmetryChoice()
    if calibration is not None and not stays_float:
        calibration.plan([site for site, _, _, as_fp16, _ in todo if not as_fp16])
        not_calibrated.update(calibration.skipped)
    for site, scheme, lowering, as_fp16, opts in progress(todo, "quantize", unit="weight"):
        as_float = stays_float or as_fp16
        if scheme.granularity != opts.granularity and lowering != "lean":
            fallbacks.append(site.name)
        values = read_values(site.tensor).astype(np.float32, copy=False)
        before = site.nbytes
        moments = calibration.moments(site) if calibration is not None and not as_float else None
        symmetric = site.name in symmetry.symmetric if options.auto_symmetric else opts.symmetric
        if as_float:
            err, after = _store_as_float(site, values, options, scheme, names, as_fp16)
        else:
            balance = balanced_rounding(site, options) and scheme.granularity != "tensor"
            if lowering == "lean" and site.name in lean_choice.accurate:
                lowering = "arith"
                accurate.append(site.name)
            elif lowering in ("lean", "scaled"):  # --lowering scaled: lean for every weight
                scheme, lowering = lean_scheme(site, opset)
                # zero points where measured more accurate, or where asked for (--asymmetric)
                if options.auto_symmetric:
                    symmetric = site.name not in lean_choice.asymmetric
                else:
                    symmetric = opts.symmetric or not (lowering == "scaled" and zero_points_fit(site))
                lean.append(site.name)
            common = scheme_args(opts, scheme, lowering, symmetric, symmetry.importance.get(site.name))
            qt = quantize_site(values, site, scheme, lowering, balance, common, equalized=moments is None)
            if moments is not None:
                channel_axis, block_axis = choose_axes(site)
                gptq_args = {k: v for k, v in common.items()
                             if k not in ("search_clip", "importance")}  # GPTQ sets its own ranges
                qt, refused = calibrated_rounding(values, moments, qt, channel_axis=channel_axis,
                                                  block_axis=block_axis, **gptq_args)
                if refused:
                    not_calibrated[site.name] = refused
                else:
                    calibrated.append(site.name)
                    balance = False
            if balance:
                balanced.append(site.name)
            err = weight_error(values, qt)
            rebuilt = build(site, qt, lowering, names, opset)
            if rebuilt is not None:
                replace_uses(site.value, rebuilt)
            after = stored_bytes(qt, lowering)
        report.changed += 1
        report.bytes_saved += before - after
        label = "fp16/cast" if as_fp16 else opts.label(scheme, lowering, symmetric)
        schemes[label] = schemes.get(label, 0) + 1
        errors.append({"name": site.name, "shape": list(site.shape), "scheme": label, **err})
        log.info("quantize: %s %s as %s, weight error %.3g", site.name, list(site.shape), label, err["rel_l2_error"])
    errors.sort(key=lambda e: -e["rel_l2_error"])
    report.details = {"schemes": schemes, "quantized": [e["name"] for e in errors],
                      "largest_errors": errors[:MAX_ERRORS_REPORTED],
                      # blocks asked for, but no block size near it divides the blocked axis
                      "per_channel_instead_of_blocks": fallbacks,
                      "balanced_rounding": balanced,
                      # auto: lean (`scaled`: one float copy at load) or the accurate chain
                      # where it gained most within the memory budget (choose_lean)
                      "lean_lowering": lean, "accurate_lowering": accurate,
                      # --symmetric left to quant: the weights measured more accurate symmetric
                      "symmetric_chosen": sorted(symmetry.symmetric),
                      # lean weights measured more accurate with zero points (lean_choice.py)
                      "lean_asymmetric": sorted(lean_choice.asymmetric),
                      "calibrated": calibrated,  # GPTQ rounding from calibration inputs
                      "not_calibrated": not_calibrated,  # weight -> why
                      "float16_for_tensorrt": float16_instead,
                      # auto: float32 weights too small to be worth int8 (lean_choice.small_weight)
                      "float16_small": sorted(lean_choice.half),
                      "max_weight_rel_l2_error": errors[0]["rel_l2_error"] if errors else 0.0}
    return report


def _store_as_float(site: ConstantSite, values: np.ndarray, options: QuantOptions, scheme: Scheme,
                    names: NameAllocator, as_fp16: bool = False) -> tuple[dict, int]:
    """--fp16 (or a weight in `fp16_for`): float16 storage + Cast back; --levels: values
    snapped in place. Returns the weight error and the bytes now stored."""
    if options.fp16 or as_fp16:
        half = values.astype(np.float16)
        stored = const(names, f"{site.name}_fp16", half)
        # One Cast in each graph that reads the weight, not one in the scope feeding a
        # subgraph: onnxruntime's FuseInitializersTransformer (1.31, constant folding off)
        # fails to load a model whose float16-initializer Cast is read only implicitly by an
        # If/Loop/Scan node (silero-vad's LSTM weights).
        for graph, readers in readers_by_graph(site):
            out = Emitter(graph, names, site.name)("Cast", [stored], shape=list(site.shape),
                                                    to=onnx.TensorProto.FLOAT)
            for node, index in readers:
                node.inputs[index] = out
        return _error(values, half.astype(np.float32)), half.nbytes
    snapped = snap_to_levels(values, options.levels, granularity=scheme.granularity, axis=scheme.axis,
                             block_size=scheme.block_size)
    stored = snapped.astype(values.dtype if site.onnx_dtype == onnx.TensorProto.FLOAT else FLOAT_TYPES[site.onnx_dtype])
    if site.node is None:
        set_values(site.tensor, stored)
    else:
        site.node.attrs["value"] = gs.Constant(site.tensor.name, stored)
    return _error(values, stored.astype(np.float32)), site.nbytes



def _error(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    diff = y.astype(np.float64) - x
    norm = float(np.linalg.norm(x))
    return {"max_abs_error": float(np.abs(diff).max()) if diff.size else 0.0,
            "rel_l2_error": float(np.linalg.norm(diff) / norm) if norm > 0 else 0.0}

