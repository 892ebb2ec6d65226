"""`info`: where a model's bytes are, and what each method would save. Reads, never writes."""

from __future__ import annotations

import numpy as np
import onnx

from .graph_utils import collect_constants, is_sparse, iter_scopes
from .defaults import MERGE_MIN_ELEMENTS
from .opset import may_keep_value_infos
from .passes.base import remove_dead
from .passes.bypass_identity import BypassIdentities
from .pipeline import estimate_pipeline, open_workspace, quant_pipeline, shrink_pipeline
from .quantization.choices.planning import any_weight_to_change, required_opset
from .quantization.options import QuantOptions
from .running.kv_cache import has_kv_cache
from .storage import graphs_everywhere, staging

# `info`'s estimates: each method's pipeline, asked what it would save
QUANT_ESTIMATES = {"quant int8": QuantOptions(), "quant int4": QuantOptions(dtype="int4"),
                   "quant --fp16": QuantOptions(fp16=True)}
_PART_NAMES = {"merge_duplicates": "merge", "half_width": "16-bit storage", "shape_only": "read only by Shape",
               "merge_reshaped": "reshaped copies", "cast_weights": "stored as their Cast"}


def inventory(model, *, min_bytes: int = 1024, min_elements: int = MERGE_MIN_ELEMENTS) -> dict:
    """Constants of at least `min_bytes`, totals, duplicate groups, and what `shrink` (its merge
    and its 16-bit storage) and `quant` would save."""
    ws = open_workspace(model, structure=True)  # written nowhere: a tree ensemble's tables left out
    graph = ws.graph
    scopes = list(iter_scopes(graph))
    sites = collect_constants(graph, scopes)
    total = ws.input_bytes
    weight_bytes = sum(s.nbytes for s in sites)
    large = sorted((s for s in sites if s.nbytes >= min_bytes), key=lambda s: -s.nbytes)
    memo: dict = {}  # quant's merge step is shrink's: the weights are read once
    shrink_steps = estimate_pipeline(graph, shrink_pipeline(min_elements=min_elements, opsets=ws.opsets),
                                     overridable=ws.overridable, memo=memo)
    merge = next(step for step in shrink_steps if step.name == "merge_duplicates")
    groups = merge.details["groups"]
    # quant merges first, so its figures include what shrink's merge saves
    savings = {"shrink": sum(step.bytes_saved for step in shrink_steps)}
    shrink_parts = {_PART_NAMES.get(step.name, step.name): step.bytes_saved for step in shrink_steps}
    group_of = {id(m.tensor): i for i, g in enumerate(groups) for m in g.members}
    by_dtype: dict[str, int] = {}
    for s in sites:
        key = onnx.TensorProto.DataType.Name(s.onnx_dtype).lower()
        by_dtype[key] = by_dtype.get(key, 0) + s.nbytes
    found = {
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
                "sparse": is_sparse(s.tensor),  # bytes: its values and indices as stored, not its dense size
                "scope": s.scope.label,
                "read_by": sorted({n.op for n in s.value.outputs}),
                "duplicate_group": group_of.get(id(s.tensor)),  # index into duplicate_groups
            }
            for s in large
        ],
        "duplicate_groups": [g.to_dict() for g in groups],
        "savings": savings,
        "shrink_parts": shrink_parts,  # what each of shrink's steps adds to savings["shrink"]
    }
    # asked of the graph as quant asks it, before its passes (api/quant_steps.needed_opset)
    upgrades = {method: opset for method, options in QUANT_ESTIMATES.items()
                if (opset := _needed_opset(ws, options)) > ws.opsets.get("", 1)}
    rewritten = [method for method, options in QUANT_ESTIMATES.items()
                 if any_weight_to_change(ws.graph, options, ws.overridable)]
    # quant bypasses Identity nodes in front of weights before it plans (its first step): its estimates
    # must see the readers its plan sees (rxnmap: 8 MatMuls behind Identities each, kept int8 under
    # --dtype int4; through the Identities info predicted 4-bit, 12.8 MB against the 21.2 MB written).
    # The graph is info's own copy in memory, nothing is written; the figures above are the file's as read,
    # and taken first: the bypass removes Constant nodes the duplicate groups name
    BypassIdentities().apply(graph, overridable=ws.overridable)
    remove_dead(graph)
    for method, options in QUANT_ESTIMATES.items():
        steps = estimate_pipeline(graph, quant_pipeline(options, opsets=ws.opsets), overridable=ws.overridable,
                                  memo=memo)
        savings[method] = sum(step.bytes_saved for step in steps)
    # opset.upgrade_opset drops every value info where it cannot keep them (isbnx_det's int4: 0.7 MB of
    # 10.3 before it kept them); where it may, they are kept wherever strict inference agrees with them
    kept = ws.template is not None and may_keep_value_infos(ws.template)
    dropped = _value_info_bytes(ws.template) if upgrades and not kept else 0
    for method in upgrades:
        savings[method] += dropped
    if upgrades:
        found["opset_upgrades"] = {method: {"opset": opset, "value_info_bytes": dropped}
                                   for method, opset in upgrades.items()}
    # a quant that changes a weight writes the graph through gs, which keeps no node's doc_string or
    # metadata_props and no value info's metadata (terrain_diffusion, a torch dynamo export: 3.0 MB of
    # stack traces and fx names in 45 MB, so info predicted 14.7 MB where quant wrote 12.1 MB)
    notes = _annotation_bytes(ws.template)
    for method in rewritten:
        savings[method] += notes[0] + (0 if method in upgrades and not kept else notes[1])
    if notes != (0, 0):
        found["annotation_bytes"] = {"nodes": notes[0], "value_infos": notes[1]}
    # quant writes a KV-cache decoder's weights to a data file, each tensor of 1 KB or more at a
    # page-aligned offset (api/quantizing.py): half a page lost on average (annalog_decoder: 169
    # tensors, 410 KB of 3.22 MB; info predicted 2.62 MB, 1.23x). A file that already keeps its data
    # apart counts its own layout in model_bytes.
    if rewritten and has_kv_cache(graph) and not ws.has_external_data_files:
        padding = staging.EXTERNAL_DATA_ALIGN // 2 * sum(_data_file_tensors(s) for s in sites)
        for method in rewritten:
            savings[method] -= padding
        found["data_file_alignment_bytes"] = padding
    return found


def _data_file_tensors(site) -> int:
    """How many tensors of 1 KB or more a constant becomes in quant's data file: itself, and where
    it is large enough to quantize, two scale vectors (scale, zero point or input scale) where a
    dimension has 256 or more channels (256 float32 = 1 KB)."""
    if site.nbytes < staging.EXTERNAL_DATA_THRESHOLD:
        return 0
    quantized = len(site.shape) >= 2 and int(np.prod(site.shape)) >= QuantOptions().min_elements
    return 1 + (2 if quantized and max(site.shape) * 4 >= staging.EXTERNAL_DATA_THRESHOLD else 0)


def _needed_opset(ws, options: QuantOptions) -> int:
    """The opset `quant` with `options` upgrades the model to (1: none), as quant_steps.needed_opset
    asks it of a workspace with no plan given."""
    if not any_weight_to_change(ws.graph, options, ws.overridable):
        return 1
    return required_opset(options, ws.graph)


def _value_info_bytes(model: onnx.ModelProto | None) -> int:
    """The bytes the model's value infos take in its file, in every graph: each one's field tag
    (one byte), its length as a varint and itself."""
    if model is None:
        return 0
    return sum(_field_bytes(v.ByteSize()) for g in graphs_everywhere(model.graph) for v in g.value_info)


def _field_bytes(size: int) -> int:
    """A length-delimited field's bytes in its message: the tag (one byte), the length as a varint, itself."""
    return 1 + (max(size.bit_length(), 1) + 6) // 7 + size


def _annotation_bytes(model: onnx.ModelProto | None) -> tuple[int, int]:
    """(nodes' doc_strings and metadata_props, value infos' doc_strings and metadata_props and
    repeats) in bytes, in every graph: what a graph written through gs no longer holds. gs writes one
    value info a name: isbnx_det declares each of its 510 values about five times (2,595 value infos),
    so that its int8 result was predicted 1.11x as large as written."""
    if model is None:
        return 0, 0
    nodes = infos = 0
    for g in graphs_everywhere(model.graph):
        for n in g.node:
            nodes += sum(_field_bytes(p.ByteSize()) for p in n.metadata_props)
            nodes += _field_bytes(len(n.doc_string.encode())) if n.doc_string else 0
        seen = set()
        for v in g.value_info:
            if v.name in seen:
                infos += _field_bytes(v.ByteSize())
                continue
            seen.add(v.name)
            infos += sum(_field_bytes(p.ByteSize()) for p in v.metadata_props)
            infos += _field_bytes(len(v.doc_string.encode())) if v.doc_string else 0
    return nodes, infos
