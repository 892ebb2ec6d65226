"""A stage of the int8 default (planner.py, after recurrent_tables.py): the input weight W of a
recurrent layer (GRU, LSTM, RNN) that reads the model's own input as its sequence, through layout
ops only, is stored as float16 (a Cast back, folded at load) instead of int8 per channel behind
DequantizeLinear, while the byte each element costs over int8 stays within RECURRENT_INPUT_SHARE of
the int8 bytes of all the weights quantized.

Why, from the graph alone: such a weight meets the features as the caller computes them, at a scale
nothing in the graph sets (no normalization, no layer before it whose output a later scale could
follow), and whatever its rounding moves in the gates is carried into every later step's state, the
reason recurrent_tables.py keeps a table the recurrence reads float16. Its rows cannot take a scale
after them (the recurrent op reads W itself), so int8 per channel is its only integer form short of
blocks, which need opset 21.

Measured (zoo37, the zoo's report / tune sets, relative L2 of the outputs, int8 default before ->
after): resemblyzer_speaker (Resemblyzer's GE2E speaker encoder; its first LSTM's W [1, 1024, 40]
reads mel power, not log mel: values of 1e-4 to 28, weights up to 61) 0.2206 / 0.1295 -> see
zoo/README.md's thirty-seventh round; by hand on the report set, that one weight as float16 and
the rest int8 per channel 0.0244 (the other five LSTM weights' share), int8 blocks of 8 along its
40 inputs 0.0229, per input channel 0.210, equalized input channels (a scale moved onto the mel
bands) 0.28-0.37: the error is not in the weight's spread across rows or columns (its in-weight
per-channel / block error ratio, 1.27, is the zoo's recurrent weights' usual 1.1-1.6), it is in
what its inputs do with it, which only data shows and the weights alone do not.
Of the zoo's and bench's models only two have such a weight: resemblyzer_speaker and
g2p_id_lstm_decoder (its decoder step's [1, 1024, 32] W reads its graph input `input_2`), whose
32,768 elements are past the share (5% of its 303,104): its plans are the same."""

from __future__ import annotations

import onnx

from ...graph_utils import ConstantSite
from ..lowerings.weight_readers import effective_readers
from .candidate import Candidate, PlanContext
from .recurrent_tables import LAYOUT_OPS, MAX_HOPS, RECURRENT_OPS, float16_while_room
from .weights import stored_in_16_bits

RECURRENT_INPUT_SHARE = 0.05
WHY = ("float16: the input weight of a recurrent layer ({op}) that reads the model's input as it comes: int8 "
       "rows would carry the same rounding into every step's state (choices/recurrent_inputs.py)")


def reads_model_input(site: ConstantSite, graph) -> str | None:
    """The recurrent op that reads `site` (a 16-bit one: behind its Casts) as its W (input 1) and the
    graph's own input as its sequence X (input 0, through layout ops only: LAYOUT_OPS, at most
    MAX_HOPS), or None."""
    readers = effective_readers(site)
    if not readers or not all(n.op in RECURRENT_OPS and i == 1 for n, i in readers):
        return None
    inputs = {id(t) for t in graph.inputs}
    for node, _ in readers:
        x = node.inputs[0] if node.inputs else None
        for _ in range(MAX_HOPS + 1):
            if x is None or id(x) in inputs or not x.inputs or x.inputs[0].op not in LAYOUT_OPS:
                break
            x = x.inputs[0].inputs[0] if x.inputs[0].inputs else None
        if x is None or id(x) not in inputs:
            return None
    return readers[0][0].op


def keep_recurrent_inputs(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """The stage (module docstring): the int8 default's float32 W of a recurrent op that reads the
    model's input, float16 (a 16-bit one left as it is: records.float16_record), smallest first while
    they fit the share; `--dtype int4` too, where such a
    weight is int8 per channel as the int8 default's (zoo invariant 18: int4 otherwise wrote 98% of the
    int8 file's bytes at 8x its error)."""
    four_bit = ctx.options.four_bit and ctx.options.lowering == "auto" and ctx.options.auto_scheme
    if not (ctx.options.lean_default or four_bit):
        return candidates
    # under --dtype int4 a recurrent weight takes the int8 default's form (int4_paths.int4_form): its choice too
    weights = [c for c in candidates if c.lowering in ("lean", "dq") and not c.float16
               and (c.options.lean_default or four_bit and c.options.dtype == "int8")
               and (c.site.onnx_dtype == onnx.TensorProto.FLOAT or stored_in_16_bits(c.site))]
    return float16_while_room(candidates, weights, lambda site: reads_model_input(site, ctx.graph),
                              RECURRENT_INPUT_SHARE, WHY, ctx, "float16_recurrent_inputs")
