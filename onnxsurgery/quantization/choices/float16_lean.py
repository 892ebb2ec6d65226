"""The lean form of a float16 weight its readers multiply in float16 (a separate rule, so that
float32 weights' plans cannot move with it): where the same weight stored as float32 would be
`scaled` (one scale per output channel after the reader, the input equalized), it is
`arith_equalized`, the same integers and scales folded at load, since a float16 reader cannot
take the scale after it (lowerings/scaled.py: its unscaled output would overflow float16).

Before this rule such a weight got plain `arith`, without the input-side equalization, and the
float16 storage of a model quantized worse than its float32 storage against its own float
reference (zoo report set: trueocr_rec 0.0183 against 0.0100; lowerings/arith_equalized.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ...graph_utils import ConstantSite
from ..lowerings import REGISTRY
from ..lowerings.scaled import computes_in_float16, equalized_axis, output_axis_ignoring_float16
from ..lowerings.weight_readers import effective_readers
from .load_memory import KEPT_CONV_TAPS, LARGE_CONV_ELEMENTS, _reading_order
from ..options import Scheme


def float16_lean(site: ConstantSite) -> tuple[Scheme, str] | None:
    """(scheme, "arith_equalized") for a float16 weight read in float16 whose float32 form
    would be `scaled` with input-side scales; None otherwise (lean_scheme's other rules)."""
    if not computes_in_float16(site) or equalized_axis(site) is None:
        return None
    axis = output_axis_ignoring_float16(site)
    if axis is None:
        return None
    scheme = Scheme("channel", axis)
    return (scheme, "arith_equalized") if REGISTRY["arith_equalized"].fits(site, scheme, "int8", 0) is None else None


# Memory at load of float16 weights read in float16 (storage12). load_memory.py's rule counts
# float32 weights only; a float16 weight's `arith` / `arith_equalized` chain is folded at load
# through float32 (Cast, Sub, Mul, then Cast to float16 and onnxruntime's own Cast back to
# float32 for its CPU Conv), and onnxruntime's constant folding holds every weight's
# intermediates until the pass ends. isnet_fp16 (88.4 MB of float16 weights), peak RSS growth over
# session creation, fresh processes (2026-11-30): its float16 original 445-474 MB, every weight so
# 714 MB (+2.8 of the float16 bytes); its 11 largest Convs (51% of the quantized elements) as
# DequantizeLinear before the Conv (the integers stay, dequantized at each inference; no slower
# there: CPU a run 2.19 -> 2.25 s, medians of 3) 390 MB: each kept byte -7.2 from its chain's, so
# -4.4 beside the float16 weight. With MALLOC_MMAP_THRESHOLD_ fixed the peaks were 384 and 713 MB
# and what stays after creation 196 and 199 MB: the peak is the folding's, not what the session keeps.
# The rule keeps isnet's 7 largest Convs (43%): 0.94x (441-442 MB against 469-471), worst relative
# L2 tune / report 0.0164 / 0.0201 -> 0.0173 / 0.0191, CPU a run 2.17 -> 2.24 s (medians of 3). Its
# cost, as the float32 rule's: tumor_vgg16's fp16 variant 1.26x -> 0.83x, 0.0549 / 0.0378 -> 0.0831 /
# 0.0730 (its float32 model, its own Convs kept by load_memory.py, 0.1019 / 0.0457).
# Only Convs of load_memory.LARGE_CONV_ELEMENTS or more are kept: on slovorez (its Convs 0.18-0.25M
# elements, 1.04x without) the estimate overshot to 0.80x, two of its three Convs kept, and its
# report set went 0.0044 -> 0.0053 (with conv1d_1 per input channel, bench figures in storage12);
# trueocr_rec's fp16 variant (1.60x, Convs under 0.1M) is left as it was: 1.19x with them kept.
FLOAT16_CHAIN, FLOAT16_KEPT = 2.8, -4.4


def float16_chain(site: ConstantSite, lowering: str) -> bool:
    """A float16 weight read in float16 planned in a chain folded at load (`arith`, `arith_equalized`)."""
    return lowering in ("arith", "arith_equalized") and computes_in_float16(site)


def float16_conv_kept(site: ConstantSite) -> bool:
    """Whether float16_kept may keep `site`: read only as W of Conv, a kernel of at most
    load_memory.KEPT_CONV_TAPS taps (the unpacked Conv a larger one runs costs more at each run),
    of load_memory.LARGE_CONV_ELEMENTS or more (FLOAT16_CHAIN above)."""
    readers = effective_readers(site)
    taps = int(np.prod(site.shape[2:])) if len(site.shape) >= 3 else 0
    return (bool(readers) and all(n.op == "Conv" and i == 1 for n, i in readers) and 0 < taps <= KEPT_CONV_TAPS
            and site.num_elements >= LARGE_CONV_ELEMENTS)


def float16_kept(planned: Iterable[tuple[ConstantSite, str]],
                 left_lean: Callable[[ConstantSite], bool] = lambda site: False) -> list[ConstantSite]:
    """The float16 weights to keep quantized in memory (DequantizeLinear before their Conv), the
    largest first, until the float16 chains' estimated extra at load (FLOAT16_CHAIN, FLOAT16_KEPT)
    is not above zero: the float32 rule's promise (load_memory.kept_in_memory) for float16 weights,
    on a budget of their own. `planned`: pairs of a weight and its lean form (weights.lean_forms)."""
    planned = list(planned)
    chains = [site for site, lowering in planned if float16_chain(site, lowering)]
    extra = FLOAT16_CHAIN * sum(site.nbytes for site in chains)
    kept = []
    movable = [site for site in chains if not left_lean(site) and float16_conv_kept(site)]
    order = _reading_order(planned)  # equal sizes in the order the float32 rule takes them
    for site in sorted(movable, key=lambda site: (-site.nbytes, order(site))):
        if extra <= 0:
            break
        extra += (FLOAT16_KEPT - FLOAT16_CHAIN) * site.nbytes
        kept.append(site)
    return kept
