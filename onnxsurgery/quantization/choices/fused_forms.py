"""Weights of onnxruntime's fused (com.microsoft) ops and tables looked up through another op:
which stay float, and what `--dtype int4` and `--keep-quantized` store them as (issue 37).

onnxruntime's transformer optimizer fuses a BERT into EmbedLayerNormalization (word, position and
segment tables), Attention (a packed QKV weight), FusedMatMul and FusedGemm; a bfloat16
checkpoint's export reads its tables through a Cast. The default int8 takes each its lean form
(weights.lean_scheme). Where weights stay quantized (4-bit, --keep-quantized), DequantizeLinear
before these readers is not fused and runs at every inference, so instead:

- a looked-up table (the ELN word table, a table read by Gather through a Cast): `embed_rows`,
  integer rows gathered for the ids, in the bits asked for (4-bit rows under int4). Before, it
  stayed float: all-MiniLM-L6-v2 fused, int4 54.6 MB against int8's 23.6; bfloat16, 30.9 MB.
- under --dtype int4 with the forms left to quant (int4_paths.adapts): a weight read only by
  com.microsoft ops takes the int8 default's lean form, as int4_paths does for weights without a
  fast 4-bit path: int8 with its scale before Attention / after FusedMatMul (`scaled`, one float
  copy at load), else int8 per channel DequantizeLinear. Its 4-bit DequantizeLinear before
  Attention ran at every inference. Fused all-MiniLM-L6-v2 under int4, latency against the fused
  original (interleaved, two shared cores): 1.56-1.80x before (table float, Attention 4-bit);
  the table's rows gathered, Attention still 4-bit: 1.22-1.27x; Attention int8 too: 0.71-0.78x.
"""

from __future__ import annotations

import numpy as np
import onnx

from ...graph_utils import ConstantSite, consumers
from ..lowerings.embed_rows import READER as WORD_TABLE_READER, gathers_behind_cast, looked_up
from ..lowerings.scaled import scale_axis
from ..lowerings.weight_readers import through_casts
from ..options import QuantOptions
from .candidate import Form, form
from .int4_paths import adapts

CONTRIB_DOMAIN = "com.microsoft"
# EmbedLayerNormalization looks rows of its word, position and segment tables (inputs 2-4) up
# itself. DequantizeLinear before it stays in the graph and dequantizes the whole table at every
# run (fused MiniLM, word table 30522x384: latency 2.3-3.3x, peak memory after a run 1.09x the
# float model's), the arith chain folds two float copies at load (1.40x). The word table takes
# `embed_rows` (its rows gathered first); the other tables (positions: 512 rows; segments: 2)
# are left float unless --include names them (`table_refusal`).
CONTRIB_TABLES = {WORD_TABLE_READER: (2, 3, 4)}


def contrib_weight(site: ConstantSite) -> bool:
    """A float32 weight read only by com.microsoft ops (lean form where no scale can follow its
    readers: DequantizeLinear, like recurrent weights)."""
    readers = consumers(site)
    return (site.onnx_dtype == onnx.TensorProto.FLOAT and bool(readers)
            and all(n.domain == CONTRIB_DOMAIN for n, _ in readers))


def rows_gathered(site: ConstantSite, options: QuantOptions) -> bool:
    """Whether `embed_rows` takes `site` under `options`: a looked-up table, the lowering left to
    quant, rows of even length where 4-bit."""
    even = int(np.prod(site.shape[1:] or [1])) % 2 == 0
    return options.lowering == "auto" and looked_up(site) and (even or not options.four_bit)


def table_refusal(site: ConstantSite, options: QuantOptions) -> str | None:
    """Why `site` stays float: a table a fused embedding op looks rows up in (CONTRIB_TABLES)
    that `embed_rows` does not take, or, where weights stay quantized (DequantizeLinear), a table
    read by Gather through a Cast that it does not take (MiniLM with bfloat16 weights,
    --keep-quantized: 12.7x latency with the word table dequantized whole at every run)."""
    if rows_gathered(site, options):
        return None
    ops = sorted({n.op for n, i in consumers(site) if i in CONTRIB_TABLES.get(n.op, ())})
    if ops:
        return f"a lookup table of {', '.join(ops)}: no lowering keeps it lean here (--include NAME quantizes it)"
    behind = through_casts(site)
    if options.stays_quantized and behind and all(n.op == "Gather" for n, _ in behind):
        return "a table read by Gather through a Cast: DequantizeLinear would dequantize all of it at every run"
    return None


def fused_form(site: ConstantSite, options: QuantOptions) -> Form | None:
    """The form of `site` where weights stay quantized (module docstring), with the reason said
    in the plan; None where this module has no rule for it."""
    if options.stays_quantized and rows_gathered(site, options):
        reader = "Gather through a Cast" if gathers_behind_cast(site) is not None else WORD_TABLE_READER
        return form(options, reason=(
            f"{options.dtype} rows gathered for the ids, then dequantized (embed_rows): DequantizeLinear before "
            f"{reader} would dequantize all of it at every run"))
    if not (adapts(options) and contrib_weight(site) and site.shape) or looked_up(site):
        return None
    eight_bit = "uint8" if options.dtype.startswith("u") else "int8"
    ops = "/".join(sorted({n.op for n, _ in consumers(site)}))
    slow = (f"not 4-bit: onnxruntime has no 4-bit {ops}, and a 4-bit DequantizeLinear before it runs at every "
            "inference (fused all-MiniLM-L6-v2, Attention's: 1.25x latency against 0.75x)")
    if scale_axis(site) is not None:
        return form(options, dtype="int8", lowering="scaled", reason=(
            f"int8, the default's lean form (scale on the reader's input or output, float at load), {slow}"))
    return form(options, dtype=eight_bit, lowering="dq", granularity="channel", reason=(
        f"{eight_bit} per channel DequantizeLinear, the default's form for it, {slow}"))
