"""`check`: what a target's parser would refuse in a model, and the same check on the result
of `quant --target tensorrt`."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx

from ..io import open_model
from ..protos import all_tensor_protos
from ..lazy import materialize
from ..report import RunReport
from ..targets.tensorrt import QUANTIZED_TYPES_PAGE, SCHEMES_PAGE, check_tensorrt, operator_list


MAX_FINDINGS_LISTED = 20
SMALL_TENSOR = 65536


def check_file(model: str | os.PathLike | onnx.ModelProto, *, target: str = "tensorrt") -> dict:
    """What the target's parser would refuse in `model` (targets/tensorrt.py): {"target",
    "source", "retrieved", "refused": one line per finding}. Weights are not read, only their types
    and shapes (and the values of small tensors: zero points, axes)."""
    if target != "tensorrt":
        raise ValueError(f"unknown target {target!r}; choose tensorrt")
    if not isinstance(model, onnx.ModelProto):
        model, files, _ = open_model(model)
        # zero points, axes and DequantizeLinear's scales (positive: targets/tensorrt.py) are checked
        # by value; weights only by type and shape
        scales = _dequantize_parameters(model.graph)
        small = [t for t in all_tensor_protos(model.graph)
                 if np.prod(t.dims, dtype=np.int64) <= SMALL_TENSOR or t.name in scales]
        materialize(model, files, small)
        files.close()
    listing = operator_list()
    return {"target": listing["release"], "source": listing["source"], "retrieved": listing["retrieved"],
            "rules": [QUANTIZED_TYPES_PAGE, SCHEMES_PAGE], "refused": [str(f) for f in check_tensorrt(model)]}


def _dequantize_parameters(graph: onnx.GraphProto) -> set[str]:
    """The scale and zero-point inputs of every DequantizeLinear in `graph` and its subgraphs."""
    names = set()
    for node in graph.node:
        if node.op_type == "DequantizeLinear":
            names.update(node.input[1:3])
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                names |= _dequantize_parameters(sub)
    return names


def _check_for_tensorrt(written: Path, report: RunReport) -> None:
    """The static check of a --target tensorrt result: each op TensorRT's parser would refuse
    becomes a warning; the findings go to the report's `target_check`."""
    report.target_check = check_file(written)
    refused = report.target_check["refused"]
    for finding in refused[:MAX_FINDINGS_LISTED]:
        report.warnings.append(f"{report.target_check['target']} would refuse {finding}")
    if len(refused) > MAX_FINDINGS_LISTED:
        report.warnings.append(f"... and {len(refused) - MAX_FINDINGS_LISTED} more (--json: target_check)")
