"""Inputs for a model: generated from its declared dtypes and shapes, read from an .npz
(`--inputs`), or checked against the model's inputs.

Dynamic dimensions are 1 for the first axis and 32 elsewhere unless fixed with `shapes`;
integer inputs that feed a Gather (token ids) stay below the gathered table's size.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx

from .errors import InputError

DEFAULT_BATCH = 1
DEFAULT_DIM = 32


_ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_, "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64,
}


def parse_shapes(specs: list[str] | tuple[str, ...]) -> dict[str, list[int]]:
    """['input_ids:1x128', ...] -> {'input_ids': [1, 128]}"""
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            raise InputError(f"bad --shape '{spec}': expected NAME:DxDxD, e.g. x:1x3x224x224") from None
    return shapes


def _index_bounds(model: onnx.ModelProto | str | os.PathLike | None) -> dict[str, int]:
    """Graph inputs used as Gather indices -> the gathered table's first dimension (tables
    that are initializers or Constant nodes). A path is read without its weights' payloads."""
    if model is None:
        return {}
    if not isinstance(model, onnx.ModelProto):
        from .lazy import read_model_skipping_weights

        try:
            model = read_model_skipping_weights(Path(model))
        except (OSError, ValueError):  # the session that read it already checked the file
            return {}
    sizes = {t.name: list(t.dims) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            sizes.update((node.output[0], list(a.t.dims)) for a in node.attribute if a.name == "value")
    bounds: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[0] in sizes:
            dims = sizes[node.input[0]]
            if dims:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                n = dims[axis]
                bounds[node.input[1]] = min(bounds.get(node.input[1], n), n)
    return bounds


def make_inputs(sess, *, shapes: dict[str, list[int]] | None = None, seed: int = 0,
                model: onnx.ModelProto | str | os.PathLike | None = None) -> dict[str, np.ndarray]:
    """One sample for `sess` (module doc); with `model` (the session's model), integer inputs
    that index a table stay below its size."""
    shapes = shapes or {}
    rng = np.random.default_rng(seed)
    bounds = _index_bounds(model)
    feeds = {}
    for inp in sess.get_inputs():
        if inp.name in shapes:
            shape = shapes[inp.name]
        else:
            shape = [
                d if isinstance(d, int) and d > 0 else (DEFAULT_BATCH if i == 0 else DEFAULT_DIM)
                for i, d in enumerate(inp.shape)
            ]
        dtype = _ORT_TYPES.get(inp.type)
        if dtype is None:
            raise InputError(f"cannot generate input '{inp.name}' of type {inp.type}; pass --inputs")
        if dtype is np.bool_:
            feeds[inp.name] = np.asarray(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            high = bounds.get(inp.name, 10)
            feeds[inp.name] = rng.integers(0, high, size=shape).astype(dtype)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def load_input_samples(path: str | os.PathLike) -> list[dict[str, np.ndarray]]:
    """Read an .npz of inputs. Arrays named `name` give one sample; `name__0`, `name__1`, ...
    give several samples."""
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read inputs {path}: {e}") from e
    samples: dict[int, dict[str, np.ndarray]] = {}
    for key in data.files:
        name, sep, idx = key.rpartition("__")
        if sep and idx.isdigit():
            samples.setdefault(int(idx), {})[name] = data[key]
        else:
            samples.setdefault(0, {})[key] = data[key]
    return [samples[i] for i in sorted(samples)]


def _describe(model) -> str:
    return "the model" if isinstance(model, onnx.ModelProto) else str(model)


def check_samples(model: onnx.ModelProto | str | os.PathLike, samples: list[dict[str, np.ndarray]], *,
                  complete: bool = True) -> None:
    """Every name in `samples` (from --inputs) is an input of `model`, and with `complete` every
    input without a default is given: one line naming the key and the model's inputs, instead of
    onnxruntime's "Invalid input name". A path is read without its weights' payloads."""
    called = _describe(model)
    if not isinstance(model, onnx.ModelProto):
        from .lazy import read_model_skipping_weights

        try:
            model = read_model_skipping_weights(Path(model))
        except (OSError, ValueError):  # the session that read it already checked the file
            return
    graph = model.graph
    defaults = {t.name for t in graph.initializer}
    names = [i.name for i in graph.input]
    required = [n for n in names if n not in defaults]
    listed = ", ".join(required) or "none"
    given = {k for sample in samples for k in sample}
    unknown = sorted(given - set(names))
    if unknown:
        keys = ", ".join(f"'{k}'" for k in unknown)
        raise InputError(f"--inputs has {keys}, which {called} does not take; its inputs are: {listed}")
    missing = [n for n in required if any(n not in sample for sample in samples)] if complete else []
    if missing:
        keys = ", ".join(f"'{k}'" for k in missing)
        raise InputError(f"--inputs lacks {keys}, which {called} needs; its inputs are: {listed}")
