"""--target tensorrt, int8: float16 (with a Cast back) for the weights that symmetric per-channel
int8, the only int8 form TensorRT takes for a weight, serves worst.

Where quant's default has forms TensorRT refuses (input rows equalized with the scale after the
reader, zero points, int8 blocks: choices/lean.py), a weight whose values vary far more within an
output channel than per-channel scales can follow loses much more under --target tensorrt.
silero-vad's re-parameterized convolutions are such weights (a kernel's centre tap, the merged
1x1 branch, dominates each channel): their per-channel error in the weight is 2.5-4.4x the
default's int8 blocks'; so are PP-OCRv4 rec's largest convolutions (2.7-5.1x) and four of
MiniLM's six FFN down projections (2.2-4.1x: outlier input rows), against at most 1.9x for
every weight of ALBERT-base and ddddocr. Measured from the weights alone, as the default
measures without inputs (DESIGN.md: generated inputs lie). On the tuning inputs (other than the
bench's): silero-vad 0.0276 -> 0.0051 (the default 0.0094), MiniLM 0.0252 -> 0.0207 for 2.4 MB
more (0.0225).

Each such weight, lossiest first, is stored as float16 while the bytes float16 adds over int8
stay within FLOAT16_SHARE of the int8 bytes of all the weights TensorRT reads as int8. The ratio
and the share were tuned on inputs other than the bench's (bench/tensorrt.py, docs/benchmarks.md).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, collect_constants, iter_scopes, read_values
from ..axes import choose_axes
from ..options import QuantOptions, Scheme
from ..quantize import quantize_args, quantize_site
from ..rounding import weight_error
from .model_facts import ModelFacts
from .sampling import channel_sample

# A weight whose symmetric per-channel error in the weight is more than this many times the
# error of the default's int8 blocks of 32 (asymmetric) is stored as float16.
MIN_FLOAT16_RATIO = 2.4
FLOAT16_SHARE = 0.5
# The default's small-weight rule (weights.py's SMALL_WEIGHT_ELEMENTS and SMALL_FLOAT16_SHARE, the
# same values: tests/test_tensorrt.py checks; lean.py imports the rules this module is read by).
SMALL_WEIGHT_ELEMENTS = 16384
SMALL_FLOAT16_SHARE = 0.05
BLOCK = 32


def tensorrt_float16(site: ConstantSite, options: QuantOptions, int8_weight, balanced,
                     facts: ModelFacts) -> str | None:
    """Why `site` is stored as float16 under --target tensorrt int8 (module docstring), or None,
    chosen once for the model (`facts`). The rules' own predicates come from forms.site_form,
    which calls this: `int8_weight(site, options)`, whether TensorRT reads the weight as int8;
    `balanced(site, options)`, whether it gets balanced rounding."""
    if options.target != "tensorrt" or options.dtype != "int8" or options.fp16 or options.levels or \
            options.granularity != "channel" or options.include:
        return None
    chosen = facts.get(f"tensorrt_float16:{options.min_elements}:{options.exclude}",
                       lambda graph: _chosen(graph, options, int8_weight, balanced))
    return chosen.get(site.name)


def _chosen(graph: gs.Graph, options: QuantOptions, int8_weight, balanced) -> dict[str, str]:
    candidates, int8_bytes = [], 0
    for site in collect_constants(graph, list(iter_scopes(graph))):
        if site.onnx_dtype != onnx.TensorProto.FLOAT or site.num_elements < options.min_elements or \
                not site.shape or not site.value.outputs or not int8_weight(site, options):
            continue
        int8_bytes += site.num_elements
        candidates.append((*per_channel_loss(site, balanced(site, options)), site))
    chosen: dict[str, str] = {}
    # the default's rule for small weights first (SMALL_WEIGHT_ELEMENTS, SMALL_FLOAT16_SHARE),
    # lossiest first; then the weights per-channel scales serve worst
    room = SMALL_FLOAT16_SHARE * int8_bytes
    small = sorted(((e, s) for _, e, s in candidates if s.num_elements < SMALL_WEIGHT_ELEMENTS), key=lambda c: -c[0])
    for _, site in small:
        if site.num_elements <= room and _fits_float16(site):  # float16: one byte per element more than int8
            chosen[site.name] = "target tensorrt: small, float16 costs little and is more accurate than int8 here"
            room -= site.num_elements
    room = FLOAT16_SHARE * int8_bytes
    for ratio, _, site in sorted(candidates, key=lambda c: -c[0]):
        if ratio > MIN_FLOAT16_RATIO and site.name not in chosen and site.num_elements <= room and \
                _fits_float16(site):
            chosen[site.name] = (f"target tensorrt: float16, not int8: symmetric per-channel int8 (what TensorRT "
                                 f"takes) loses {ratio:.1f}x the default's int8 blocks in this weight")
            room -= site.num_elements
    return chosen


def _fits_float16(site: ConstantSite) -> bool:
    values = read_values(site.tensor)
    return bool(np.isfinite(values).all() and np.abs(values).max() <= np.finfo(np.float16).max)


def per_channel_loss(site: ConstantSite, balance: bool) -> tuple[float, float]:
    """(the weight's relative L2 error as symmetric per-channel int8 over its error as int8
    blocks of 32 along its reduction axis with zero points, the former), on a sample of its
    channels."""
    values = channel_sample(read_values(site.tensor).astype(np.float32, copy=False), site)
    channel_axis, block_axis = choose_axes(site)
    channel = Scheme("channel", channel_axis)
    blocks = Scheme("block", block_axis, BLOCK) if values.shape[block_axis] % BLOCK == 0 else channel
    errors = [weight_error(values, quantize_site(values, site, scheme, lowering, balance,
                                                 quantize_args("int8", scheme, lowering, symmetric)))["rel_l2_error"]
              for scheme, lowering, symmetric in ((channel, "dq", True), (blocks, "arith", False))]
    return (errors[0] / errors[1] if errors[1] > 0 else 1.0), errors[0]
