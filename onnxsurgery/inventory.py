"""`info`: where a model's bytes are, and what each method would save. Reads, never writes."""

from __future__ import annotations

import onnx

from .graph_utils import collect_constants, iter_scopes
from .passes.merge_constants import DEFAULT_MIN_ELEMENTS, candidate_sites, find_duplicate_groups
from .quant.options import DEFAULT_MIN_ELEMENTS as QUANT_MIN_ELEMENTS
from .quant.estimates import estimated_bytes
from .quant.options import QuantOptions
from .pipeline import open_workspace

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
               onnx.TensorProto.DOUBLE}


def inventory(model, *, min_bytes: int = 1024, min_elements: int = DEFAULT_MIN_ELEMENTS) -> dict:
    """Constants of at least `min_bytes`, totals, and duplicate groups with what `shrink` saves."""
    ws = open_workspace(model)
    graph = ws.graph
    scopes = list(iter_scopes(graph))
    sites = collect_constants(graph, scopes)
    total = ws.input_bytes
    weight_bytes = sum(s.nbytes for s in sites)
    large = sorted((s for s in sites if s.nbytes >= min_bytes), key=lambda s: -s.nbytes)
    groups = find_duplicate_groups(
        candidate_sites(graph, scopes, min_elements=min_elements, keep=ws.keep)
    )
    shrink_saves = sum(g.bytes_saved for g in groups)
    quant_saves = _quant_estimates(sites, groups, ws.opsets.get("", 1))
    group_of = {id(m.tensor): i for i, g in enumerate(groups) for m in g.members}
    by_dtype: dict[str, int] = {}
    for s in sites:
        key = onnx.TensorProto.DataType.Name(s.onnx_dtype).lower()
        by_dtype[key] = by_dtype.get(key, 0) + s.nbytes
    return {
        "model_bytes": total,
        "weight_bytes": weight_bytes,
        "other_bytes": max(total - weight_bytes, 0),
        "constants": len(sites),
        "subgraphs": len(scopes) - 1,
        "bytes_by_dtype": dict(sorted(by_dtype.items(), key=lambda kv: -kv[1])),
        "large_constants": [
            {
                "name": s.name,
                "shape": list(s.shape),
                "dtype": onnx.TensorProto.DataType.Name(s.onnx_dtype).lower(),
                "bytes": s.nbytes,
                "location": s.location,
                "scope": s.scope.label,
                "read_by": sorted({n.op for n in s.value.outputs}),
                "duplicate_group": group_of.get(id(s.tensor)),  # index into duplicate_groups
            }
            for s in large
        ],
        "duplicate_groups": [g.to_dict() for g in groups],
        # quant merges first, so its figures include what shrink saves
        "savings": {"shrink": shrink_saves, **{k: v + shrink_saves for k, v in quant_saves.items()}},
    }


def _quant_estimates(sites, groups, opset: int) -> dict[str, int]:
    """Bytes `quant` would save with its default (int8), with --dtype int4, and with --fp16,
    after merging: estimated from shapes alone (see quant.estimates.estimated_bytes)."""
    merged_away = {id(m.tensor) for g in groups for m in g.members[1:]}
    schemes = {"quant int8": QuantOptions(), "quant int4": QuantOptions(dtype="int4"),
               "quant --fp16": QuantOptions(fp16=True)}
    est = dict.fromkeys(schemes, 0)
    for site in sites:
        if (id(site.tensor) in merged_away or site.onnx_dtype not in FLOAT_TYPES
                or site.num_elements < QUANT_MIN_ELEMENTS or not site.shape):
            continue
        for method, options in schemes.items():
            if method == "quant --fp16" and site.onnx_dtype != onnx.TensorProto.FLOAT:
                continue
            est[method] += site.nbytes - estimated_bytes(site, options, opset)
    return est
