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

Rounding: `balanced` (each group's rounding errors sum to zero, quant_math) for weights read
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

import fnmatch
import logging
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from ..calibration import Calibration, calibrated_rounding
from ..errors import InputError, UnsupportedModelError
from ..gptq import output_error
from ..graph_utils import (
    overridable_initializers,
    ConstantSite,
    c_order,
    choose_axes,
    NameAllocator,
    collect_constants,
    consumers,
    graph_outputs_holding,
    iter_scopes,
    read_values,
    readers_by_graph,
    replace_uses,
    set_values,
)
from ..progress import progress
from ..quant_math import Quantized, has_zero_point, pack_halves, pack_nibbles, quantize, snap_to_levels, weight_error
from ..report import PassReport
from .matmul_nbits import build_matmul_nbits
from .scale_after import build_scaled, equalize, equalized_axis, scale_axis

FLOAT_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.BFLOAT16: None,  # read through onnx; computed in float32
}
log = logging.getLogger("onnxsurgery")
DEFAULT_MIN_ELEMENTS = 4096
# Blocks of 32 for every dtype, chosen by measurement (docs/quantization.md): blocks of 64
# lose half of the gain over per-tensor on weights with even channel ranges.
DEFAULT_BLOCK_SIZE = 32
MAX_ERRORS_REPORTED = 10
_ONNX_INT = {"int8": onnx.TensorProto.INT8, "uint8": onnx.TensorProto.UINT8,
             "int4": onnx.TensorProto.INT4, "uint4": onnx.TensorProto.UINT4}


LOWERINGS = ("auto", "arith", "dq", "gather", "scaled", "matmulnbits")
TARGETS = ("any", "onnxruntime")
# `auto` (int8) lowers every weight lean (one scale per output channel, input rows equalized:
# scale_after.py) and spends a memory budget on the accurate block chain for the weights that
# lose most by it: those whose lean error, measured in the layer's output on the verification
# inputs, is more than MIN_ACCURATE_RATIO times the block scheme's, most lossy first, while the
# float copies the chain holds at load beyond the lean one fit in ACCURATE_MEMORY_SHARE of the
# float bytes of all the weights quantized. Measured on the bench's four models: a share of
# 0.35 took ALBERT-base to 1.06x the float original's memory, 0.2 keeps it at 0.99x.
MIN_ACCURATE_RATIO = 2.0
ACCURATE_MEMORY_SHARE = 0.2

# Recurrent ops multiply their weights by an internal state, so no scale can follow them, and
# Cast -> Mul folds two float copies at load (ddddocr: 1.09x the float model's memory). Their
# weights' lean form is per-channel DequantizeLinear (opset 13), which onnxruntime keeps: the
# integers stay in memory (ddddocr: 0.85x) and are dequantized at every inference. The cost is
# latency, mostly because the op can no longer pack its weights once at load (ddddocr: 1.15-1.24x;
# `--exclude LSTM` keeps them float instead).
RECURRENT_OPS = ("LSTM", "GRU", "RNN")
RECURRENT_DQ_OPSET = 13


@dataclass
class QuantOptions:
    dtype: str = "int8"
    granularity: str | None = None  # None: chosen per weight (see `auto_scheme`)
    block_size: int = DEFAULT_BLOCK_SIZE
    symmetric: bool | None = None  # None: asymmetric, or symmetric where the lowering needs it
    lowering: str = "auto"
    min_elements: int = DEFAULT_MIN_ELEMENTS
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    fp16: bool = False  # store float32 weights as float16 + Cast instead of integers
    levels: int | None = None  # snap weights to N values per group, keeping float storage
    fp16_for: tuple[str, ...] = ()  # patterns of weights stored as float16 instead of integers
    rounding: str = "auto"  # nearest | balanced | auto: balanced for convolution weights
    keep_quantized: bool = False  # DequantizeLinear kept in the graph: integers in memory at run time
    target: str = "any"  # any: standard ai.onnx ops only; onnxruntime: MatMulNBits where it fits

    def __post_init__(self):
        for name, value, choices in (("dtype", self.dtype, tuple(_ONNX_INT)), ("lowering", self.lowering, LOWERINGS),
                                     ("target", self.target, TARGETS),
                                     ("granularity", self.granularity, (None, "tensor", "channel", "block")),
                                     ("rounding", self.rounding, ("auto", "nearest", "balanced"))):
            if value not in choices:
                raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(map(str, choices))}")
        for name, value, low, high in (("block_size", self.block_size, 2, None), ("levels", self.levels, 2, 65536),
                                       ("min_elements", self.min_elements, 1, None)):
            if value is not None and not (isinstance(value, int) and value >= low and (high is None or value <= high)):
                raise ValueError(f"{name} must be an integer from {low}" + (f" to {high}" if high else "")
                                 + f"; got {value!r}")
        # The lean lowering picks its own scheme (per channel, symmetric): only when none was asked for.
        self.auto_scheme = self.granularity is None and self.symmetric is None and not (self.levels or self.fp16)
        if self.granularity is None:
            self.granularity = "channel" if self.levels else "block"
        if self.symmetric is None:
            self.symmetric = False

    @property
    def four_bit(self) -> bool:
        return self.dtype in ("int4", "uint4")

    @property
    def stays_quantized(self) -> bool:
        """Whether `auto` lowers with DequantizeLinear (kept by onnxruntime, so the integers stay
        in memory): asked for with keep_quantized, and always for 4-bit weights, whose unpacking
        chain would otherwise be folded into several byte- and float-sized copies at load."""
        return (self.keep_quantized or self.four_bit) and not (self.fp16 or self.levels)

    @property
    def lean_default(self) -> bool:
        """Whether `auto` chooses between the lean lowerings and the accurate chain per weight
        (int8, no scheme asked for, not kept quantized)."""
        return self.lowering == "auto" and self.auto_scheme and self.dtype == "int8" and not self.stays_quantized

    def label(self, scheme: Scheme, lowering: str, symmetric: bool) -> str:
        if self.fp16:
            return "fp16/cast"
        if self.levels:
            return f"levels{self.levels}/{scheme.name}"
        sym = "sym" if symmetric else "asym"
        return f"{self.dtype}/{scheme.name}/{sym}/{lowering}"


@dataclass(frozen=True)
class Scheme:
    """How one weight is grouped: one scale per tensor, per channel along `axis`, or per block
    of `block_size` elements along `axis`."""

    granularity: str
    axis: int | None = None
    block_size: int | None = None

    @property
    def name(self) -> str:
        return f"block{self.block_size}" if self.granularity == "block" else self.granularity


def dq_min_opset(opts: QuantOptions) -> int:
    """The opset at which DequantizeLinear can express the scheme asked for."""
    if opts.four_bit or opts.granularity == "block":
        return 21
    return 13 if opts.granularity == "channel" else 10


def required_opset(opts: QuantOptions, graph: gs.Graph | None = None) -> int:
    """The opset the lowering asked for needs (the API upgrades a model below it): DequantizeLinear
    with blocks or 4-bit types needs 21; the default's lean form of recurrent weights (in `graph`)
    needs 13; every other lowering works from opset 7 (or 11)."""
    if opts.fp16 or opts.levels:
        return 1
    if opts.lowering == "dq" or (opts.lowering == "auto" and opts.stays_quantized):
        return dq_min_opset(opts)
    if graph is not None and opts.lean_default and any(
            recurrent_weight(site) for site in collect_constants(graph, list(iter_scopes(graph)))
            if site.num_elements >= opts.min_elements):
        return RECURRENT_DQ_OPSET
    return 1


def recurrent_weight(site: ConstantSite) -> bool:
    """A float32 weight read only as W or R of LSTM/GRU/RNN (lean form: DequantizeLinear)."""
    readers = consumers(site)
    return (site.onnx_dtype == onnx.TensorProto.FLOAT and bool(readers)
            and all(n.op in RECURRENT_OPS and i in (1, 2) for n, i in readers))


def choose_scheme(site: ConstantSite, options: QuantOptions) -> Scheme:
    """The grouping asked for, fitted to the weight. Blocks must tile the blocked axis: when the
    block size does not divide it, the largest divisor between half the block size and the
    block size is used instead (200 input channels: blocks of 25 for 32), and when there is
    none (depthwise and 3-channel convolutions, odd widths), one scale per channel."""
    channel_axis, block_axis = choose_axes(site)
    if options.granularity == "tensor":
        return Scheme("tensor")
    if options.granularity == "block":
        n = site.shape[block_axis]
        fitting = [b for b in range(options.block_size, (options.block_size - 1) // 2, -1) if n % b == 0]
        if fitting:
            return Scheme("block", block_axis, fitting[0])
    return Scheme("channel", channel_axis)


def balanced_rounding(site: ConstantSite, options: QuantOptions) -> bool:
    """Whether `site` gets balanced rounding (module docstring: convolution weights under auto)."""
    if options.rounding != "auto":
        return options.rounding == "balanced"
    readers = consumers(site)
    return bool(readers) and all(n.op in ("Conv", "ConvTranspose") and i == 1 for n, i in readers)


def _matches(site: ConstantSite, patterns: tuple[str, ...]) -> bool:
    ops = {n.op for n, _ in consumers(site)}
    return any(fnmatch.fnmatchcase(site.name, p) or any(fnmatch.fnmatchcase(op, p) for op in ops)
               for p in patterns)


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
    todo = []
    for site in collect_constants(graph, scopes):
        if site.onnx_dtype not in FLOAT_TYPES:
            continue
        reason = _refusal(site, scopes, options, keep) or _non_finite(site)
        if reason:
            if reason != "small":
                report.skip(site.name, reason)
            continue
        scheme = choose_scheme(site, options)
        lowering = _lowering(site, options, scheme, opset)
        as_fp16 = site.onnx_dtype == onnx.TensorProto.FLOAT and _matches(site, options.fp16_for)
        todo.append((site, scheme, lowering, as_fp16))
    accurate_ones = _choose_accurate([(site, scheme) for site, scheme, lowering, _ in todo if lowering == "lean"],
                                     options, opset, total_bytes=sum(site.nbytes for site, *_ in todo),
                                     activations=activations)
    stays_float = bool(options.fp16 or options.levels)
    if calibration is not None and not stays_float:
        calibration.plan([site for site, _, _, as_fp16 in todo if not as_fp16])
        not_calibrated.update(calibration.skipped)
    for site, scheme, lowering, as_fp16 in progress(todo, "quantize", unit="weight"):
        as_float = stays_float or as_fp16
        if scheme.granularity != options.granularity and lowering != "lean":
            fallbacks.append(site.name)
        values = read_values(site.tensor).astype(np.float32, copy=False)
        before = site.nbytes
        moments = calibration.moments(site) if calibration is not None and not as_float else None
        symmetric = options.symmetric
        if as_float:
            err, after = _store_as_float(site, values, options, scheme, names, as_fp16)
        else:
            balance = balanced_rounding(site, options) and scheme.granularity != "tensor"
            if lowering == "lean" and site.name in accurate_ones:
                lowering = "arith"
                accurate.append(site.name)
            elif lowering in ("lean", "scaled"):  # --lowering scaled: lean for every weight
                (scheme, lowering), symmetric = _lean_scheme(site, opset), True
                lean.append(site.name)
            common = _scheme_args(options, scheme, lowering, symmetric)
            qt = _quantize(values, site, scheme, lowering, balance, common, equalized=moments is None)
            if moments is not None:
                channel_axis, block_axis = choose_axes(site)
                qt, refused = calibrated_rounding(values, moments, qt, channel_axis=channel_axis,
                                                  block_axis=block_axis, **common)
                if refused:
                    not_calibrated[site.name] = refused
                else:
                    calibrated.append(site.name)
                    balance = False
            if balance:
                balanced.append(site.name)
            err = weight_error(values, qt)
            rebuilt = _build(site, qt, lowering, names, opset)
            if rebuilt is not None:
                replace_uses(site.value, rebuilt)
            after = _stored_bytes(qt, lowering)
        report.changed += 1
        report.bytes_saved += before - after
        label = "fp16/cast" if as_fp16 else options.label(scheme, lowering, symmetric)
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
                      # where it gained most within the memory budget (_choose_accurate)
                      "lean_lowering": lean, "accurate_lowering": accurate,
                      "calibrated": calibrated,  # GPTQ rounding from calibration inputs
                      "not_calibrated": not_calibrated,  # weight -> why
                      "max_weight_rel_l2_error": errors[0]["rel_l2_error"] if errors else 0.0}
    return report


def _store_as_float(site: ConstantSite, values: np.ndarray, options: QuantOptions, scheme: Scheme,
                    names: NameAllocator, as_fp16: bool = False) -> tuple[dict, int]:
    """--fp16 (or a weight in `fp16_for`): float16 storage + Cast back; --levels: values
    snapped in place. Returns the weight error and the bytes now stored."""
    if options.fp16 or as_fp16:
        half = values.astype(np.float16)
        stored = _const(names, f"{site.name}_fp16", half)
        # One Cast in each graph that reads the weight, not one in the scope feeding a
        # subgraph: onnxruntime's FuseInitializersTransformer (1.31, constant folding off)
        # fails to load a model whose float16-initializer Cast is read only implicitly by an
        # If/Loop/Scan node (silero-vad's LSTM weights).
        for graph, readers in readers_by_graph(site):
            out = _Emitter(graph, names, site.name)("Cast", [stored], shape=list(site.shape),
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


def _scheme_args(options: QuantOptions, scheme: Scheme, lowering: str, symmetric: bool | None = None) -> dict:
    """quantize()'s arguments for `scheme` under `lowering` (dq and MatMulNBits: scales of the
    output type; arith: float16 scales rounded up; scaled: float32 scales, applied at run time)."""
    return dict(dtype=options.dtype, granularity=scheme.granularity, block_size=scheme.block_size,
                symmetric=options.symmetric if symmetric is None else symmetric,
                half_scales=lowering not in ("dq", "matmulnbits", "scaled"))


def _quantize(values: np.ndarray, site: ConstantSite, scheme: Scheme, lowering: str, balanced: bool, args: dict,
              equalized: bool = True) -> Quantized:
    """quantize() for `scheme`; under `scaled`, of the weight equalized along its input axis
    first (scale_after.equalize), unless `equalized` is False (GPTQ rounds the weight as it is)."""
    if lowering != "scaled" or not equalized:
        return quantize(values, axis=scheme.axis, balanced=balanced, **args)
    values, r, input_axis = equalize(values, site)
    qt = quantize(values, axis=scheme.axis, balanced=balanced, **args)
    qt.input_scale, qt.input_axis = r, input_axis
    return qt


def _lean_scheme(site: ConstantSite, opset: int) -> tuple[Scheme, str]:
    """The lean form of an int8 weight: one scale per output channel (symmetric), lowered as
    `scaled` where every reader can take the scale after it, as DequantizeLinear for recurrent
    weights (RECURRENT_OPS above), else as `arith` Cast -> Mul."""
    axis = scale_axis(site)
    if axis is not None:
        return Scheme("channel", axis), "scaled"
    channel = Scheme("channel", choose_axes(site)[0])
    if recurrent_weight(site) and opset >= RECURRENT_DQ_OPSET:
        return channel, "dq"
    return channel, "arith"


def _choose_accurate(candidates: list[tuple[ConstantSite, Scheme]], options: QuantOptions, opset: int,
                     total_bytes: int, activations: Calibration | None = None) -> set[str]:
    """The lean candidates that get the accurate block chain instead (MIN_ACCURATE_RATIO and
    ACCURATE_MEMORY_SHARE above): each weight is quantized both ways to measure its errors, in
    the layer's output over `activations` where they cover the weight (what its readers
    multiply it by), else in the weight itself."""
    try:
        scored = _lean_costs(candidates, options, opset, activations)
    except InputError:  # the inputs could not be generated or run: measure in the weights
        scored = _lean_costs(candidates, options, opset, None)
    budget, chosen = ACCURATE_MEMORY_SHARE * total_bytes, set()
    for ratio, extra, name in sorted(scored, reverse=True):
        if ratio > MIN_ACCURATE_RATIO and extra <= budget:
            chosen.add(name)
            budget -= extra
    return chosen


def _lean_costs(candidates: list[tuple[ConstantSite, Scheme]], options: QuantOptions, opset: int,
                activations: Calibration | None) -> list[tuple[float, int, str]]:
    """(lean error / accurate error, extra bytes the accurate chain holds at load, name) per
    candidate. Measured in the weight, a weight error far from the readers' large inputs counts
    as much as one next to them; PP-OCRv4 rec's conv2d_170 (240x240) loses 1.6x in the weight
    and 6.6x in the layer output, and it is the one that costs the model's output most."""
    if activations is not None:
        activations.plan([site for site, _ in candidates])
    scored = []
    for site, scheme in progress(candidates, "measure lean vs accurate", unit="weight"):
        values = read_values(site.tensor).astype(np.float32, copy=False)
        balance = balanced_rounding(site, options) and scheme.granularity != "tensor"
        lean, lowering = _lean_scheme(site, opset)
        moments = activations.moments(site) if activations is not None else None
        lean_error, accurate_error = (
            _cost(values, _quantize(values, site, sch, low, balance, _scheme_args(options, sch, low, sym)),
                  site, moments)
            for sch, low, sym in ((lean, lowering, True), (scheme, "arith", None)))
        ratio = lean_error / accurate_error if accurate_error > 0 else 1.0
        # float copies held at load beyond the lean form's: blocks fold Cast, Sub, Mul and
        # Reshape (four); `scaled` folds one Cast, lean `arith` Cast and Mul (two), `dq` none
        extra = 4 * site.num_elements * {"scaled": 3, "arith": 2, "dq": 4}[lowering]
        scored.append((ratio, extra, site.name))
    return scored


def _cost(values: np.ndarray, qt: Quantized, site: ConstantSite, moments) -> float:
    """The L2 error in the layer's output over `moments`, or without them the weight's relative
    L2 error (only ever compared with the same weight's other cost)."""
    if moments is None:
        return weight_error(values, qt)["rel_l2_error"]
    channel_axis, block_axis = choose_axes(site)
    return output_error(values, qt, moments.total, channel_axis=channel_axis, block_axis=block_axis) ** 0.5


def _error(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    diff = y.astype(np.float64) - x
    norm = float(np.linalg.norm(x))
    return {"max_abs_error": float(np.abs(diff).max()) if diff.size else 0.0,
            "rel_l2_error": float(np.linalg.norm(diff) / norm) if norm > 0 else 0.0}


def _non_finite(site: ConstantSite) -> str | None:
    """A weight holding NaN or Inf stays as it is: no scale represents it."""
    if not np.isfinite(read_values(site.tensor)).all():
        return "holds NaN or Inf values"
    return None


def _refusal(site: ConstantSite, scopes, options: QuantOptions, keep: frozenset[str]) -> str | None:
    if site.num_elements < options.min_elements:
        return "small"
    if not site.shape:
        return "a scalar: nothing to group or gain"
    if options.fp16 and site.onnx_dtype != onnx.TensorProto.FLOAT:
        return "--fp16 applies to float32 weights only"
    if options.levels and site.onnx_dtype == onnx.TensorProto.BFLOAT16:
        return "--levels: bfloat16 weights are left alone"
    if options.include and not _matches(site, options.include):
        return "not matched by --include"
    if options.exclude and _matches(site, options.exclude):
        return "matched by --exclude"
    if site.name in keep:
        return "overridable graph input"
    if graph_outputs_holding(scopes, site.value):
        return "graph output"
    if not site.value.outputs:
        return "no consumer"
    return None


def _lowering(site: ConstantSite, options: QuantOptions, scheme: Scheme, opset: int) -> str:
    """`auto`: integers gathered before dequantizing for embedding tables; MatMulNBits for a
    MatMul weight when the target is onnxruntime; DequantizeLinear when the weights are to stay
    quantized in memory; the lean `scaled` lowering (int8, the scheme left to us) where every
    reader can take the scale after it; the `arith` chain elsewhere."""
    if options.lowering != "auto":
        return options.lowering
    readers = consumers(site)
    if _gatherable(site, readers, options, scheme, opset):
        return "gather"
    if options.target == "onnxruntime" and nbits_fits(site, readers, options, scheme):
        return "matmulnbits"
    if options.stays_quantized and opset >= dq_min_opset(options):
        return "dq"
    if options.lean_default:
        return "lean"  # or the accurate chain, measured per weight in _choose_accurate
    return "arith"


def nbits_fits(site: ConstantSite, readers, options: QuantOptions, scheme: Scheme) -> bool:
    """What com.microsoft MatMulNBits takes: a 2-D weight read by one MatMul as B, blocks of a
    power of two >= 16 along K, from the main graph's scope (MatMulNBits is not a standard op)."""
    block = scheme.block_size or 0
    return (scheme.granularity == "block" and block >= 16 and block & (block - 1) == 0
            and len(readers) == 1 and readers[0][0].op == "MatMul" and readers[0][1] == 1
            and len(site.shape) == 2 and scheme.axis == 0 and site.onnx_dtype == onnx.TensorProto.FLOAT)


def _gatherable(site: ConstantSite, readers, options: QuantOptions, scheme: Scheme, opset: int) -> bool:
    """A table read only as Gather data along axis 0, in the scope where its nodes go, with no
    group spanning rows: each gathered row can be dequantized on its own. 4-bit rows are
    packed by halves and split with uint8 BitShift (opset 11), so they need an even length."""
    rank = len(site.shape)
    row = int(np.prod(site.shape[1:])) if rank >= 1 else 0
    return (
        (not options.four_bit or (opset >= 11 and row % 2 == 0))
        and rank >= 1 and bool(readers)
        and all(n.op == "Gather" and i == 0 and n.attrs.get("axis", 0) % rank == 0 for n, i in readers)
        and (scheme.granularity == "tensor" or (scheme.granularity == "channel") == (scheme.axis == 0))
        and all(graph is site.scope.graph for graph, _ in readers_by_graph(site))
    )


def _stored_bytes(qt: Quantized, lowering: str) -> int:
    """Payload bytes of the quantized form (q, scales, zero points), as both lowerings store it."""
    extra = qt.input_scale.nbytes if qt.input_scale is not None else 0
    return extra + _payload_bytes(qt.q.size, qt.scale.size, qt.scale.itemsize, qt.dtype,
                                  qt.zero_point is not None, lowering)


def _payload_bytes(elements: int, groups: int, scale_bytes: int, dtype: str, zero_points: bool,
                   lowering: str) -> int:
    four_bit = dtype in ("int4", "uint4")
    q_bytes = (elements + 1) // 2 if four_bit else elements
    zp_bytes = 0
    if zero_points:  # 4-bit zero points are packed under dq, one per byte under arith
        zp_bytes = (groups + 1) // 2 if four_bit and lowering in ("dq", "matmulnbits") else groups
    return q_bytes + groups * scale_bytes + zp_bytes


def estimated_bytes(site: ConstantSite, options: QuantOptions, opset: int) -> int:
    """Payload bytes `site` would take when quantized with `options`, from its shape alone
    (for `info`: scales assumed to fit float16 under arith; `auto`'s int8 choice assumed lean,
    which it is unless a weight has outlier rows; the opset is the one quant upgrades to; graph
    overhead of a few small nodes per weight not counted)."""
    if options.fp16:
        return 2 * site.num_elements
    opset = max(opset, required_opset(options))
    if options.lean_default and recurrent_weight(site):  # quant upgrades the model for them
        opset = max(opset, RECURRENT_DQ_OPSET)
    scheme = choose_scheme(site, options)
    lowering = _lowering(site, options, scheme, opset)
    symmetric = options.symmetric
    if lowering in ("lean", "scaled"):
        (scheme, lowering), symmetric = _lean_scheme(site, opset), True
    groups = {"tensor": 1, "channel": site.shape[scheme.axis] if site.shape else 1,
              "block": site.num_elements // (scheme.block_size or 1)}[scheme.granularity]
    scale_bytes = 4 if lowering in ("dq", "matmulnbits", "scaled") else 2
    input_axis = equalized_axis(site) if lowering == "scaled" else None
    input_scales = 4 * site.shape[input_axis] if input_axis is not None else 0
    return input_scales + _payload_bytes(site.num_elements, groups, scale_bytes, options.dtype,
                          has_zero_point(options.dtype, symmetric), lowering)


# -- graph construction -------------------------------------------------------------------------


def _const(names: NameAllocator, base: str, array: np.ndarray) -> gs.Constant:
    return gs.Constant(names.new(base), c_order(array))


def _int_tensor(names: NameAllocator, base: str, values: np.ndarray, dtype: str) -> gs.Constant:
    """An integer constant of ONNX type `dtype` (4-bit types packed, which gs cannot export)."""
    if dtype in ("int8", "uint8"):
        return _const(names, base, values.astype(np.int8 if dtype == "int8" else np.uint8))
    proto = onnx.helper.make_tensor(names.new(base), _ONNX_INT[dtype], list(values.shape),
                                    pack_nibbles(values, dtype == "int4").tobytes(), raw=True)
    return gs.Constant(proto.name, LazyValues(proto))


class _Emitter:
    """Appends nodes to one graph, each producing a fresh float or int Variable."""

    def __init__(self, graph: gs.Graph, names: NameAllocator, base: str):
        self.graph, self.names, self.base = graph, names, base

    def __call__(self, op: str, inputs: list, dtype=np.float32, shape=None, **attrs) -> gs.Variable:
        out = gs.Variable(self.names.new(f"{self.base}__{op.lower()}"), dtype=dtype, shape=shape)
        self.graph.nodes.append(gs.Node(op, name=self.names.new(f"{self.base}__{op}"), attrs=attrs,
                                        inputs=inputs, outputs=[out]))
        return out


def _build(site: ConstantSite, qt: Quantized, lowering: str, names: NameAllocator, opset: int) -> gs.Tensor | None:
    """The nodes that turn the stored integers back into the weight; returns the tensor that
    replaces it, or None when the consumers were rewritten instead (`gather`)."""
    if lowering == "gather":
        _build_gathered(site, qt, names)
        return None
    if lowering == "scaled":
        build_scaled(site, qt, names)
        return None
    if lowering == "matmulnbits":
        build_matmul_nbits(site, qt, names)
        return None
    base = site.name
    emit = _Emitter(site.scope.graph, names, base)
    shape = list(site.shape)
    target = FLOAT_TYPES[site.onnx_dtype]
    if lowering == "dq":
        inputs = [_int_tensor(names, f"{base}_q", qt.q, qt.dtype), _const(names, f"{base}_scale", qt.scale)]
        if qt.zero_point is not None:
            inputs.append(_int_tensor(names, f"{base}_zero_point", qt.zero_point, qt.dtype))
        attrs = {}
        if qt.granularity != "tensor":
            attrs["axis"] = qt.axis
        if qt.granularity == "block":
            attrs["block_size"] = qt.block_size
        out = emit("DequantizeLinear", inputs, shape=shape, **attrs)
    else:
        out = _build_arith(qt, emit, names, base, shape, opset)
    if site.onnx_dtype != onnx.TensorProto.FLOAT:
        out = emit("Cast", [out], dtype=target, shape=shape, to=site.onnx_dtype)
    return out


def _build_gathered(site: ConstantSite, qt: Quantized, names: NameAllocator) -> None:
    """Replace each Gather of the table with: Gather of the integer rows (4-bit: packed rows,
    then split), of the zero points and of the scales by the same indices, then Cast -> [Sub]
    -> Mul [-> Reshape] [-> Cast] on the gathered rows only. Zero points and scales keep a
    leading row axis (per tensor they are scalars, not gathered), so the gathered ones
    broadcast against the gathered integers."""
    base, shape = site.name, list(site.shape)
    view = _broadcast_shape(qt, shape)
    work_shape = _work_shape(qt, shape)
    four_bit = qt.dtype in ("int4", "uint4")
    if four_bit:  # [rows, row / 2] bytes
        rows = (qt.q.astype(np.int16) + _nibble_offset(qt)).reshape(shape[0], -1)
        table = _const(names, f"{base}_q4", pack_halves(rows))
    else:
        table = _int_tensor(names, f"{base}_q", qt.q.reshape(work_shape), qt.dtype)
    scale = _const(names, f"{base}_scale", qt.scale.reshape(view))
    zero = _zero_to_subtract(qt, view, names, base)
    emit = _Emitter(site.scope.graph, names, base)

    def take(tensor: gs.Constant, indices: gs.Tensor) -> gs.Tensor:
        return tensor if not view else emit("Gather", [tensor, indices], dtype=tensor.values.dtype, axis=0)

    def indexed_shape(indices: gs.Tensor, dims: list[int]) -> gs.Variable:  # [*indices.shape, *dims]
        tail = _const(names, f"{base}_dims", np.array(dims, np.int64))
        return emit("Concat", [emit("Shape", [indices], dtype=np.int64), tail], dtype=np.int64, axis=0)

    for gather, _ in consumers(site):
        indices, (output,) = gather.inputs[1], list(gather.outputs)
        q = emit("Gather", [table, indices], dtype=table.values.dtype, axis=0)
        if four_bit:
            q = emit("Concat", list(_split_nibbles(q, emit, names, base)), dtype=np.uint8, axis=-1)
            if len(work_shape) > 2:
                q = emit("Reshape", [q, indexed_shape(indices, work_shape[1:])], dtype=np.uint8)
        x = emit("Cast", [q], to=onnx.TensorProto.FLOAT)
        if zero is not None:  # integer zero points are gathered; int4's float offset is a scalar
            as_float = zero.values.dtype == np.float32
            x = emit("Sub", [x, zero if as_float else emit("Cast", [take(zero, indices)], to=onnx.TensorProto.FLOAT)])
        scales = take(scale, indices)
        if qt.scale.dtype != np.float32:
            scales = emit("Cast", [scales], to=onnx.TensorProto.FLOAT)
        x = emit("Mul", [x, scales])
        if qt.granularity == "block":  # [*indices, blocks, block] -> [*indices, row]
            x = emit("Reshape", [x, indexed_shape(indices, shape[1:])])
        if site.onnx_dtype != onnx.TensorProto.FLOAT:
            x = emit("Cast", [x], dtype=FLOAT_TYPES[site.onnx_dtype], to=site.onnx_dtype)
        last = x.inputs[0]
        gather.outputs.clear()  # the old Gather goes dead; its output now comes from `last`
        last.outputs[0] = output


def _work_shape(qt: Quantized, shape: list[int]) -> list[int]:
    """The weight's shape with the blocked axis split in two (blocks, block), for the scales to
    broadcast; the shape itself for other schemes."""
    work_shape = list(shape)
    if qt.granularity == "block":
        work_shape[qt.axis:qt.axis + 1] = [shape[qt.axis] // qt.block_size, qt.block_size]
    return work_shape


def _nibble_offset(qt: Quantized) -> int:
    """4-bit values are stored as nibbles 0..15: int4 shifted by 8."""
    return 8 if qt.dtype == "int4" else 0


def _zero_to_subtract(qt: Quantized, view: list[int], names: NameAllocator, base: str) -> gs.Constant | None:
    """What the stored integers have to lose before scaling: the zero points as stored
    integers (int8/uint8, offset like the nibbles; cast to float in the graph), int4's bare
    offset of 8 as a float scalar, or None."""
    offset = _nibble_offset(qt)
    if qt.zero_point is not None:
        zp = (qt.zero_point.astype(np.int16) + offset).reshape(view)
        return _const(names, f"{base}_zero_point", zp.astype(np.int8 if qt.dtype == "int8" else np.uint8))
    if offset:
        return _const(names, f"{base}_offset", np.array(offset, np.float32))
    return None


def _broadcast_shape(qt: Quantized, shape: list[int]) -> list[int]:
    """Shape that scale/zero-point constants take so that they broadcast against q (blocked q
    for blocks)."""
    if qt.granularity == "tensor":
        return []
    if qt.granularity == "channel":
        view = [1] * len(shape)
        view[qt.axis] = shape[qt.axis]
        return view
    blocked = list(shape)
    blocked[qt.axis:qt.axis + 1] = [shape[qt.axis] // qt.block_size, 1]
    return blocked


def _build_arith(qt: Quantized, emit: _Emitter, names: NameAllocator, base: str, shape: list[int],
                opset: int) -> gs.Variable:
    four_bit = qt.dtype in ("int4", "uint4")
    view = _broadcast_shape(qt, shape)
    zero = _zero_to_subtract(qt, view, names, base)
    if zero is not None and zero.values.dtype != np.float32:  # integers, folded at session start
        zero = emit("Cast", [zero], to=onnx.TensorProto.FLOAT)
    blocked = qt.granularity == "block"
    work_shape = _work_shape(qt, shape)  # blocks get an axis of their own, for the scales to broadcast
    if four_bit:
        nibbles = (qt.q.astype(np.int16) + _nibble_offset(qt)).ravel()  # C order of the (blocked) work shape
        q = _unpack_nibbles(nibbles, emit, names, base, opset)
        q = emit("Reshape", [q, _const(names, f"{base}_qshape", np.array(work_shape, np.int64))], dtype=q.dtype)
        q = emit("Cast", [q], to=onnx.TensorProto.FLOAT)
    else:
        # Stored already blocked (same bytes): onnxruntime folds the chain at session start and
        # holds every float intermediate until folding ends, so one float Reshape fewer is
        # one weight-sized float copy less at load time.
        stored = _int_tensor(names, f"{base}_q", qt.q.reshape(work_shape), qt.dtype)
        q = emit("Cast", [stored], to=onnx.TensorProto.FLOAT)
    if zero is not None:
        q = emit("Sub", [q, zero])
    scale = _const(names, f"{base}_scale", qt.scale.reshape(view))
    if qt.scale.dtype != np.float32:  # float16 scales (half the bytes), folded at session start
        scale = emit("Cast", [scale], to=onnx.TensorProto.FLOAT)
    x = emit("Mul", [q, scale])
    if blocked:
        x = emit("Reshape", [x, _const(names, f"{base}_shape", np.array(shape, np.int64))], shape=shape)
    return x


def _unpack_nibbles(nibbles: np.ndarray, emit: _Emitter, names: NameAllocator, base: str,
                    opset: int) -> gs.Variable:
    """Store flat values 0..15 two per byte (`pack_halves`) and emit the nodes that unpack
    them into a flat integer tensor. onnxruntime folds these at session start and holds each
    intermediate until folding ends, so they stay one byte per value (uint8 BitShift) from
    opset 11; before that, uint8 has no arithmetic and the split runs in int32."""
    even = nibbles.size - nibbles.size % 2
    packed = _const(names, f"{base}_q4", pack_halves(nibbles[:even]))
    if opset >= 11:
        dtype = np.uint8
        lo, hi = _split_nibbles(packed, emit, names, base)
    else:
        dtype, sixteen = np.int32, _const(names, f"{base}_16", np.array(16, np.int32))
        p = emit("Cast", [packed], dtype=dtype, to=onnx.TensorProto.INT32)
        hi = emit("Div", [p, sixteen], dtype=dtype)
        lo = emit("Sub", [p, emit("Mul", [hi, sixteen], dtype=dtype)], dtype=dtype)
    parts = [lo, hi]
    if nibbles.size % 2:  # an odd count: the last value on its own
        parts.append(_const(names, f"{base}_q4_last", nibbles[even:].astype(dtype)))
    return emit("Concat", parts, dtype=dtype, axis=0)


def _split_nibbles(packed: gs.Tensor, emit: _Emitter, names: NameAllocator, base: str):
    """(low nibbles, high nibbles) of uint8 bytes, with uint8 BitShift (opset 11)."""
    four = _const(names, f"{base}_4", np.array(4, np.uint8))
    hi = emit("BitShift", [packed, four], dtype=np.uint8, direction="RIGHT")
    lo = emit("BitShift", [emit("BitShift", [packed, four], dtype=np.uint8, direction="LEFT"), four],
              dtype=np.uint8, direction="RIGHT")
    return lo, hi
