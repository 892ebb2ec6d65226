"""Invariant 16: `check`'s next step is about what it counts. It tells the user how many findings
concern quantized weights, which `quant FLOAT_MODEL OUT --target tensorrt` writes in forms TensorRT
takes; a finding about a quantized activation (QuantizeLinear / DequantizeLinear of a computed tensor,
as a static quantizer writes them) is none of those: quant never writes activations. On a model
shipped statically quantized (quire_tagger: 196 findings, 194 of them its activations' pairs) check
said "99 of these concern quantized weights" (found 2026-12-01). Judged on `check --json`: the weights
it counts are at most its findings less those that name an activation's Q/DQ node (or its zero point)."""

from __future__ import annotations

import json
import re

_COUNTED = re.compile(r"^(\d+) of these concern quantized weights")
_NODE = re.compile(r"^(?:QuantizeLinear|DequantizeLinear) '(.*)': ")
_TENSOR = re.compile(r"^model: UINT8 tensor '(.*)': ")
_MOVES = {"Gather", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Slice", "Flatten", "Identity", "Expand"}


def activation_qdq(model) -> tuple[set[str], set[str]]:
    """The names of the main graph's QuantizeLinear / DequantizeLinear nodes whose data is computed (not
    an initializer or a Constant, nor only moved from one), and of their zero points."""
    graph = model.graph
    constants = {t.name for t in graph.initializer} | {n.output[0] for n in graph.node if n.op_type == "Constant"}
    for n in graph.node:  # a quantized table read by Gather (then DequantizeLinear) is still a weight
        if n.op_type in _MOVES and n.input and n.input[0] in constants:
            constants.update(n.output)
    nodes = [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input
             and n.input[0] not in constants]
    return {n.name for n in nodes}, {n.input[2] for n in nodes if len(n.input) > 2 and n.input[2]}


def advice_holds(check_json: str, activation_nodes: set[str], activation_zero_points: set[str] = frozenset()
                 ) -> list[str]:
    try:
        result = json.loads(check_json)
        refused, advice = list(result["refused"]), result.get("next") or ""
    except (ValueError, KeyError, TypeError) as e:
        return [f"no findings in check --json ({type(e).__name__})"]
    counted = _COUNTED.match(advice)
    if not counted:
        return []
    about_activations = sum(1 for f in refused if (m := _NODE.match(f)) and m.group(1) in activation_nodes
                            or (m := _TENSOR.match(f)) and m.group(1) in activation_zero_points)
    if int(counted.group(1)) > len(refused) - about_activations:
        return [f"check counts {counted.group(1)} of its {len(refused)} findings as quantized weights for `quant "
                f"--target tensorrt` to rewrite, but {about_activations} are about quantized activations, which "
                "quant never writes"]
    return []


def check_holds(model_path) -> list[str]:
    """Invariant 16 on a model file: its `check --json` (a second, cheap run: the zoo's `check` row is the
    text form) judged against the activation Q/DQ nodes of its structure (no payloads read)."""
    import subprocess

    import onnx

    from zoo.processes import ours

    r = subprocess.run(ours("check", "--json", model_path), capture_output=True, text=True, timeout=600)
    if r.returncode not in (0, 1):
        return []  # check's exit is invariant 1's (clean_exit on the text run)
    nodes, zero_points = activation_qdq(onnx.load(str(model_path), load_external_data=False))
    return advice_holds(r.stdout, nodes, zero_points)
