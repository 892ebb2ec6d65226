"""Runs that map gigabytes of large buffers afresh: where onnxruntime's arena pays after all for
activations of 32 MiB or more (arena.py's verdict asks `refaults`), and the shapes of generated
inputs known before any session (`fixed_feeds`: a model whose inputs are fixed but the batch).

Why (round 37, inputs18, fresh processes, bench/run_cost.py, a run of a tune sample, CPU /
system / peak RSS): without the arena glibc maps every buffer of 32 MiB or more afresh and the
kernel faults it in at every run. czann_nucleus_det (1024 x 1024 tiles: 57 values of 32-96 MiB,
2.07 GiB a run) 1.52-1.64 / 0.84-1.01 s / 418 MB -> 0.54-0.69 / 0.01-0.12 s / 413 MB with it;
isnet_quint8 (51, 2.59 GiB) 3.57 / 1.21 s / 872 MB -> 2.43 / 0.30 s / 959 MB. isnet_fp16, whose
shapes resolve 23% of its values, stays without (2.32 -> 2.03 s for 1147 -> 1359 MB). The arena's
extra (measured: within one largest activation; 65-95 MB on czann's whole commands) must fit the
room docs/memory.md's bound leaves beside one run's activations, as verification's extra samples
must (batch_budget.py).
"""

from __future__ import annotations

import numpy as np
import onnx

# what a run's values of 32 MiB or more sum to where the arena pays for them (refaults)
LARGE_TRAFFIC = 1 << 30

# docs/memory.md's slack and times the largest weight (zoo/memory_bounds.py): what the bound leaves
# beside one run's activations (batch_budget.py's extra samples, the arena here)
EXTRA_ROOM = 128 << 20
TIMES_LARGEST = 8


def refaults(model, sizes: dict[str, int], large: int) -> bool:
    """Whether `sizes` (a run's values, shape inference's) hold values of `large` bytes or more that
    sum to LARGE_TRAFFIC or more, the largest within EXTRA_ROOM + TIMES_LARGEST x `model`'s largest
    weight (module doc)."""
    traffic = sum(size for size in sizes.values() if size >= large)
    largest = max(sizes.values(), default=0)
    return traffic >= LARGE_TRAFFIC and largest <= EXTRA_ROOM + TIMES_LARGEST * largest_weight(model)


def fixed_feeds(model, shapes=None) -> dict | None:
    """Shapes-only arrays (no memory) for generated inputs of `model` (a path) where every input is
    fixed in every axis but a first one (the batch, generated at 1); None elsewhere, or where
    `shapes` (--shape) are given: the session sizes those."""
    from .feeds import DEFAULT_BATCH, _structure

    structure = None if shapes or isinstance(model, onnx.ModelProto) else _structure(model)
    if structure is None:
        return None
    weights = {t.name for t in structure.graph.initializer}
    feeds = {}
    for value in structure.graph.input:
        if value.name in weights:
            continue
        kind = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not kind.HasField("shape"):
            return None
        dims = [d.dim_value if d.HasField("dim_value") else None for d in kind.shape.dim]
        if dims[:1] == [None]:
            dims[0] = DEFAULT_BATCH
        if None in dims:
            return None
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(kind.elem_type)
        except (KeyError, TypeError, ValueError):
            return None
        feeds[value.name] = np.broadcast_to(np.zeros((), dtype), dims)
    return feeds or None


def largest_weight(model) -> int:
    """Bytes of the main graph's largest initializer or Constant node's tensor, from the file's
    structure (feeds._structure: no payload read)."""
    from .feeds import _structure

    structure = _structure(model)
    if structure is None:
        return 0
    tensors = [*structure.graph.initializer, *(a.t for node in structure.graph.node if node.op_type == "Constant"
                                               for a in node.attribute if a.name == "value")]
    return max((_bytes(t) for t in tensors), default=0)


def _bytes(tensor: onnx.TensorProto) -> int:
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        itemsize = 4
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize
