"""Commands that read models and write nothing: `info` (where the bytes are, what each method
would save) and `compare` (two models' outputs on the same inputs)."""

from __future__ import annotations

import numpy as np

from ..inventory import inventory
from ..storage.npy import NpyModel, with_npy_arrays
from ..defaults import MERGE_MIN_ELEMENTS
from ..running.verify import compare_models
from ._common import model_file


def info(model, *, min_bytes: int = 1024, min_elements: int = MERGE_MIN_ELEMENTS) -> dict:
    """Inventory of a model: large constants, totals, duplicates, and what each method saves."""
    return inventory(model_file(model), min_bytes=min_bytes, min_elements=min_elements)


def compare(reference, candidate, *, samples: list[dict[str, np.ndarray]] | None = None,
            shapes: dict[str, list[int]] | None = None, outputs: tuple[str, ...] | None = None) -> dict:
    """Run two models on the same inputs; per output: max abs error, relative L2 error and,
    where there is a class axis, argmax agreement. The headline is over `outputs`, by default
    the outputs other than a KV cache's (verify.compare_models).

    A model written by `npy` (a path with its manifest beside it) runs with its .npy arrays
    given as the initializers they were, as `run` gives them (not as inputs: an already
    quantized model's DequantizeLinear is fused only with constants); `npy_arrays` in the result
    says how many each side took."""
    reference, candidate = with_npy_arrays(model_file(reference)), with_npy_arrays(model_file(candidate))
    result = compare_models(reference, candidate, samples=samples, shapes=shapes, outputs=outputs)
    given = {side: len(m.npy_names) for side, m in (("reference", reference), ("candidate", candidate))
             if isinstance(m, NpyModel)}
    if given:
        result["npy_arrays"] = given
    return result
