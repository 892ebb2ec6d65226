"""Tensors streamed into one external-data file at 4096-byte-aligned offsets (as onnx aligns them,
for onnxruntime to memory-map), zeros between: `add` appends; `place` then `write`, to write later."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper


class DataFileWriter(AbstractContextManager):
    """The file `path`, named `location` in the model (default: its name); `tensors`: those placed."""

    def __init__(self, path: Path, location: str | None = None):
        self.file, self.location, self.end, self.tensors = open(path, "wb"), location or Path(path).name, 0, []

    def __exit__(self, *exc) -> None:
        self.file.close()

    def place(self, name: str, dims, data_type: int, nbytes: int) -> tuple[TensorProto, int]:
        """Reserve `nbytes` at the next aligned offset: the initializer that references them, the offset."""
        offset = self.end + (-self.end % 4096)
        self.end = offset + nbytes
        tensor = TensorProto(name=name, data_type=data_type, dims=list(dims), data_location=TensorProto.EXTERNAL)
        for key, value in (("location", self.location), ("offset", str(offset)), ("length", str(nbytes))):
            tensor.external_data.add(key=key, value=value)
        self.tensors.append(tensor)
        return tensor, offset

    def write(self, data, offset: int) -> None:
        """Write bytes at `offset`, at or past everything written so far (zeros between)."""
        assert offset >= self.file.tell(), f"offset {offset} is behind {self.file.tell()}"
        self.file.write(b"\0" * (offset - self.file.tell()))
        self.file.write(data)

    def add(self, name: str, array: np.ndarray) -> TensorProto:
        """Append `array`: the initializer that references it."""
        tensor, offset = self.place(name, array.shape, helper.np_dtype_to_tensor_dtype(array.dtype), array.nbytes)
        self.write(np.ascontiguousarray(array), offset)
        return tensor
