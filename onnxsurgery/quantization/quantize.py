"""One weight's integers and scales for a settled scheme, as the lowering will store them:
`quantize_args` (the rounding's arguments: float16 scales where the lowering stores them, the
clipping search for 4-bit ranges) and `quantize_site` (under an equalizing lowering, the weight
divided by its input-side scales first). Used alike by the choices that measure candidate forms
and by apply.py."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
import onnx

from ..graph_utils import ConstantSite
from .lowerings import REGISTRY
from .axes import choose_axes
from .chunked import abs_max, abs_max_with_ranges, all_finite
from .lowerings.scaled import equalized_axis, equalizing_from, equalizing_scales
from .lowerings.weight_readers import through_casts
from .options import QuantOptions, Scheme
from .rounding import Quantized, quantize, weight_error
from .shared_rounding import rounded


def scheme_args(options: QuantOptions, scheme: Scheme, lowering: str, symmetric: bool | None = None,
                importance: np.ndarray | None = None) -> dict:
    """quantize()'s arguments for `scheme` under `lowering` (dq and MatMulNBits: scales of the
    output type; arith: float16 scales rounded up; scaled: float32 scales, applied at run time).
    4-bit ranges are searched for a clipping ratio (clip_search.CLIP_RATIOS): 15 steps leave little
    to waste. Where `importance` is given (what each element multiplies in the layer's input,
    gptq.input_energy on the verification inputs), each element's error is weighted by it, and
    asymmetric ranges are searched too: MiniLM int4 0.243 -> 0.228, ALBERT-base's encoder 0.255
    -> 0.227 on task inputs (choices.symmetry.weighted_clipping: MatMul and Gemm weights). Without
    it only symmetric ranges are, where one outlier sets the range on both sides: unweighted,
    asymmetric ddddocr rose 0.159 -> 0.187."""
    return quantize_args(options.dtype, scheme, lowering, options.symmetric if symmetric is None else symmetric,
                         importance)


def quantize_args(dtype: str, scheme: Scheme, lowering: str, symmetric: bool,
                  importance: np.ndarray | None = None) -> dict:
    """`scheme_args` for one weight's settled dtype and symmetry (what a plan record holds)."""
    four_bit = dtype in ("int4", "uint4")
    weighted = four_bit and importance is not None
    return dict(dtype=dtype, granularity=scheme.granularity, block_size=scheme.block_size,
                symmetric=symmetric, half_scales=not REGISTRY[lowering].float_scales,
                search_clip=four_bit and (bool(symmetric) or weighted),
                importance=importance if weighted else None)


class _Record:
    """What was measured of one weight quantized one way: the clipping search's picks and the
    weight error (rounding.weight_error), for the same values quantized the same way again."""

    def __init__(self, fingerprint):
        self.fingerprint = fingerprint
        self.clip_picks = None
        self.error = None
        # picks of some of its channels, searched on a sample of them (quantize_site's `sample_of`):
        # (channel axis, channels, their picks), for rounding.quantize's `known_picks`
        self.known_picks = None

    def error_for(self, x: np.ndarray) -> dict | None:
        return dict(self.error) if self.error is not None and _fingerprint(x) == self.fingerprint else None

    def measured(self, x: np.ndarray, error: dict) -> None:
        if _fingerprint(x) == self.fingerprint:
            self.error = dict(error)


_MEMORY: dict = {}
# per weight as read (whole, or one sample of it): the facts every way of quantizing it shares,
# each a pass over it that the plan's measurements and the pass made again for each way
# (`_shared`): its input-side scales, and its channels' ranges (one or two floats per row or
# column: held for every weight until the pass ends, where blocks' would add up to an eighth
# of the model's float bytes)
_FACTS: dict = {}
_OPEN = [0]
_LOCK = threading.Lock()


@contextmanager
def remembering():
    """Within it, quantize_site remembers each weight's clipping picks and weight error, per
    way of quantizing it, so that a weight the plan measured is not searched nor measured again
    when the plan is applied (the pass opens it around both: passes/quantize_weights.py). A
    record holds one byte per group of clipping picks (1/128 of the float32 weight in blocks of
    32) and two floats; all are dropped when the outermost one closes. So are the facts the
    ways of quantizing one weight share (`_FACTS`): a few floats per row and column."""
    with _LOCK:
        _OPEN[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _OPEN[0] -= 1
            if not _OPEN[0]:
                _MEMORY.clear()
                _FACTS.clear()


def _fingerprint(values: np.ndarray) -> tuple:
    """The shape, type and about 64 evenly spaced elements of `values`: tells the whole weight from
    a sample of its channels or a transformed copy (quantize_site's callers pass both)."""
    flat = np.asarray(values).reshape(-1)
    return values.shape, values.dtype.str, flat[::max(1, flat.size // 61)].tobytes()


def _record(values: np.ndarray, site: ConstantSite, scheme: Scheme, lowering: str, balanced: bool, args: dict,
            equalized: bool) -> _Record | None:
    """The record of `values` (the whole weight) quantized with these arguments, or None outside
    `remembering`; a new one where the values are not those it was made for."""
    if not _OPEN[0]:
        return None
    importance = args.get("importance")
    key = (id(site.tensor), site.name, scheme, lowering, balanced, equalized, id(importance),
           *sorted((k, v) for k, v in args.items() if k != "importance"))
    fingerprint = _fingerprint(values)
    with _LOCK:
        record = _MEMORY.get(key)
        if record is None or record.fingerprint != fingerprint:
            record = _MEMORY[key] = _Record(fingerprint)
            record.importance = importance  # held, so that its id stays its own
    return record


def quantize_site(values: np.ndarray, site: ConstantSite, scheme: Scheme, lowering: str, balanced: bool, args: dict,
                  equalized: bool = True, sample_of: tuple[np.ndarray, np.ndarray, int] | None = None) -> Quantized:
    """quantize() for `scheme`; under `scaled`, of the weight equalized along its input axis
    first (scaled.equalizing_scales), unless `equalized` is False (GPTQ rounds the weight as it is).
    Within `remembering`, the clipping search and the weight error of the same values
    quantized the same way are taken from the first time. `sample_of`: (the whole weight,
    the channels `values` holds of it, along which axis): the clipping picks of those channels
    are remembered for the whole weight, whose search then skips them (each group lies within
    a channel, so its pick is its own; not under an equalizing lowering, whose input-side
    scales a sample changes)."""
    if sample_of is not None:
        whole, channels, channel_axis = sample_of
        record = None if REGISTRY[lowering].equalized and equalized else _record(
            whole, site, scheme, lowering, balanced, args, equalized)
        qt = _quantize_site(values, site, scheme, lowering, balanced, args, equalized)
        if record is not None and qt.clip_picks is not None and record.clip_picks is None:
            record.known_picks = (channel_axis, channels, qt.clip_picks)
        return qt
    record = _record(values, site, scheme, lowering, balanced, args, equalized)
    if record is not None and record.clip_picks is not None:
        args = {**args, "clip_picks": record.clip_picks}
    elif record is not None and record.known_picks is not None:
        args = {**args, "known_picks": record.known_picks}
    if record is not None and record.error is not None:  # measured (the plan's): not measured again
        args = {**args, "error": False}
    qt = _quantize_site(values, site, scheme, lowering, balanced, args, equalized)
    if record is not None:
        record.clip_picks = qt.clip_picks
        qt.remembered = record
    return qt


def _shared(values: np.ndarray, site: ConstantSite) -> dict | None:
    """The facts of `values` (`site`'s, whole or a sample: told apart by _fingerprint) that every
    way of quantizing them shares, within `remembering` (else None): lean.py quantizes a weight
    symmetric, with zero points and in blocks, and the pass once more in the way chosen."""
    if not _OPEN[0]:
        return None
    key = (id(site.tensor), site.name, _fingerprint(values))
    with _LOCK:
        return _FACTS.setdefault(key, {"site": site.tensor})  # held, so that its id stays its own


def checked_read(values: np.ndarray, site: ConstantSite, lowering: str) -> tuple[bool, float | None]:
    """(no NaN or Inf in `values`, the largest |value| where that came for free, else None): the
    plan's finite check. Under an equalizing lowering it is the pass over the weight that its
    input-side scales need anyway (the row maxima of |values|: a NaN or an Inf reaches them),
    kept within `remembering` for every way of quantizing these values (`_shared`: the lean
    form measured on them, or the pass quantizing the whole weight that was measured on a
    sample), instead of a pass of its own (chunked.all_finite)."""
    axis = equalized_axis(site) if REGISTRY[lowering].equalized and values.ndim else None
    if axis is None:
        return all_finite(values), None
    facts = _shared(values, site)
    # a [K, N] MatMul weight quantized per output channel (axis 1): those channels' ranges of
    # the equalized weight measured on the same read (chunked.abs_max_with_ranges), for the pass
    ranges = None
    if facts is not None and "equalizing" not in facts and axis == 0 and values.ndim == 2 and values.size \
            and choose_axes(site)[0] == 1:
        row_max, lo, hi = abs_max_with_ranges(np.asarray(values, np.float32), lambda m: equalizing_from(m, site))
        ranges = ("ranges", "channel", 1, None, True), (lo, hi)  # _quantize_site's key for them
    else:
        row_max = abs_max(values, axis)
    if not np.isfinite(row_max).all():
        return False, None
    if facts is not None and "equalizing" not in facts:
        facts["equalizing"] = equalizing_from(row_max, site), axis
        if ranges is not None:
            facts[ranges[0]] = ranges[1]
    return True, float(row_max.max(initial=0.0))


def _quantize_site(values: np.ndarray, site: ConstantSite, scheme: Scheme, lowering: str, balanced: bool,
                   args: dict, equalized: bool) -> Quantized:
    if REGISTRY[lowering].equalized and site.onnx_dtype == onnx.TensorProto.FLOAT16 and through_casts(site) is None:
        args = {**args, "half_scales": True}  # scaled applies the scales in the weight's float16
    facts = _shared(values, site)
    equalize = REGISTRY[lowering].equalized and equalized
    r = input_axis = None
    if equalize:
        if facts is not None and "equalizing" in facts:
            r, input_axis = facts["equalizing"]
        else:
            r, input_axis = equalizing_scales(values, site)
            if facts is not None:
                facts["equalizing"] = r, input_axis
    divisor = None
    if r is not None:
        along = [1] * values.ndim
        along[input_axis] = -1
        divisor = r.reshape(along)  # values / r, divided as quantize goes (without a full-size copy)
    granularity = args.get("granularity")
    grouping = ("ranges", granularity, None if granularity == "tensor" else scheme.axis,
                args.get("block_size") if granularity == "block" else None, divisor is not None)
    known = facts.get(grouping) if facts is not None else None
    # the same rounding made in another plan or build of this --inputs check (shared_rounding.py)
    qt = rounded(site.name, values, divisor, (scheme, lowering, balanced, equalize), args,
                 lambda: quantize(values, axis=scheme.axis, balanced=balanced, divisor=divisor, ranges=known, **args))
    if facts is not None and known is None and granularity != "block":  # blocks': 1/16 of the weight, kept for none
        facts[grouping] = qt.ranges
    if r is not None:
        qt.input_scale, qt.input_axis = r, input_axis
    return qt


def _whole_key(site: ConstantSite, scheme: Scheme, lowering: str, balanced: bool, args: dict) -> tuple | None:
    """What `keep_whole` and `kept_whole` match on: the constant itself and every argument of
    its rounding, the importance array by identity (the plan's own, which the pass is given:
    Plan.importance); none with given clipping picks."""
    if any(args.get(k) is not None for k in ("clip_picks", "known_picks")):
        return None
    return (id(site.tensor), site.name, scheme, lowering, balanced, id(args.get("importance")),
            *sorted((k, v) for k, v in args.items() if k != "importance"))


def keep_whole(values: np.ndarray, site: ConstantSite, scheme: Scheme, lowering: str, balanced: bool,
               args: dict, held=None) -> bool:
    """The plan's side of issue 58's one read: `values` (the whole of `site`'s weight as read
    from it) rounded as the pass would round it for this form, kept in `held`
    (held_roundings.HeldRoundings, the pass's; None: nothing is held) where there is room;
    False where nothing was held."""
    key = _whole_key(site, scheme, lowering, balanced, args)
    if held is None or key is None or not held.has_room(values.size):
        return False
    qt = quantize_site(values, site, scheme, lowering, balanced, args)
    return held.hold((site.tensor, args.get("importance")), key, qt, weight_error(values, qt))  # ids stay theirs


def kept_whole(site: ConstantSite, scheme: Scheme, lowering: str, balanced: bool, args: dict, held=None,
               peek: bool = False) -> tuple[Quantized, dict] | bool | None:
    """The pass's side: (Quantized, error) that `held` kept for `site` rounded this way, else
    None (the pass reads and rounds the weight itself); with `peek`, only whether it is held."""
    key = _whole_key(site, scheme, lowering, balanced, args)
    if peek:
        return held is not None and key is not None and held.is_held(key)
    return None if held is None or key is None else held.take(key)
