"""A stage after the memory rule's (planner.py): a quantized model's own 8-bit weights behind
Cast -> (Sub) -> Mul (weights.already_quantized leaves their scales alone) rewritten as
DequantizeLinear, or gathered as rows before the Cast where Gather reads them
(quantization/dequantizing.py), where the memory rule is the plan's: onnxruntime folds the chain
into a float32 copy at load, held beside nothing it saves (load_memory.ARITH_LEAN: +1.9 of its
float bytes beyond the float model), and the rewrite computes the same values from the same
integers. Its price: each DequantizeLinear runs at every inference. The scale's record says so
(`lowering` "dq", its `dtype` still "float": its values are not changed); apply.py rewrites."""

from __future__ import annotations

import onnx

from ...graph_utils import collect_constants
from ...report import human_bytes
from ..dequantizing import chains_of, gathered, refusal
from .candidate import Candidate, PlanContext
from .load_memory import applies as memory_rule_applies
from .weights import ARITH_SCALE

REWRITTEN = ("already quantized, rewritten exactly ({how}; the memory rule: onnxruntime would fold Cast -> Mul "
             "into a float32 copy at load, {size}, where the 8-bit integers stay 8-bit)")
GATHERED = "rows gathered before Cast -> Mul"
DEQUANTIZED = "Cast as DequantizeLinear with scale 1, the Mul run at each inference"


def dequantize(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """The records of scales of 8-bit Cast -> Mul chains given lowering `dq` where the memory
    rule applies (or --keep-quantized asks) and every chain the scale is read in can be rewritten;
    said in `why`."""
    scales = [r for r in ctx.records.values() if r.why == ARITH_SCALE]
    if not scales or not (memory_rule_applies(ctx.graph, ctx.options) or ctx.options.keep_quantized):
        return candidates
    names = {r.name for r in scales}
    for site in collect_constants(ctx.graph, ctx.scopes):
        if site.name not in names:
            continue
        chains = chains_of(site.value)
        if not chains or any(refusal(chain, ctx.opset) for chain in chains):
            continue  # a zero point, or a Cast to float16 before opset 19: left as it is
        record = ctx.records[site.name]
        how = GATHERED if all(gathered(chain, site.scope.graph) is not None for chain in chains) else DEQUANTIZED
        size = human_bytes(sum(_float_bytes(chain) for chain in chains))
        record.lowering, record.why = "dq", REWRITTEN.format(how=how, size=size)
    return candidates


def _float_bytes(chain) -> int:
    """The bytes of the float copy onnxruntime would fold the chain into."""
    count = onnx.helper.tensor_dtype_to_np_dtype(chain.cast.attrs["to"]).itemsize
    for n in chain.q.shape:
        count *= int(n)
    return count
