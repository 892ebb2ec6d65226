"""The user's samples (--inputs, --calibration): read from an .npz, and checked against the
model's inputs in one line naming the key, instead of onnxruntime's own words."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx

from ..errors import InputError


def load_input_samples(path: str | os.PathLike) -> list[dict[str, np.ndarray]]:
    """Read an .npz of inputs. Arrays named `name` give one sample; `name__0`, `name__1`, ...
    give several samples."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise InputError(f"cannot read inputs {path}: {e.strerror or e}") from e
    if magic != b"PK\x03\x04":  # numpy would try it as a pickle and say so in its own words
        raise InputError(f"inputs {path} is not an .npz file (arrays by input name, as "
                         "numpy.savez('x.npz', input_ids=...) writes them)")
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


def describe_model(model) -> str:
    """How an error names `model`: its path, or "the model" for a ModelProto."""
    return "the model" if isinstance(model, onnx.ModelProto) else str(model)


def check_samples(model: onnx.ModelProto | str | os.PathLike, samples: list[dict[str, np.ndarray]], *,
                  complete: bool = True, flag: str = "--inputs") -> None:
    """Every name in `samples` (from --inputs) is an input of `model`, and with `complete` every
    input without a default is given: one line naming the key and the model's inputs, instead of
    onnxruntime's "Invalid input name". A path is read without its weights' payloads."""
    called = describe_model(model)
    arrays = getattr(model, "npy_names", frozenset())  # npy.NpyModel: inputs its .npy arrays fill
    if not isinstance(model, onnx.ModelProto):
        from ..storage.skim import read_structure

        try:
            model = read_structure(Path(model))
        except (OSError, ValueError):  # the session that read it already checked the file
            return
    graph = model.graph
    defaults = {t.name for t in graph.initializer}
    names = [i.name for i in graph.input if i.name not in arrays]
    required = [n for n in names if n not in defaults]
    listed = ", ".join(required) or "none"
    given = {k for sample in samples for k in sample}
    unknown = sorted(given - set(names))
    if unknown:
        keys = ", ".join(f"'{k}'" for k in unknown)
        raise InputError(f"{flag} has {keys}, which {called} does not take; its inputs are: {listed}")
    missing = [n for n in required if any(n not in sample for sample in samples)] if complete else []
    if missing:
        keys = ", ".join(f"'{k}'" for k in missing)
        raise InputError(f"{flag} lacks {keys}, which {called} needs; its inputs are: {listed}")
