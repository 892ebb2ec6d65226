"""A stage after the memory rule's (planner.py): a quantized model's own 8-bit weights behind
Cast -> (Sub) -> Mul (weights.already_quantized leaves their scales alone), which onnxruntime folds
into float32 copies at load, rewritten so that they stay 8-bit (quantization/dequantizing.py):
the same operations on the same values.

- A table read by Gather: its rows gathered before the Cast, always where the memory rule is the
  plan's: nothing is folded and only the rows read turn float (all-MiniLM-L6-v2 shipped so: 226 MB
  at session creation -> 131 MB, the float model's 149 MB, CPU time per run 1.00x).
- Any other chain: its Cast becomes DequantizeLinear(q, 1), so the Sub and Mul run at each
  inference (MiniLM, all 36 linears so too: 49 MB, CPU time 1.19x). As the memory rule keeps
  weights (load_memory.kept_in_memory): the largest first, only while the plan's estimate at load
  (gathered rows load_memory.EXTRA_AT_LOAD's -1.4 of their float bytes; a folded chain SHIPPED_FOLDED,
  its integers kept SHIPPED_KEPT, below) is above the float model's. --keep-quantized rewrites every
  chain.

The scale's record says so (`lowering` "dq", its `dtype` still "float": its values are not
changed; a chain's zero point goes with its scale); apply.py rewrites."""

from __future__ import annotations

import onnx

from ...graph_utils import collect_constants
from ...report import human_bytes
from ..dequantizing import Chain, chains_of, gathered, refusal
from .candidate import Candidate, PlanContext
from .load_memory import EXTRA_AT_LOAD, applies as memory_rule_applies, plan_extra
from .weights import ARITH_SCALE, lean_forms

REWRITTEN = "already quantized, rewritten exactly to stay 8-bit at load ({how}): {size} float32 not folded at load"
GATHERED = "rows gathered before Cast -> Mul, at no cost per run"
DEQUANTIZED = ("Cast as DequantizeLinear with scale 1, the Mul run at each inference: the memory rule's estimate "
               "was above the float model's")
ASKED = "Cast as DequantizeLinear with scale 1, the Mul run at each inference: --keep-quantized"
GATHER_SAVES = EXTRA_AT_LOAD[("gather", "Gather")]
# A shipped chain's float copy and its integers kept, per float byte beyond the float model, fitted
# to all-MiniLM-L6-v2 shipped so (peak RSS growth over session creation, onnxruntime 1.32 CPU, one
# thread, medians of 5 alternated fresh processes): float model 148.2 MB, shipped 225.4, tables
# gathered 131.4, and 3 of 36 linears kept too 117.9, so a kept linear saves 1.91 of its bytes
# against its folded chain, and with the tables' -1.4 a folded chain holds +1.18 and kept integers
# -0.73 (1 - 0.25: int8 beside float32). The estimate once took load_memory's ARITH_LEAN (+1.9,
# silero's LSTM weights behind Slice -> Concat, which fold through more copies) and KEPT_SAVES
# (-1.0): it kept 3 linears past the 1.0x line the tables alone meet (0.89x), at 1.03x CPU per run.
SHIPPED_FOLDED, SHIPPED_KEPT = 1.2, -0.75


def dequantize(candidates: list[Candidate], ctx: PlanContext) -> list[Candidate]:
    """The records of scales of 8-bit Cast -> Mul chains given lowering `dq` (module doc); said in `why`."""
    scales = {r.name for r in ctx.records.values() if r.why == ARITH_SCALE}
    asked = ctx.options.keep_quantized
    if not scales or not (asked or memory_rule_applies(ctx.graph, ctx.options)):
        return candidates
    tables, others = [], []
    for site in collect_constants(ctx.graph, ctx.scopes):
        chains = chains_of(site.value) if site.name in scales else []
        if not chains or any(refusal(chain, ctx.opset) for chain in chains):
            continue  # a zero point, or a Cast to float16 before opset 19: left as it is
        held = sum(_float_bytes(chain) for chain in chains)
        rows = all(gathered(chain, site.scope.graph) is not None for chain in chains)
        (tables if rows else others).append((site.name, held))
    extra = plan_extra(lean_forms((c.site, "cast" if c.float16 else c.lowering) for c in candidates))
    extra += sum(GATHER_SAVES * held for _, held in tables) + sum(SHIPPED_FOLDED * held for _, held in others)
    chosen = [(name, held, GATHERED) for name, held in tables]
    for name, held in sorted(others, key=lambda pair: -pair[1]):  # stable: the graph's order among equals
        if not asked and extra <= 0:
            break
        extra += (SHIPPED_KEPT - SHIPPED_FOLDED) * held
        chosen.append((name, held, ASKED if asked else DEQUANTIZED))
    for name, held, how in chosen:
        record = ctx.records[name]
        record.lowering, record.why = "dq", REWRITTEN.format(how=how, size=human_bytes(held))
    return candidates


def _float_bytes(chain: Chain) -> int:
    """The bytes of the float copy onnxruntime would fold the chain into."""
    count = onnx.helper.tensor_dtype_to_np_dtype(chain.cast.attrs["to"]).itemsize
    for n in chain.q.shape:
        count *= int(n)
    return count
