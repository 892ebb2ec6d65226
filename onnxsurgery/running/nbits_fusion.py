"""Whether onnxruntime 1.32's default session fuses a DequantizeLinear -> MatMul (or Gemm) into
MatMulNBits, as far as the graph's structure after that node says: one rule, asked by the
report's label (labels.py, on the candidate's protos) and by the planner (quantization/choices:
int4_paths.unfused_reason, load_memory.fuses_into_nbits, on the original's gs graph), each
through its own view of the graph (`FusionView`). Read in onnxruntime's sources and measured on models
built in code (tests/test_fusion_label.py, tests/test_relu_unfused.py), in order:

1. level 1, MatMulAddFusion: a MatMul whose output only an Add reads (not a graph output), its A
   of rank 2, becomes a Gemm with that Add's constant bias. A bias of shape [N] is then fused
   into MatMulNBits with the weight (its bias input); one of shape [1, N] leaves a float Gemm
   (magika_v3's Dense_1, int4). An A of another rank gets Reshapes around the Gemm, or no Gemm.
2. level 2, the QDQ fusion: a node whose only reader is a Relu or Clip, read once and not a
   graph output, is taken for a quantized activation's node unit waiting for its
   QuantizeLinear: with none there, nothing is fused and the DequantizeLinear stays (then
   FusedGemm takes the Relu). tf2onnx's Dense layers with a ReLU (tumor_vgg16, capspot_siamese,
   `--dtype int4`): the DequantizeLinear ran at every inference, in float.

Where a rank is unknown, the MatMul is taken to stay a MatMul (no Gemm): the rule then says what
it said before it knew of MatMulAddFusion."""

from __future__ import annotations

from typing import Generic, TypeVar

N = TypeVar("N")  # a node of the view's graph
T = TypeVar("T")  # a tensor of the view's graph (a name, or a gs tensor)


class FusionView(Generic[N, T]):
    """What the rule reads of a graph; labels.py and the planner each implement it."""

    def op(self, node: N) -> str:
        raise NotImplementedError

    def output(self, node: N) -> T:
        raise NotImplementedError

    def inputs(self, node: N) -> list[T]:
        raise NotImplementedError

    def readers(self, tensor: T) -> list[N]:
        """The nodes reading `tensor`, once per edge (a node reading it twice is listed twice)."""
        raise NotImplementedError

    def is_output(self, tensor: T) -> bool:
        raise NotImplementedError

    def constant_dims(self, tensor: T) -> tuple[int, ...] | None:
        """A constant's dims, None for a tensor computed at run time."""
        raise NotImplementedError

    def rank(self, tensor: T) -> int | None:
        raise NotImplementedError


def fuses(view: FusionView, node, columns: int | None) -> bool:
    """Whether onnxruntime fuses the DequantizeLinear that `node` (a MatMul, or a Gemm without
    transA/transB) reads as B into MatMulNBits, as far as what follows `node` says (the module
    docstring); `columns`: the weight's N. Whether the DequantizeLinear itself is fusable (its
    rank, axis, blocks, one reader) is the caller's to say."""
    return why_unfused(view, node, columns) is None


def why_unfused(view: FusionView, node, columns: int | None) -> str | None:
    """Why `fuses` does not hold, for the plan's `why`; None where it holds."""
    out = view.output(node)
    if view.op(node) == "MatMul" and (gemm := _into_gemm(view, node, columns)) is not None:
        if gemm == "float":
            return ("onnxruntime makes the MatMul and the Add after it a Gemm with a [1, N] bias, which it leaves in "
                    "float: the DequantizeLinear runs at every inference")
        out = view.output(view.readers(out)[0])  # the Gemm writes the Add's output
    if (op := unfused_by(view, out)) is None:
        return None
    reader = "the Gemm onnxruntime makes of its MatMul and Add" if out != view.output(node) else f"its {view.op(node)}"
    return (f"a {op} follows {reader}: onnxruntime's QDQ fusion awaits a QuantizeLinear after the {op}, finds none "
            "and fuses nothing, so the DequantizeLinear runs at every inference, in float")


def unfused_by(view: FusionView, out) -> str | None:
    """The op (Relu or Clip) after which onnxruntime's QDQ fusion awaits a QuantizeLinear for the
    node writing `out` (NodeGroupSelector::GetQDQSelection), so that it fuses nothing; None where
    no such op follows."""
    readers = view.readers(out)
    if len(readers) != 1 or view.op(readers[0]) not in ("Relu", "Clip"):
        return None
    after = view.output(readers[0])
    return view.op(readers[0]) if len(view.readers(after)) == 1 and not view.is_output(after) else None


def float_gemm(view: FusionView, node, columns: int | None) -> bool:
    """Whether MatMulAddFusion makes the MatMul `node` a Gemm with a [1, N] bias, left in float."""
    return view.op(node) == "MatMul" and _into_gemm(view, node, columns) == "float"


def _into_gemm(view: FusionView, matmul, columns: int | None) -> str | None:
    """None where MatMulAddFusion leaves the MatMul as it is (or puts Reshapes around its Gemm),
    "nbits" where it makes a Gemm of it with a bias of shape [N], "float" with one of [1, N]."""
    out = view.output(matmul)
    readers = view.readers(out)
    if len(readers) != 1 or view.is_output(out) or view.op(readers[0]) != "Add":
        return None
    others = [t for t in view.inputs(readers[0]) if t != out]
    bias = view.constant_dims(others[0]) if len(others) == 1 else None
    if bias is None or len(bias) not in (1, 2) or columns is None or bias[-1:] != (columns,):
        return None  # a bias broadcast along N ([1]) is no Gemm's C
    if view.rank(view.inputs(matmul)[0]) != 2:
        return None
    return "nbits" if len(bias) == 1 else "float"
