"""Bytes a tensor's values take stored raw, from its ONNX type and element count: no gs here, so
that opening a model (storage/io.py's size checks) loads no onnx-graphsurgeon where no graph is
made (`shrink`'s direct path). graph_utils gives the same function to the graph's readers."""

from __future__ import annotations

import functools

import numpy as np
import onnx

_BITS = {onnx.TensorProto.INT4: 4, onnx.TensorProto.UINT4: 4}
if hasattr(onnx.TensorProto, "FLOAT4E2M1"):
    _BITS[onnx.TensorProto.FLOAT4E2M1] = 4


def payload_nbytes(data_type: int, count: int) -> int:
    """Bytes `count` values of ONNX type `data_type` take stored raw (4-bit types packed).
    Raises KeyError or ValueError for a type numpy has no size for (string, undefined)."""
    bits = _BITS.get(data_type)
    if bits is not None:
        return (count * bits + 7) // 8
    return count * _itemsize(data_type)


@functools.lru_cache(maxsize=None)
def _itemsize(data_type: int) -> int:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type)).itemsize

