"""The lean form of a float16 weight its readers multiply in float16 (a separate rule, so that
float32 weights' plans cannot move with it): where the same weight stored as float32 would be
`scaled` (one scale per output channel after the reader, the input equalized), it is
`arith_equalized`, the same integers and scales folded at load, since a float16 reader cannot
take the scale after it (lowerings/scaled.py: its unscaled output would overflow float16).

Before this rule such a weight got plain `arith`, without the input-side equalization, and the
float16 storage of a model quantized worse than its float32 storage against its own float
reference (zoo report set: trueocr_rec 0.0183 against 0.0100; lowerings/arith_equalized.py)."""

from __future__ import annotations

from ...graph_utils import ConstantSite
from ..lowerings import REGISTRY
from ..lowerings.scaled import computes_in_float16, equalized_axis, output_axis_ignoring_float16
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
