"""The passes on a gs.Graph, for scripts that edit graphs with onnx-graphsurgeon (before a
TensorRT build, say). Each pass edits the graph in place and returns a PassReport; none
touches graph inputs or outputs, nor an overridable initializer (a constant listed among the
graph's inputs, where `import_graph` keeps them and gs's own import drops them). `finish`
cleans up, sorts and exports once, at the end:

    graph = onnxsurgery.import_graph("model.onnx")
    graph.fold_constants()
    onnxsurgery.merge_duplicate_constants(graph)
    onnxsurgery.quantize_weights(graph)
    graph.fold_constants(should_exclude_node=onnxsurgery.keeps_weights_small)
    onnxsurgery.save_model(onnxsurgery.finish(graph), "small.onnx")

The same steps as data (what the CLI runs): `run_pipeline(graph, quant_pipeline(QuantRequest().resolve()))`,
and `estimate_pipeline` for what they would save, the graph unchanged.

`constants_to_npy(graph, "model.onnx")` moves constants out to .npy files for the model you
then save there, and `embed_npy(graph, "model.onnx")` puts them back.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from .errors import UnsupportedModelError
from .graph_names import make_names_unique, overridable_initializers
from .storage.io import import_onnx, inputs_with_defaults, load_model
from .storage.npy import default_npy_dir, load_feeds, manifest_path, write_arrays, write_manifest
from .passes.bypass_identity import BypassIdentities
from .passes.embed import EmbedInputs
from .passes.externalize import externalize
from .passes.base import PassManager, as_function, remove_dead
from .passes.merge_constants import MergeDuplicates
from .passes.merge_reshaped import MergeReshaped
from .passes.merge_transposed import MergeTransposed
from .passes.narrow_types import Narrow
from .passes.shape_only import FoldShapeOnly
from .quantization.request import QuantRequest
from .quantization.choices.planning import required_opset
from .passes.quantize_weights import QuantizeWeights
from .report import PassReport

# The passes as the functions scripts call, each its class run on the graph (passes.base.as_function):
# `merge_duplicate_constants(graph, min_elements=...)` is `MergeDuplicates(min_elements=...)(graph)`.
merge_duplicate_constants = as_function(MergeDuplicates)
merge_transposed_constants = as_function(MergeTransposed)
merge_reshaped_constants = as_function(MergeReshaped)
fold_shape_only_constants = as_function(FoldShapeOnly)
narrow_constants = as_function(Narrow)

# Stored narrower than the float32 they stand for: what dequantization or a Cast widens.
_NARROW_STORAGE = (np.int8, np.uint8, np.float16)
_MIN_WEIGHT_ELEMENTS = 16  # smaller constants (zero points, shapes) may fold freely


def import_graph(source: str | os.PathLike | onnx.ModelProto) -> gs.Graph:
    """A gs.Graph of the model (a path, external data read in, or a ModelProto), ready for the
    passes: tensor names unique across scopes, attributes gs cannot import carried through, and
    overridable initializers kept among `graph.inputs` as constants (gs drops them, so a script
    could no longer tell them from weights)."""
    model = load_model(source)
    graph = import_onnx(model)
    make_names_unique(graph)
    defaults = inputs_with_defaults(model)
    if defaults:
        constants = {t.name: t for t in graph.tensors().values() if isinstance(t, gs.Constant) and t.name in defaults}
        listed = {t.name: t for t in graph.inputs}
        graph.inputs = [listed.get(i.name) or constants[i.name] for i in model.graph.input
                        if i.name in listed or i.name in constants]
    return graph


def quantize_weights(graph: gs.Graph, **options) -> PassReport:
    """`quant`'s weight quantization on a gs.Graph, in place: `options` as QuantRequest's fields
    (dtype, granularity, block_size, keep_quantized, ...; OptionError, a ValueError, for an
    unknown option or choice, or options that contradict each other). Identity
    nodes in front of weights are bypassed first, so that the quantizer sees their readers.
    The graph's opset must already be what the scheme needs (`quant_file` upgrades files; here
    UnsupportedModelError says which opset). Not verified: compare the result yourself
    (`onnxsurgery.compare`). With no model inputs to run, the choices `quant_file` measures in
    each layer's output (lean or accurate, symmetric or not) are measured in the weights."""
    quant_options = QuantRequest.of(**options).resolve()
    needed = required_opset(quant_options)
    if graph.opset < needed:
        raise UnsupportedModelError(f"this scheme needs opset {needed}; the graph is opset {graph.opset}: "
                                    "upgrade the model first (onnx.version_converter), or use quant_file, which does")
    bypassed, report = PassManager((BypassIdentities(), QuantizeWeights(quant_options, graph.opset))).run(graph)
    report.details["identities_bypassed"] = bypassed.changed
    return report


def keeps_weights_small(node: gs.Node) -> bool:
    """For gs's `fold_constants(should_exclude_node=...)`: True for a node that widens a stored
    8-bit, 4-bit (packed in bytes) or float16 weight back to float. Folding such a node would
    store its float32 result in the file and undo the compression; excluded, the node stays and
    everything after it is no longer constant, so nothing downstream folds either. onnxruntime
    folds the same nodes at session creation, so what runs is unchanged."""
    for t in node.inputs:
        if isinstance(t, gs.Constant) and t.dtype in _NARROW_STORAGE:
            if int(np.prod(t.shape, dtype=np.int64)) >= _MIN_WEIGHT_ELEMENTS:
                return True
    return False


def constants_to_npy(graph: gs.Graph, model_path: str | os.PathLike, *, npy_dir: str | os.PathLike | None = None,
                     min_bytes: int | None = None, names: tuple[str, ...] = (),
                     ops: tuple[str, ...] = ()) -> PassReport:
    """`npy` on a gs.Graph, in place: the selected constants (default: those read more than
    once; or at least `min_bytes`, or matched by `names` / `ops` globs) become main-graph inputs
    of the same names, and their arrays .npy files in `npy_dir` (default: `<model>.npy/` beside
    `model_path`), with the checked manifest that `onnxsurgery run`, `npy.load_feeds` and
    `embed_npy` read. Save the graph to `model_path` afterwards (`finish`, `save_model`).
    Overridable initializers, graph outputs, sparse and string tensors stay."""
    remove_dead(graph)  # constants merged away must not be written out
    report, arrays = externalize(graph, min_bytes=min_bytes, node_names=names, op_types=ops,
                                 overridable=overridable_initializers(graph))
    npy_dir = Path(npy_dir) if npy_dir is not None else default_npy_dir(model_path)
    manifest = write_arrays(arrays, npy_dir, manifest_path(model_path))
    write_manifest(manifest, manifest_path(model_path))
    report.details = {"npy_dir": str(npy_dir), "manifest": str(manifest_path(model_path)),
                      "inputs": list(manifest["inputs"])}
    return report


def embed_npy(graph: gs.Graph, model_path: str | os.PathLike) -> PassReport:
    """`embed` on a gs.Graph, in place: the inputs listed in the manifest beside `model_path`
    become initializers again, their arrays read and checked (dtype, shape, sha256)."""
    return EmbedInputs(load_feeds(model_path))(graph)
