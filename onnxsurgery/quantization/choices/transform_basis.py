"""A signal transform's basis read before a log (basic_pitch_nmp's constant-Q kernels: Hann-windowed
sinusoids read by Convs, then power, then Log): left float by default.

Such a basis cancels: a tone's energy lands in a few bins and the others sum to almost zero. Any
rounding of the basis adds a broadband floor to those empty bins, and the log turns that floor
into large errors (basic_pitch_nmp int8 per channel: relative L2 0.173 on music, 79% of notes kept;
left float 0.0075; float16 storage still 0.04). Verification on generated noise does not see it
(noise fills every bin: 0.023-0.041), so the plan must. The cue is structural and data-free: a
weight of mixed signs whose output reaches a Log through ops that only move, sign, scale, sum or
take powers of values (no other weight, no nonlinearity). A non-negative weight (a mel filterbank
summing powers) does not cancel: its rounding moves each bin by its own relative error, and it is
quantized as before (oww_melspectrogram's melW: the same error float or not)."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, read_values
from ..lowerings.weight_readers import effective_readers

BASIS_READERS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
# Ops through which a transform's output keeps its empty bins empty (moved, signed, scaled,
# squared, summed); a Log past them reads the bins the rounding fills.
PASSING = frozenset({"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Concat", "Slice", "Split", "Flatten",
                     "Expand", "Pad", "Identity", "Cast", "Neg", "Abs", "Mul", "Div", "Add", "Sub", "Pow",
                     "Sqrt", "ReduceSum", "ReduceSumSquare", "ReduceMean", "Max", "Clip"})
# Nodes walked from a weight's readers at most: the front end of a model, not its whole body.
WALK_LIMIT = 64
BASIS_REASON = ("a signal transform's basis read before a Log (signed weights whose sum cancels: rounding "
                "fills the bins a signal leaves empty, and the log shows it); --include NAME quantizes it")


def transform_basis(site: ConstantSite) -> str | None:
    """Why `site` is left float as a transform's basis (module doc), or None."""
    readers = effective_readers(site)  # a 16-bit weight's: behind its Casts (the bf16 variant)
    if not readers or any(n.op not in BASIS_READERS for n, _ in readers):
        return None
    if not _reaches_log([n for n, _ in readers]):
        return None
    values = read_values(site.tensor)
    if not (np.any(values < 0) and np.any(values > 0)):
        return None
    return BASIS_REASON


def _reaches_log(readers: list[gs.Node]) -> bool:
    """Whether a Log reads what `readers` write through PASSING ops only, within WALK_LIMIT nodes."""
    seen: set[int] = set()
    frontier = list(readers)
    while frontier and len(seen) < WALK_LIMIT:
        node = frontier.pop(0)
        for out in node.outputs:
            for reader in out.outputs:
                if id(reader) in seen:
                    continue
                seen.add(id(reader))
                if reader.op == "Log":
                    return True
                if reader.op in PASSING:
                    frontier.append(reader)
    return False
