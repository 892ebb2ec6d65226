"""`info`: where a model's bytes are, and what each method would save. Reads, never writes."""

from __future__ import annotations

import onnx

from .graph_utils import collect_constants, iter_scopes
from .passes.merge_constants import DEFAULT_MIN_ELEMENTS, candidate_sites, find_duplicate_groups
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
            }
            for s in large
        ],
        "duplicate_groups": [g.to_dict() for g in groups],
        "savings": {
            "shrink": shrink_saves,
        },
    }
