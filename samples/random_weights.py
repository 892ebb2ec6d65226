"""Random weights for samples/make_decoder.py, planned while its graph is built and drawn and
written afterwards: each tensor in chunks of CHUNK elements, each chunk from its own seed, on a few
threads, at its offset in one external-data file. Memory stays at a few chunks whatever the model's
size, and the bytes are the same for any thread count."""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import numpy as np
from onnx import TensorProto

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when loaded by path (tests, bench)
from external_data import DataFileWriter  # noqa: E402

CHUNK = 1 << 23  # elements drawn at once: 32 MB of float32
STD = 0.02
DTYPES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}

@dataclass
class _Spec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int
    std: float = STD
    mean: float = 0.0
    array: np.ndarray | None = None  # a fixed value (rotary tables) instead of random

    @property
    def count(self) -> int:
        return math.prod(self.shape)


def _to_bytes(values: np.ndarray, dtype: str) -> bytes | memoryview:
    """float32 `values` as the raw little-endian bytes of `dtype`."""
    if dtype == "float32":
        return memoryview(np.ascontiguousarray(values, np.float32)).cast("B")
    if dtype == "float16":
        return memoryview(values.astype(np.float16)).cast("B")
    try:
        import ml_dtypes

        return memoryview(values.astype(ml_dtypes.bfloat16).view(np.uint16)).cast("B")
    except ImportError:  # round to nearest even on the upper 16 bits of float32
        bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
        return memoryview(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)).cast("B")


@dataclass
class WeightFile:
    """Weights placed in `data` while the graph is built, drawn and written afterwards."""
    data: DataFileWriter
    init: str = "normal"
    seed: int = 0
    specs: list[_Spec] = field(default_factory=list)

    def add(self, name: str, shape, dtype: str, *, std: float = STD, mean: float = 0.0,
            array: np.ndarray | None = None) -> TensorProto:
        """Plan one tensor (random, or `array`) and return its external TensorProto."""
        shape = tuple(int(d) for d in shape)
        tensor, offset = self.data.place(name, shape, DTYPES[dtype], math.prod(shape) * ITEMSIZE[dtype])
        self.specs.append(_Spec(name, shape, dtype, offset, std, mean, array))
        return tensor

    def _chunk(self, index: int, spec: _Spec, start: int) -> bytes | memoryview:
        count = min(CHUNK, spec.count - start)
        if spec.array is not None:
            return _to_bytes(spec.array.reshape(-1)[start:start + count].astype(np.float32), spec.dtype)
        rng = np.random.default_rng([self.seed, index, start // CHUNK])
        if self.init == "uniform":  # same std: uniform on [-a, a] has std a / sqrt(3)
            values = rng.random(count, dtype=np.float32)
            values -= 0.5
            values *= 2 * math.sqrt(3) * spec.std
        else:
            values = rng.standard_normal(count, dtype=np.float32)
            values *= spec.std
        if spec.mean:
            values += spec.mean
        return _to_bytes(values, spec.dtype)

    def write(self, threads: int = 2, progress: bool = False) -> None:
        """Draw every planned tensor, chunk by chunk on `threads` threads, and write it at its
        offset; at most 2 x threads chunks are in memory at a time."""
        jobs = ((i, spec, start) for i, spec in enumerate(self.specs) for start in range(0, spec.count, CHUNK))
        t0 = shown = time.perf_counter()
        with ThreadPoolExecutor(max(1, threads)) as pool:
            def submit(count: int) -> list:
                return [(job, pool.submit(self._chunk, *job)) for job in islice(jobs, count)]

            pending = deque(submit(2 * max(1, threads)))
            while pending:
                (_, spec, start), future = pending.popleft()
                pending.extend(submit(1))
                self.data.write(future.result(), spec.offset + start * ITEMSIZE[spec.dtype])
                if progress and time.perf_counter() - shown > 2:
                    written, shown = self.data.file.tell(), time.perf_counter()
                    print(f"  {written / 1e9:.2f} / {self.data.end / 1e9:.2f} GB, "
                          f"{written / 1e6 / (shown - t0):.0f} MB/s", file=sys.stderr)
