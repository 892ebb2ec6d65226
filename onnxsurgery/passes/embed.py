"""Turn graph inputs back into constants: the inverse of `externalize`.

Before: main-graph inputs whose values are known (read from .npy files by `npy.load_feeds`).
After: each is an initializer of the same name, dtype and shape; consumers in every scope
read it, and the input is gone from the graph's interface.

Arrays of ml_dtypes' types (bfloat16, float8, 4-bit: what `npy.load_feeds` gives back for them)
become onnx's own TensorProto (4-bit packed two to a byte, which gs cannot export from numpy),
so the initializer is the one `externalize` took, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_graphsurgeon as gs
from onnx import numpy_helper
from onnx_graphsurgeon.ir.tensor import LazyValues

from ..errors import InputError
from ..graph_utils import c_order, replace_uses
from ..storage.npy import BIT_PATTERN_DTYPES
from ..report import PassReport
from .base import Estimate, PassBase


@dataclass(frozen=True, eq=False)
class EmbedInputs(PassBase):
    """The main-graph inputs named in `arrays` made initializers of those values (module doc);
    InputError where the model has no such input."""

    arrays: dict[str, np.ndarray]
    name = "embed"

    def estimate(self, graph: gs.Graph, *, overridable: frozenset[str],
                 removed: frozenset[int] = frozenset()) -> Estimate:
        return Estimate(self.name)  # it adds bytes to the .onnx: those the .npy files held

    def apply(self, graph: gs.Graph, *, overridable: frozenset[str]) -> PassReport:
        report = PassReport(self.name)
        by_name = {t.name: t for t in graph.inputs}
        unknown = sorted(set(self.arrays) - set(by_name))
        if unknown:
            raise InputError(f"the manifest names inputs the model does not have: {', '.join(unknown)}")
        for name, array in self.arrays.items():
            var = by_name[name]
            var.name = f"{name}__embedded"
            const = _constant(name, array)
            replace_uses(var, const)
            graph.inputs[:] = [t for t in graph.inputs if t is not var]  # by identity: gs == is by name
            report.changed += 1
        report.details = {"embedded": list(self.arrays)}
        return report


def _constant(name: str, array: np.ndarray) -> gs.Constant:
    if array.dtype.name in BIT_PATTERN_DTYPES:
        return gs.Constant(name, LazyValues(numpy_helper.from_array(c_order(array), name)))
    return gs.Constant(name, c_order(array))
