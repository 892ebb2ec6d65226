"""Weight-only quantization: large float constants become small integers plus scales, turned
back into float in the graph, so every consumer sees a tensor of the original dtype and shape.

Before: W (float32/float16/bfloat16/float64, at least `min_elements` elements) -> consumers.
After, with the `dq` lowering:    Wq, scale[, zero_point] -> DequantizeLinear [-> Cast] -> consumers
         with the `arith` lowering: Wq -> Cast -> [Sub zp] -> Mul scale [-> Reshape] [-> Cast] -> consumers
4-bit values under `arith` are stored two per uint8 and unpacked with BitShift/Concat/Reshape
(opset 11 on; Cast/Div/Mul/Sub in int32 before), so int4 works on models below opset 21.
onnxruntime constant-folds the `arith` chain when the session starts (no run-time cost, float
weights in memory); it keeps DequantizeLinear, so `dq` runs at every inference except where it
fuses DQ -> MatMul into MatMulNBits. Measured with onnxruntime 1.31 on six 1024x1024 MatMuls
(opset 21), latency relative to float32: int4 blocks as dq 0.26x at 1 token, 1.03x at 128;
int8 blocks as dq 0.30x and 1.47x; arith about 1.0x at both. `auto` therefore picks `dq` only
for a blockwise 4-bit weight read by a single MatMul at opset >= 21, and `arith` elsewhere,
except for an embedding table read only by Gather along axis 0 (8-bit; 4-bit from opset 11,
packed row by row): there `auto` picks `gather`, which gathers the integer rows (and their
scales and zero points) first and dequantizes only those, at run time. The table then stays
8- or 4-bit in the session instead of being folded into a float copy (BERT's 30522x512 table:
15.6 MB at int8 instead of 62.5 MB, plus the four float intermediates folding holds at load),
and the values are bit-identical: the same (q - zp) * scale per element.

Axis: follows the consumer. MatMul B [K, N]: channels along N, blocks along K (the reduction
axis); Gemm B likewise, honouring transB; Conv W [M, C, ...]: channels along M, blocks along C;
ConvTranspose W [C, M, ...]: channels along M; Gather data: one scale per row. Otherwise axis 0
for channels and the last axis for blocks.

Rounding: `balanced` (each group's rounding errors sum to zero, quantization/rounding.py) for weights read
only by Conv/ConvTranspose under `auto`, round-to-nearest elsewhere. Measured over four
rounding draws (scales jittered by up to 2%): PP-OCRv4 rec's median output error 0.066 -> 0.038
and argmax agreement 98.1% -> 98.8%, because conv inputs are non-negative activations that turn
a block's error sum into an output shift; det and the encoder sample unchanged; BERT's MatMuls,
which read LayerNorm outputs, 7% worse, hence Conv only.

Default: int8, asymmetric, blocks of 32, chosen by measurement (docs/quantization.md). Blocks
must tile their axis: a nearby divisor is used when the block size does not divide it, else one
scale per channel (`choose_scheme`). Graph outputs and overridable inputs stay float.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import onnx_graphsurgeon as gs

from ..errors import UnsupportedModelError
from ..graph_utils import collect_constants, iter_scopes
from ..quantization.apply import apply_plan
from ..quantization.calibration import Calibration
from ..quantization.estimates import estimated_bytes
from ..quantization.options import FLOAT_TYPES, QuantOptions, dq_min_opset
from ..quantization.plan import Plan, WeightPlan
from ..quantization.plan_edits import derive_records
from ..quantization.quantize import remembering
from ..quantization.held_roundings import HeldRoundings, hold_budget, outgrows_cache
from ..quantization.choices.plan_check import check_plan
from ..quantization.choices import int4_saving
from ..quantization.choices.planner import plan_weights
from ..quantization.choices.planning import planning_for
from ..report import PassReport
from .base import Estimate, PassBase


@dataclass(frozen=True, eq=False)
class QuantizeWeights(PassBase):
    """Quantize float weights in place (all scopes), as a pipeline step (passes/base.py): plan
    (quantization/choices/planner.py), then apply the plan (quantization/apply.py). `opset` None: the graph's.
    With `calibration`, the integer roundings of the weights whose consumers it supports use
    GPTQ (gptq.py) instead of `rounding`. With `activations` (the inputs each weight's readers
    see, e.g. from the verification inputs), auto's choice between the lean and the accurate
    lowering is measured in the layers' outputs. `records`: a plan read from a file (quant
    --plan), or a Plan the budget made (api/budget.py), applied instead of the options' plan,
    after a check against the graph. The
    report's details list the records applied (`weights`). UnsupportedModelError where the
    `dq` lowering is asked for at an opset that cannot express the scheme."""

    options: QuantOptions
    opset: int | None = None
    calibration: Calibration | None = None
    activations: Calibration | None = None
    records: tuple[WeightPlan, ...] | Plan | None = None
    store: object = None  # lazy.ExternalFiles that quantized payloads are moved to as they accumulate
    name = "quantize"
    needs_cleanup = True  # constants merged away and Identity nodes bypassed must not count

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        """From shapes alone (quantization.estimates.estimated_bytes): the weights the pass would take,
        minus the bytes each would store. Weights the pass skips for their values (NaN or Inf;
        beyond float16's range where TensorRT needs float16) are counted; auto's
        lean-or-accurate choice is assumed lean."""
        opset = self.opset or graph.opset
        planning = planning_for(graph)  # the answers the plan and the other estimates ask too
        scopes = list(iter_scopes(graph))

        def stored(options: QuantOptions) -> tuple[int, int]:  # (bytes before, after) of the weights it takes
            sites = [site for site in collect_constants(graph, scopes) if site.onnx_dtype in FLOAT_TYPES
                     and id(site.tensor) not in removed
                     and planning.refusal(site, scopes, options, overridable, qdq=False) is None]
            return sum(s.nbytes for s in sites), sum(estimated_bytes(s, options, opset, planning) for s in sites)

        before, after = stored(self.options)
        if int4_saving.applies(self.options, None):  # the plan's rule, in these estimates (choices/int4_saving.py)
            before8, after8 = stored(int4_saving.int8_options(self.options))
            fixed = int4_saving.other_bytes(graph) + sum(  # the weights neither takes stay as they are
                s.nbytes for s in collect_constants(graph, scopes) if s.onnx_dtype in FLOAT_TYPES) - before8
            if after8 + fixed and (after8 - after) / (after8 + fixed) < int4_saving.SAVING:
                before, after = before8, after8
        return Estimate(self.name, before - after)

    def plan(self, graph: gs.Graph, *, overridable: frozenset[str], held: HeldRoundings | None = None) -> Plan:
        """What `apply` will do, the graph unchanged (`held`: apply's, for the measurements' roundings)."""
        opset = self.opset or graph.opset
        if self.records is not None:  # fields an edit of the dtype left stale derived again (plan_edits.py)
            made = self.records if isinstance(self.records, Plan) else None  # the budget's, with its figures
            records = derive_records(graph, list(made.weights if made else self.records), opset, overridable,
                                     self.options)
            plan = dataclasses.replace(made, weights=records) if made else records
            return check_plan(graph, plan, opset, overridable, self.options.target, self.calibration)
        options = self.options
        # a model with no float constant has nothing to lower: a copy, not a refusal (luscinia's
        # opset-9 tree ensemble under --target tensorrt)
        if options.lowering == "dq" and not options.stays_float and opset < dq_min_opset(options) \
                and any(site.onnx_dtype in FLOAT_TYPES for site in collect_constants(graph)):
            raise UnsupportedModelError(
                f"--lowering dq with {options.dtype}/{options.granularity} needs opset "
                f"{dq_min_opset(options)}; this model is opset {opset}")
        return plan_weights(graph, options, opset, overridable, self.activations, self.calibration, held)

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        # what the plan measured of a weight (4-bit clipping picks, weight errors) is not
        # measured again when it is applied (quantize.remembering)
        # and the plan's rounding of a weight on its read is the pass's (held_roundings.HeldRoundings:
        # weights larger than the page cache may keep; none under GPTQ, which rounds its own way)
        scopes = list(iter_scopes(graph))
        weights = sum(s.nbytes for s in collect_constants(graph, scopes) if s.onnx_dtype in FLOAT_TYPES)
        budget = hold_budget(weights, self.options.four_bit) if self.calibration is None else 0
        with remembering(), HeldRoundings(budget, getattr(self.store, "spill_folder", None),
                                          outgrown=outgrows_cache(weights)) as held:
            plan = self.plan(graph, overridable=overridable, held=held)
            report = apply_plan(graph, plan, self.calibration, self.store, held)
        report.details["weights"] = plan.to_dict()["weights"]  # the records applied, as --dry-run lists them
        report.details["plan_notes"] = list(plan.notes)
        return report
