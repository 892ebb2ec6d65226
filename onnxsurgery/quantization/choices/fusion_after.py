"""The planner's view of running/nbits_fusion.py's rule: whether onnxruntime fuses a weight's
DequantizeLinear into its reader's MatMulNBits, as far as what follows the reader says (a Relu or
Clip read once: tumor_vgg16's and capspot_siamese's Dense layers; a MatMul made a float Gemm with a
[1, N] bias), on the original's gs graph. The report's label asks the same rule of the candidate's
protos (running/labels.py), so that a plan and its header agree.

A rank the graph's tensors do not carry comes from onnx's shape inference over the graph's
structure (weights as typed inputs, small integer constants with their values: Reshape's shape),
run once per graph and only where a MatMul's Add asks (MatMulAddFusion needs A of rank 2)."""

from __future__ import annotations

import math
import weakref

import numpy as np

import onnx
import onnx_graphsurgeon as gs

from ...graph_utils import ConstantSite, iter_scopes, onnx_dtype
from ...running.nbits_fusion import FusionView, why_unfused

RESHAPE_PASSES = 3  # inference runs: a Reshape's rank given after each (_reshape_ranks)
SMALL_CONSTANT = 64  # integer constants up to this many elements keep their values for inference (shapes)
INTEGERS = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
_RANKS: dict[int, dict[str, int]] = {}  # id(main graph) -> inferred ranks, dropped with the graph


def unfused_after(site: ConstantSite, node: gs.Node) -> str | None:
    """Why onnxruntime does not fuse `site`'s DequantizeLinear, read as B by `node` (a MatMul, or
    a Gemm without transA/transB), into MatMulNBits, given what follows `node`; None where it does."""
    return why_unfused(_GsView(_main(site)), node, site.shape[-1] if len(site.shape) == 2 else None)


class _GsView(FusionView):
    def __init__(self, graph: gs.Graph):
        self.graph, self._outputs = graph, None

    def op(self, node):
        return node.op

    def output(self, node):
        return node.outputs[0]

    def inputs(self, node):
        return list(node.inputs)

    def readers(self, tensor):
        return [n for n in tensor.outputs for t in n.inputs if t is tensor]

    def is_output(self, tensor):
        if self._outputs is None:  # every scope's outputs (a reader may sit in an If branch)
            self._outputs = {id(out) for scope in iter_scopes(self.graph) for out in scope.graph.outputs}
        return id(tensor) in self._outputs

    def constant_dims(self, tensor):
        if isinstance(tensor, gs.Constant):
            return tuple(int(d) for d in tensor.shape)
        made = tensor.inputs[0] if len(tensor.inputs) == 1 else None
        if made is not None and made.op == "Constant" and isinstance(made.attrs.get("value"), gs.Constant):
            return tuple(int(d) for d in made.attrs["value"].shape)
        return None

    def rank(self, tensor):
        if isinstance(tensor, gs.Constant) or tensor.shape is not None:
            return len(tensor.shape)
        key = id(self.graph)
        if key not in _RANKS:
            _RANKS[key] = _inferred_ranks(self.graph)
            weakref.finalize(self.graph, _RANKS.pop, key, None)
        return _RANKS[key].get(tensor.name)


def _main(site: ConstantSite) -> gs.Graph:
    scope = site.scope
    while scope.parent is not None:
        scope = scope.parent
    return scope.graph


def _inferred_ranks(graph: gs.Graph) -> dict[str, int]:
    """name -> rank for the main graph's tensors, by onnx's shape inference over its structure:
    no weight's payload is read (a node holding a subgraph is left out, its outputs untyped)."""
    from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter

    try:
        nodes, inputs, initializers, seen = [], [], [], set()
        for t in graph.inputs:
            inputs.append(OnnxExporter.export_value_info_proto(t, do_type_check=False))
            seen.add(t.name)
        for node in graph.nodes:
            if any(isinstance(v, gs.Graph) for v in node.attrs.values()):
                for out in node.outputs:
                    if out.name not in seen:
                        inputs.append(onnx.helper.make_tensor_value_info(out.name, onnx.TensorProto.FLOAT, None))
                        seen.add(out.name)
                continue
            value = node.attrs.get("value") if node.op == "Constant" else None
            if isinstance(value, gs.Constant) and not _small_integers(value) and node.outputs[0].name not in seen:
                inputs.append(onnx.helper.make_tensor_value_info(  # its payload left out, as an initializer's
                    node.outputs[0].name, onnx_dtype(value), list(value.shape)))
                seen.add(node.outputs[0].name)
                continue
            nodes.append(OnnxExporter.export_node(node))
            for t in node.inputs:
                if not isinstance(t, gs.Constant) or t.name in seen:
                    continue
                seen.add(t.name)
                if _small_integers(t):
                    initializers.append(onnx.numpy_helper.from_array(np.asarray(t.values), t.name))
                else:
                    inputs.append(onnx.helper.make_tensor_value_info(t.name, onnx_dtype(t), list(t.shape)))
        model = onnx.helper.make_model(
            onnx.helper.make_graph(nodes, "structure", inputs, [], initializers),
            opset_imports=graph.import_domains or [onnx.helper.make_opsetid("", graph.opset)])
        for _ in range(RESHAPE_PASSES):
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
            ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in inferred.graph.value_info
                     if v.type.tensor_type.HasField("shape")}
            hints = _reshape_ranks(inferred, ranks)
            if not hints:
                return ranks
            model.graph.value_info.extend(hints)
    except Exception:  # an inference error says nothing of the model: no rank
        return {}
    return ranks


def _small_integers(t: gs.Constant) -> bool:
    """Whether the constant's values go into the structure (a shape, starts and ends: cheap)."""
    return onnx_dtype(t) in INTEGERS and math.prod(t.shape) <= SMALL_CONSTANT


def _reshape_ranks(inferred: onnx.ModelProto, ranks: dict[str, int]) -> list[onnx.ValueInfoProto]:
    """A Reshape whose shape is computed (tf2onnx's Flatten: Shape -> Slice -> Concat) gets no rank
    from onnx's inference even where the shape's length is known (tumor_vgg16's [2]), as it does in
    onnxruntime's: that rank, as a hint for the next pass."""
    lengths = {v.name: v.type.tensor_type.shape.dim for v in inferred.graph.value_info}
    hints = []
    for node in inferred.graph.node:
        if node.op_type != "Reshape" or node.output[0] in ranks or len(node.input) < 2:
            continue
        dims = lengths.get(node.input[1])
        if dims is not None and len(dims) == 1 and dims[0].HasField("dim_value"):
            hints.append(onnx.helper.make_tensor_value_info(
                node.output[0], onnx.TensorProto.UNDEFINED, [None] * dims[0].dim_value))
    return hints
