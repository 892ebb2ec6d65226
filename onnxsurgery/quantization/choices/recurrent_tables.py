"""A stage of the int8 default (planner.py, after rules.lower): an embedding table whose gathered
rows a recurrent layer (GRU, LSTM, RNN) reads as its input sequence is stored as float16 (a Cast
back, folded at load) instead of int8 rows gathered and dequantized, while the byte each element
costs over int8 stays within RECURRENT_TABLE_SHARE of the int8 bytes of all the weights quantized.

Why, from the graph alone: such a table's row is the whole of a token's input to the recurrence,
the same rounding each time the token recurs, and whatever it moves in the hidden state is carried
into every later step; the recurrent op's own weights cannot take a scale after them (they stay
DequantizeLinear per channel, as onnx-shrink-ray's are), so the table is the one weight whose form
differs from the peer's (which leaves Gather tables float).

Measured (issue 55, ahead16; worst relative L2 on the zoo's tune / report sets, `bench/paired_draws.py`
over the shipped model and 12 or 6 draws of its weights, medians before -> after, onnx-shrink-ray
per-channel beside): g2p_en_encoder (29x256, read by a GRU) 0.00570 / 0.00577 -> 0.00511 / 0.00534
(shrink-ray 0.00511 / 0.00535; before behind it on 0 of 13 draws either set, after on 4 and 10 of 13
level or ahead, better than before on all 13), g2p_en_decoder (74x256) 0.01291 / 0.01263 -> 0.01187 /
0.01186 and romanizer_encoder (160x256, two GRUs) 0.00512 / 0.00520 -> 0.00503 / 0.00511, both better
on 7 of 7 draws on both sets. Not for other readers: the same swap on tables read by a Conv
(slovorez_morphemes: report 0.00527 -> 0.00492 but tune 0.00426 -> 0.00440, worse on 6 of 7 draws;
deepcut_thai: tune 0.00238 -> 0.00257) is no rule.

A recurrence exported one step at a time has no recurrent op: romanizer_decoder's GRU is a Gemm of
the gathered rows cut into three gates, each added to the state's own Gemm before its Sigmoid or
Tanh, the state a graph input and output that the caller carries (unrolled_gates reads that shape).
Measured (ahead17, 7 paired draws; the memory rule then keeps weight_hh_l0 as DequantizeLinear, so
both changes together, medians before -> after, onnx-shrink-ray beside): tune 0.00299 -> 0.00277,
report 0.00306 -> 0.00286 (0.00311 / 0.00317), better on 7 and 6 of 7 draws; 16 fresh
sentences at seeds 2000 / 3000 / 4000, worst 0.00593 / 0.00593 / 0.00589 -> 0.00473 / 0.00493 /
0.00481; file 1,136,754 -> 1,168,563 B (shrink-ray 1,134,223), at load 0.925x -> 0.935x the
float model's."""

from __future__ import annotations

import dataclasses

import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, consumers
from .candidate import Candidate, PlanContext
from .weights import stored_in_16_bits

RECURRENT_TABLE_SHARE = 0.1
RECURRENT_OPS = ("GRU", "LSTM", "RNN")
# what may stand between the Gather and the recurrent op's input: moves of the rows, no arithmetic
LAYOUT_OPS = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Cast", "Dropout")
MAX_HOPS = 4
# an unrolled cell (unrolled_gates): its input projection, and the ops that cut its output into gates
PROJECTION_OPS = ("Gemm", "MatMul")
GATE_OPS = ("Slice", "Split", "Add", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Cast")
UNROLLED = "a GRU or LSTM cell unrolled into Gemm gates"
WHY = ("float16: an embedding table whose rows a recurrent layer ({op}) reads as its input: int8 rows "
       "would carry the same rounding into every step's state (choices/recurrent_tables.py)")


def recurrent_reader(site: ConstantSite) -> str | None:
    """The recurrent op that reads `site`'s gathered rows as its input sequence (input 0), through
    layout ops only (LAYOUT_OPS, at most MAX_HOPS), or UNROLLED where the rows are the input of
    an unrolled cell's gate projection (unrolled_gates), or None."""
    front = [n for n, i in consumers(site) if n.op == "Gather" and i == 0]
    for _ in range(MAX_HOPS + 1):
        nxt = []
        for node in front:
            for out in node.outputs:
                for reader in out.outputs:
                    if reader.op in RECURRENT_OPS and reader.inputs and reader.inputs[0] is out:
                        return reader.op
                    if reader.op in PROJECTION_OPS and reader.inputs and reader.inputs[0] is out \
                            and unrolled_gates(reader):
                        return UNROLLED
                    if reader.op in LAYOUT_OPS and reader.inputs and reader.inputs[0] is out:
                        nxt.append(reader)
        front = nxt
    return None


def unrolled_gates(projection) -> bool:
    """Whether `projection` (a Gemm or MatMul whose B is a constant) is a recurrent cell's input
    projection unrolled into plain ops, as PyTorch exports a GRUCell or LSTMCell, or a GRU run one
    step at a time: its output, cut into gates (GATE_OPS), reaches both a Sigmoid and a Tanh, and at
    least one gate is added to another projection's (the state's: Add(x W + b, h U + c) before its
    activation). A gated activation of one projection (tanh(x W) * sigmoid(x V)) has no such Add."""
    if len(projection.inputs) < 2 or not isinstance(projection.inputs[1], gs.Constant):
        return False
    seen, reached, added = {id(projection)}, set(), False
    front = [projection]
    for _ in range(MAX_HOPS + 1):
        nxt = []
        for node in front:
            for out in node.outputs:
                for reader in out.outputs:
                    if id(reader) in seen:
                        continue
                    seen.add(id(reader))
                    if reader.op in ("Sigmoid", "Tanh"):
                        reached.add(reader.op)
                    elif reader.op in GATE_OPS:
                        if reader.op == "Add" and _from_projection(reader, out):
                            added = True
                        nxt.append(reader)
        front = nxt
    return added and reached == {"Sigmoid", "Tanh"}


def _from_projection(add, mine) -> bool:
    """Whether `add`'s other operand (not `mine`) comes from a Gemm or MatMul through gate cuts."""
    for t in add.inputs:
        for _ in range(MAX_HOPS + 1):
            if t is mine or not t.inputs:
                break
            node = t.inputs[0]
            if node.op in PROJECTION_OPS:
                return True
            if node.op not in GATE_OPS or node.op == "Add" or not node.inputs:
                break
            t = node.inputs[0]
    return False


def keep_recurrent_tables(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """The stage (module docstring): the int8 default's gathered float32 tables read by a
    recurrent op, float16, smallest first while they fit the share (a 16-bit table is left in its
    16 bits: records.float16_record)."""
    if not ctx.options.lean_default:
        return candidates
    tables = [c for c in candidates if c.lowering == "gather" and not c.float16 and c.options.lean_default
              and (c.site.onnx_dtype == onnx.TensorProto.FLOAT or stored_in_16_bits(c.site))]
    return float16_while_room(candidates, tables, recurrent_reader, RECURRENT_TABLE_SHARE, WHY, ctx,
                              "float16_recurrent_tables")


def float16_while_room(candidates: list[Candidate], pool: list[Candidate], reader, share: float, why: str,
                       ctx: PlanContext, detail: str) -> list[Candidate]:
    """`candidates` with those of `pool` whose `reader(site)` names an op float16, smallest first while
    their elements fit `share` of all the candidates' (their int8 bytes); `why` formatted with the op,
    the names listed in ctx.details[`detail`]. Shared by this stage and recurrent_inputs.py."""
    room = share * sum(c.site.num_elements for c in candidates)  # int8 bytes
    chosen: dict[str, str] = {}
    for c in sorted(pool, key=lambda c: c.site.num_elements):
        op = reader(c.site)
        if op is not None and c.site.num_elements <= room:
            chosen[c.name] = why.format(op=op)
            room -= c.site.num_elements
    if chosen:
        ctx.details[detail] = sorted(chosen)
    return [dataclasses.replace(c, float16=True, why=chosen[c.name]) if c.name in chosen else c for c in candidates]
