"""A planning rule, data-free: a MatMul weight on the edge onnxruntime 1.32's default session dies on
is stored as DequantizeLinear (`dq`), a form onnxruntime does not fold back into a float16 constant.

The edge (running/default_crash.py, found by the zoo, round 23): a float16 Transpose with perm
[1, 0, 2] read as A by a MatMul whose B is a float16 constant as onnxruntime holds it after folding
(an initializer, or a Cast/Mul chain of constants: the lean, arith and scaled lowerings write one).
onnxruntime 1.32's default session (ORT_ENABLE_ALL, its NchwcTransformer on) dies with signal 11
creating a session of such a graph; torch writes that Transpose after every batch_first LSTM or
GRU. onnxruntime keeps DequantizeLinear where it folds constants (QDQ patterns), so B is computed
there and a default session loads (zoo23 checked `--lowering dq` on arabic_diacritizer_bilstm's
float16 variant; tests/test_crash_edges.py in a child process). Verification's own sessions turn
the NchwcTransformer off and would not see the crash: the plan avoids it, ahead of any measure.

A stage of the planner (planner.py), after rules.lower: only the weights rules.lower gave a form
that folds at load, where the run left the lowering to quant (`--lowering` asked for is kept,
and the report names the edge as before). One scale per output channel (load_memory.kept_scheme,
opset 13), the candidate's own blocks for a 4-bit weight; where no DequantizeLinear fits the
opset the weight keeps its form. The rule is structural, not tied to the onnxruntime installed:
the file is loaded wherever the user runs it. A float32 model, and a graph without the edge, plan
as before (their float MatMul never meets it)."""

from __future__ import annotations

import dataclasses

import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, consumers
from ..lowerings import REGISTRY
from .candidate import Candidate, PlanContext
from .load_memory import kept_scheme

WHY = ("onnxruntime 1.32's default session crashes on a float16 Transpose [1, 0, 2] read as A by this MatMul "
       "with B a float16 constant as folded (signal 11, its NchwcTransformer): dq, which it does not fold")
# rules.lower's lowerings whose weight onnxruntime folds back into a float constant at load
FOLDED = ("lean", "arith", "scaled", "arith_equalized", "scaled_input", "tied")
SWAP = [1, 0, 2]


def _swapped(tensor: gs.Tensor) -> bool:
    """Whether `tensor` is the output of a Transpose with perm [1, 0, 2]."""
    producer = tensor.inputs[0] if tensor.inputs else None
    return producer is not None and producer.op == "Transpose" and list(producer.attrs.get("perm", [])) == SWAP


def _half_readers(site: ConstantSite) -> list[tuple[gs.Node, int]]:
    """The nodes reading `site` as float16: directly (a float16 weight), or behind Casts to float16
    of it (a constant chain onnxruntime folds into a float16 constant)."""
    readers, found = list(consumers(site)), []
    half = site.onnx_dtype == onnx.TensorProto.FLOAT16
    for node, index in readers:
        if node.op == "Cast" and node.outputs:
            out = node.outputs[0]
            if node.attrs.get("to") == onnx.TensorProto.FLOAT16:
                found += [(n, i) for n in out.outputs for i, t in enumerate(n.inputs) if t is out]
        elif half:
            found.append((node, index))
    return found


def on_crash_edge(site: ConstantSite) -> bool:
    """Whether a MatMul reads `site` (as float16) as B and a [1, 0, 2] Transpose's output as A."""
    return any(node.op == "MatMul" and index == 1 and _swapped(node.inputs[0]) for node, index in _half_readers(site))


def _fits(c: Candidate, scheme, opset: int) -> bool:
    dq = REGISTRY["dq"]
    return dq.min_opset(c.options.dtype, scheme.granularity) <= opset and \
        dq.fits(c.site, scheme, c.options.dtype, opset) is None


def avoid_crash_edges(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """The planner's stage (module doc): each weight on the edge whose form folds at load, as `dq`."""
    if ctx.options.lowering != "auto":
        return candidates
    moved = []
    for c in candidates:
        if c.lowering in FOLDED and not c.float16 and on_crash_edge(c.site):
            schemes = [c.scheme, kept_scheme(c.site)] if c.options.four_bit else [kept_scheme(c.site)]
            scheme = next((s for s in schemes if s is not None and _fits(c, s, ctx.opset)), None)
            if scheme is not None:
                c = dataclasses.replace(c, scheme=scheme, lowering="dq", reason=WHY)
        moved.append(c)
    if avoided := [c.name for c in moved if c.reason == WHY]:  # said only where it decided (plans elsewhere as before)
        ctx.details["dq_for_crash_edges"] = avoided
    return moved
