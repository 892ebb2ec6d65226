"""A lean Conv weight whose kernel is long (a 1-D filter of 16 taps or more: crepe's 64-tap
convolutions over a pitch frame) may lose far less with one scale per tap than with one per
output or input channel: the trained filters share an envelope along their taps, as an STFT
basis's rows share its window (channel_axis.py), so per-channel scales are set by the few
large middle taps and round the tails coarsely. onnx-shrink-ray's per-channel int8 scales such
weights per tap; no scale per tap can follow the Conv or multiply its input, so that form is the
Cast -> Sub -> Mul chain along the tap axis (`arith`, with zero points), folded at load: no cost at
run time, one more float copy of the weight while onnxruntime folds it than the lean form's.

Taken where it loses at most TAP_AXIS_MARGIN of the best lean form's error (per output channel,
with or without zero points, or per input channel: `scaled_input`), measured as the other lean
choices are (lean.py: in the layer's output with --inputs, else in the weight), for the weights
whose input-channel form is measured (lean.input_form_fits: int8, `--lowering auto`, not `--target
tensorrt`, whose symmetric-only rule a zero point breaks) and whose symmetry is auto's.
"""

from __future__ import annotations

import numpy as np

from ..lowerings.weight_readers import effective_readers
from ..options import Scheme

# ARITH_AXIS_MARGIN's 0.9 (lean.py: a lean `arith` weight's other axis, the same chain). crepe_tiny
# (issue 55, ahead19): conv4-6 (16-64 x 16-32 x 64 x 1) measure 0.84x, 0.68x and 0.51x of their lean
# forms' error per tap, conv2 1.46x (its input channels' form stays); conv3's accurate chain loses
# 1.65x less than per tap and stays. Worst relative L2 on 16 fresh frames at seeds 2000 / 3000 / 4000:
# 0.00557 / 0.00556 / 0.00530 -> 0.00485 / 0.00509 / 0.00511 (onnx-shrink-ray 0.00464 / 0.00474 /
# 0.00470); over 7 paired draws tune better on 5, report on 3 (medians level: docs/benchmarks.md,
# ahead19). 0.8 takes conv5 and conv6 only, and measured worse there: tune / report 0.00439 / 0.00496
# -> 0.00460 / 0.00513 (conv4-6: 0.00426 / 0.00504).
TAP_AXIS_MARGIN = 0.9
# the bounds of the other axis stages (lean.MIN_AXIS_CHANNELS, MAX_AXIS_ELEMENTS; stages import
# no other stage: tests/test_planning.py)
MIN_TAPS = 16
MAX_TAP_ELEMENTS = 1 << 20


def tap_axes(site) -> list[int]:
    """The kernel axes of a Conv weight `site` (2 and after) with MIN_TAPS taps or more, where
    every reader is a Conv reading it as its weight; [] otherwise."""
    readers = effective_readers(site)
    if not readers or not all(n.op == "Conv" and i == 1 for n, i in readers):
        return []
    if len(site.shape) < 3 or site.num_elements > MAX_TAP_ELEMENTS:
        return []
    return [a for a in range(2, len(site.shape)) if site.shape[a] >= MIN_TAPS]


def tap_form(values: np.ndarray, site, errors, moments) -> tuple[int, float] | None:
    """(the tap axis, its error) of the best tap axis's `arith` form with zero points, or None
    where `site` has no tap axis. `errors` is lean.py's measure (x, moments, [(scheme, lowering,
    symmetric)]) -> [error]."""
    found = [(errors(values, moments, [(Scheme("channel", a), "arith", False)])[0], a) for a in tap_axes(site)]
    return min(found)[::-1] if found else None


def taken(ratio: float | None) -> bool:
    """Whether the tap form is the weight's: `ratio` (its error over the best lean form's) at most
    TAP_AXIS_MARGIN. A weight the accurate block chain took keeps it (lean.py: its blocks lose less
    in the weight than one scale per tap, crepe_tiny's conv3 1.65x)."""
    return ratio is not None and ratio <= TAP_AXIS_MARGIN
