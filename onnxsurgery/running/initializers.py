"""A session's graph made from arrays and chosen branches (sessions._mapped_session): graph
inputs turned into initializers whose bytes are the arrays' own buffers (a mapped file's pages
referred to in place, others handed to onnxruntime without a copy, small ones inline), and If
nodes replaced by the branch a sample takes (`inline_branches`)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx

from ..errors import InputError


def inline_branches(graph: onnx.GraphProto, chosen: dict[str, str]) -> None:
    """Each If node of `graph` named in `chosen` (by its first output) replaced by the nodes of
    the branch chosen for it ("then_branch" or "else_branch"), followed by an Identity per
    output whose name differs from the If's: what the model computes on inputs that take that
    branch, with the branch's values as values of `graph`, which a session can return as
    outputs (calibration measures the weights read inside a merged decoder's If this way).
    ValueError where a name the branch defines is already one of `graph`'s (the two would
    clash once in one graph); optimum's branches name their outputs as the If's, which is kept."""
    names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    names |= {o for node in graph.node for o in node.output}
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        key = node.output[0] if node.op_type == "If" and node.output else None
        if key not in chosen:
            nodes.append(node)
            continue
        branch = next(a.g for a in node.attribute if a.name == chosen[key])
        same = {b.name for b, o in zip(branch.output, node.output) if b.name == o}
        defined = [o for n in branch.node for o in n.output if o] + [t.name for t in branch.initializer]
        clash = next((d for d in defined if d in names and d not in same), None)
        if clash is not None:
            raise ValueError(f"'{clash}' inside {node.name or key}.{chosen[key]} is also a name outside it")
        names.update(defined)
        nodes.extend(branch.node)
        graph.initializer.extend(branch.initializer)
        nodes.extend(onnx.helper.make_node("Identity", [b.name], [o]) for b, o in zip(branch.output, node.output)
                     if b.name != o)
    copies = []
    for node in nodes:  # copied before the field that holds some of them is cleared
        copies.append(onnx.NodeProto())
        copies[-1].CopyFrom(node)
    graph.ClearField("node")
    graph.node.extend(copies)


# Arrays below this size go into the protobuf itself: onnxruntime's shape inference reads the
# values of small constants (a Reshape's shape, a Slice's starts) while it loads the graph,
# and fails on an external one ("Cannot parse data from external tensors").
INLINE_INITIALIZER_BYTES = 65536
# ml_dtypes' types numpy cannot hand to onnxruntime itself: their bits go with the ONNX type
_BITS_ONLY = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")
# ... and those onnxruntime wants packed two to a byte (one per byte in numpy): inline, where
# numpy_helper.from_array packs them
_PACKED = ("int4", "uint4", "float4_e2m1fn")


def _inline(array: np.ndarray) -> bool:
    return array.nbytes < INLINE_INITIALIZER_BYTES or array.dtype.name in _PACKED


def _inputs_to_initializers(graph: onnx.GraphProto, arrays: dict[str, np.ndarray], path: Path) -> None:
    """Graph inputs named in `arrays` -> initializers: small ones hold their bytes, large ones
    are external references whose payload onnxruntime takes from the session options
    (add_external_initializers)."""
    inputs = {i.name for i in graph.input}
    unknown = sorted(set(arrays) - inputs)
    if unknown:
        raise InputError(f"{path.name} has no input '{unknown[0]}' for its .npy array (is the manifest from "
                         "another model?)")
    kept = [i for i in graph.input if i.name not in arrays]
    del graph.input[:]
    graph.input.extend(kept)
    for name, array in arrays.items():
        if _inline(array):
            graph.initializer.append(onnx.numpy_helper.from_array(array, name))
            continue
        t = graph.initializer.add()
        t.name, t.data_type = name, onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        t.dims.extend(array.shape)
        t.data_location = onnx.TensorProto.EXTERNAL
        location, offset = _mapped_file(array, path.parent) or (path.name, 0)
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(array.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value


def _mapped_file(array: np.ndarray, folder: Path) -> tuple[str, int] | None:
    """(location relative to `folder`, offset) where `array` is the whole payload of a
    memory-mapped file inside `folder` (a .npy that `npy.load_feeds` mapped, header skipped):
    onnxruntime then maps that file itself, as external data. An array handed over in memory
    (add_external_initializers) is copied into the session: a model's .npy weights were all
    held, 1.54 GB for a 1.61 GB model. None for any other array."""
    filename = getattr(array, "filename", None)
    if not isinstance(array, np.memmap) or filename is None or not array.flags.c_contiguous:
        return None
    try:
        file, base = Path(filename).resolve(), folder.resolve()
        if os.path.getsize(file) - array.offset != array.nbytes or base not in file.parents:
            return None
    except OSError:
        return None
    return file.relative_to(base).as_posix(), array.offset


def _ort_value(array: np.ndarray):
    import onnxruntime as ort

    if array.dtype.name in _BITS_ONLY:  # no copy: the OrtValue keeps the uint view (and so the array) alive
        bits = array.view(f"<u{array.dtype.itemsize}")
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.helper.np_dtype_to_tensor_dtype(array.dtype))
    return ort.OrtValue.ortvalue_from_numpy(array)
