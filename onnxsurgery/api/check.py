"""`check`: what a target's parser would refuse in a model, and the same check on the result
of `quant --target tensorrt`."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx

from ..storage.io import open_model
from ..storage.protos import all_tensor_protos
from ..storage.lazy import materialize
from ..report import RunReport
from ..targets.tensorrt import QUANTIZED_TYPES_PAGE, SCHEMES_PAGE, Finding, check_tensorrt, operator_list


MAX_FINDINGS_LISTED = 20
SMALL_TENSOR = 65536


def check_file(model: str | os.PathLike | onnx.ModelProto, *, target: str = "tensorrt") -> dict:
    """What the target's parser would refuse in `model` (targets/tensorrt.py): {"target",
    "source", "retrieved", "refused": one line per finding}. Weights are not read, only their types
    and shapes (and the values of small tensors: zero points, axes)."""
    if target != "tensorrt":
        raise ValueError(f"unknown target {target!r}; choose tensorrt")
    if not isinstance(model, onnx.ModelProto):
        model, files, _ = open_model(model, structure=True)  # a tree ensemble's tables left out
        # zero points, axes and DequantizeLinear's scales (positive: targets/tensorrt.py) are checked
        # by value; weights only by type and shape
        scales = _dequantize_parameters(model.graph)
        small = [t for t in all_tensor_protos(model.graph)
                 if np.prod(t.dims, dtype=np.int64) <= SMALL_TENSOR or t.name in scales]
        materialize(model, files, small)
        files.close()
    listing = operator_list()
    findings = check_tensorrt(model)
    refused = [str(f) for f in findings]
    return {"target": listing["release"], "source": listing["source"], "retrieved": listing["retrieved"],
            "rules": [QUANTIZED_TYPES_PAGE, SCHEMES_PAGE], "refused": refused, "next": next_step(findings)}


# words of the findings that quant --target tensorrt removes: weights stored in forms TensorRT refuses
_QUANTIZED_WORDS = ("INT8", "UINT8", "INT4", "UINT4", "DequantizeLinear", "zero point", "block", "scale",
                    "MatMulNBits", "GatherBlockQuantized")


def next_step(refused: list[Finding | str]) -> str | None:
    """What to do about the findings (issue 57, item 13): weights quantized in forms TensorRT
    refuses (a default `quant` writes forms onnxruntime runs best) are `quant --target tensorrt`'s
    to write from the float model; the model's own operators are not, and neither are quantized
    activations (a static quantizer's QuantizeLinear -> DequantizeLinear pairs on computed data: quire's
    int8 DistilBERT has 196 findings, 194 of them about its activations), which quant never writes."""
    if not refused:
        return None
    activations = [f for f in refused if isinstance(f, Finding) and f.activation]
    quantized = [f for f in refused if not (isinstance(f, Finding) and f.activation)
                 and any(word in str(f) for word in _QUANTIZED_WORDS)]
    others = len(refused) - len(quantized) - len(activations)
    parts = []
    if quantized:
        parts.append(f"{len(quantized)} of these concern quantized weights: `onnxsurgery quant FLOAT_MODEL OUT "
                     "--target tensorrt` writes, from the float model, weights in forms TensorRT takes (then "
                     "`onnxsurgery check OUT`)")
    if activations:
        parts.append(f"{len(activations)} concern quantized activations (QuantizeLinear / DequantizeLinear of "
                     "computed tensors, as a static quantizer writes them), which quant never writes and leaves as "
                     "they are: TensorRT takes them with zero points 0 (symmetric), so they need quantizing again")
    if parts:
        return "; ".join(parts) + ("" if not others else
                                   "; the others are the model's own operators, which quant leaves as they are")
    return ("these are the model's own operators, which quant leaves as they are: TensorRT needs a plugin for each, "
            "or an export without them (`quant --target tensorrt` removes only quantized forms TensorRT refuses)")


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


def check_for_tensorrt(written: Path, report: RunReport) -> None:
    """The static check of a --target tensorrt result: each op TensorRT's parser would refuse
    becomes a warning; the findings go to the report's `target_check`."""
    report.target_check = check_file(written)
    refused = report.target_check["refused"]
    for finding in refused[:MAX_FINDINGS_LISTED]:
        report.warnings.append(f"{report.target_check['target']} would refuse {finding}")
    if len(refused) > MAX_FINDINGS_LISTED:
        report.warnings.append(f"... and {len(refused) - MAX_FINDINGS_LISTED} more (--json: target_check)")
