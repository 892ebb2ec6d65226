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
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from .errors import UnsupportedModelError
from .graph_utils import make_names_unique
from .io import import_graph as _import_graph
from .io import inputs_with_defaults, load_model
from .passes.bypass_identity import bypass_constant_identities
from .pipeline import remove_dead
from .quant.options import QuantOptions
from .quant.schemes import required_opset
from .passes.quantize_weights import quantize_weights as _quantize_weights
from .report import PassReport

# Stored narrower than the float32 they stand for: what dequantization or a Cast widens.
_NARROW_STORAGE = (np.int8, np.uint8, np.float16)
_MIN_WEIGHT_ELEMENTS = 16  # smaller constants (zero points, shapes) may fold freely


def import_graph(source: str | os.PathLike | onnx.ModelProto) -> gs.Graph:
    """A gs.Graph of the model (a path, external data read in, or a ModelProto), ready for the
    passes: tensor names unique across scopes, attributes gs cannot import carried through, and
    overridable initializers kept among `graph.inputs` as constants (gs drops them, so a script
    could no longer tell them from weights)."""
    model = load_model(source)
    graph = _import_graph(model)
    make_names_unique(graph)
    defaults = inputs_with_defaults(model)
    if defaults:
        constants = {t.name: t for t in graph.tensors().values() if isinstance(t, gs.Constant) and t.name in defaults}
        listed = {t.name: t for t in graph.inputs}
        graph.inputs = [listed.get(i.name) or constants[i.name] for i in model.graph.input
                        if i.name in listed or i.name in constants]
    return graph


def quantize_weights(graph: gs.Graph, **options) -> PassReport:
    """`quant`'s weight quantization on a gs.Graph, in place: `options` as QuantOptions (dtype,
    granularity, block_size, keep_quantized, ...; ValueError for an unknown choice). Identity
    nodes in front of weights are bypassed first, so that the quantizer sees their readers.
    The graph's opset must already be what the scheme needs (`quant_file` upgrades files; here
    UnsupportedModelError says which opset). Not verified: compare the result yourself
    (`onnxsurgery.compare`)."""
    quant_options = QuantOptions(**options)
    needed = required_opset(quant_options)
    if graph.opset < needed:
        raise UnsupportedModelError(f"this scheme needs opset {needed}; the graph is opset {graph.opset}: "
                                    "upgrade the model first (onnx.version_converter), or use quant_file, which does")
    bypassed = bypass_constant_identities(graph)
    remove_dead(graph)  # the bypassed Identity nodes must not count as readers
    report = _quantize_weights(graph, options=quant_options, opset=graph.opset)
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
